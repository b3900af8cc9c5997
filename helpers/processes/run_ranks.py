"""Launching a small multi-process PyTorch program from a notebook.

The ranks get the rendezvous environment ``torchrun`` gives them (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ...) and one thread each, from ``helpers.processes.launcher``, which starts them in
less time (it forks them after importing torch once), so the same program runs under
``torchrun --nproc-per-node=2 -m MODULE`` unchanged."""

from __future__ import annotations

import os
import platform
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.arguments import positive_int
from helpers.processes.launch_server import LAUNCH_SERVER, ServedLauncher
from helpers.processes.launcher import FORK_RANKS, STACKS_ON_STOP
from helpers.translation import _

ROOT = Path(__file__).resolve().parents[2]
# The ranks' path: the repository, and the loop auditor's package (a distribution of its own,
# in loop_auditor/src/), for a course that is not installed (Colab, a notebook run from the
# repository): with the root alone, loop_auditor/ would be an empty namespace package.
RANK_PATHS = (ROOT, ROOT / "loop_auditor" / "src")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pick_backend(nproc: int) -> str:
    """``nccl`` when there is one CUDA GPU per process, else ``gloo`` (processes on the CPU)."""
    if torch.cuda.is_available() and torch.cuda.device_count() >= nproc:
        return "nccl" if torch.distributed.is_nccl_available() else "gloo"
    return "gloo"


def launcher_command(
    module: str,
    nproc: int,
    args: list[str],
    port: int,
    finish_grace: float | None = None,
    preload: Sequence[str] = (),
) -> list[str]:
    """``python -m helpers.processes.launcher``: ``nproc`` ranks of ``module`` on
    127.0.0.1:``port``, the modules in ``preload`` imported before the ranks are forked."""
    grace = [] if finish_grace is None else [f"--finish-grace={finish_grace}"]
    return [
        sys.executable,
        "-m",
        "helpers.processes.launcher",
        f"--nproc={nproc}",
        f"--port={port}",
        *grace,
        *(f"--preload={name}" for name in preload),
        module,
        *args,
    ]


# What a DDP program's ranks import: DistributedDataParallel() imports torch._dynamo (about
# 2 CPU-seconds after torch), so the launcher imports it once, before it forks the ranks.
DDP_PRELOAD = ("torch._dynamo",)


def launch(
    module: str,
    args: list[str],
    nproc: int = 2,
    timeout: float = 120,
    finish_grace: float | None = None,
    preload: Sequence[str] = DDP_PRELOAD,
) -> str:
    """Run ``module`` in ``nproc`` processes (``helpers.processes.launcher``) and return its output.

    The processes get one thread each, the repository and the loop auditor (RANK_PATHS) on their
    path, a free port on 127.0.0.1, and their own process group, which is killed as a whole on
    timeout or interrupt. Raises ``RuntimeError`` with the end of the output if the run fails. With
    ``finish_grace`` (seconds), ranks still running that long after one has finished well are
    stopped, and the run fails saying they were probably waiting in a collective. ``preload``:
    the modules the launcher imports before it forks the ranks (by default what
    DistributedDataParallel imports; ``()`` for a program that uses no torch)."""
    positive_int(nproc, "nproc")
    if isinstance(preload, str) or not all(isinstance(name, str) for name in preload):
        raise TypeError(
            _(
                "preload takes module names in a tuple, such as ('torch._dynamo',), got {preload!r}"
            ).format(preload=preload)
        )
    if finish_grace is not None and (
        isinstance(finish_grace, bool)
        or not isinstance(finish_grace, (int, float))
        or not 0 < finish_grace < timeout
    ):
        raise ValueError(
            _(
                "finish_grace must be None or a number of seconds above 0 and below "
                "timeout ({timeout:g}), got {finish_grace!r}"
            ).format(timeout=timeout, finish_grace=finish_grace)
        )
    if not torch.distributed.is_available():
        raise RuntimeError(
            "this torch build has no torch.distributed: install the standard build from "
            "pytorch.org (pip install torch) to run the multi-process part"
        )
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    paths = [*map(str, RANK_PATHS), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    env.setdefault("GM_DDP_BACKEND", pick_backend(nproc))
    env["GM_LAUNCHER_PID"] = str(os.getpid())  # ranks end if this process dies
    if platform.system() == "Darwin":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo0")  # gloo on macOS: use the loopback
    for attempt in (1, 2):  # a port found free can be taken before rank 0 binds it
        command = launcher_command(module, nproc, args, free_port(), finish_grace, preload)
        process = start_launcher(command, env, tuple(preload))
        try:
            output, _errors = process.communicate(timeout=timeout)
        except BaseException as error:  # timeout, Ctrl-C, kernel interrupt: no stray ranks
            output = _stop(process)
            if isinstance(error, subprocess.TimeoutExpired):
                message = f"the {nproc}-process run took over {timeout:g} s and was stopped"
                if env.get(STACKS_ON_STOP):  # CI: where the ranks waited, for whoever debugs
                    print(f"{message}; its output:\n{output[-20000:]}", file=sys.__stderr__)
                raise RuntimeError(message) from None
            raise
        port_taken = "EADDRINUSE" in output or "address already in use" in output.lower()
        if process.returncode == 0 or not port_taken or attempt == 2:
            break
    if process.returncode != 0:
        raise RuntimeError(
            f"the {nproc}-process run failed (exit {process.returncode}):\n"
            f"{first_error(output)}{_collective_hint(output)}"
        )
    return output


def start_launcher(command: list[str], env: dict[str, str], preload: tuple[str, ...]):
    """Start ``command`` (``launcher_command``'s): a process of its own, in its own process
    group, whose output (stdout and stderr) ``communicate`` returns as text; forked by a launch
    server instead where ``env`` names a folder for one (Linux only)."""
    folder = env.get(LAUNCH_SERVER)
    if folder and FORK_RANKS and os.path.isdir(folder):
        try:
            return ServedLauncher(folder, command[3:], env, str(ROOT), preload)
        except OSError:
            pass  # no server: a process of its own, as without one
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: one kill reaches every rank
    )


COLLECTIVE_FAILURES = ("Timed out waiting", "Connection closed by peer", "timed out after")


def _collective_hint(output: str) -> str:
    """What a collective's timeout or a peer gone away usually means, in plain words."""
    if not any(text in output for text in COLLECTIVE_FAILURES):
        return ""
    return (
        "\n(what it usually means: a rank waited in a collective, an all-reduce or a barrier, "
        "that another rank never joined, or whose rank had ended: the ranks ran different "
        "numbers of collectives, for example of synchronized micro-batches)"
    )


def _stop(process: subprocess.Popen) -> str:
    """Stop the launcher and its ranks: SIGTERM to their process group first, then SIGKILL
    if they have not ended in 40 s. Returns what they printed that was not yet read."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        output, _errors = process.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _errors = process.communicate()
    except ProcessLookupError:
        output, _errors = process.communicate()
    return output or ""


def first_error(output: str) -> str:
    """What the ranks printed before a launcher's own report (torchrun's log lines start like
    ``E1130 11:53:35``): the first exception with the lines leading to it, else the end."""
    lines = [re.sub(r"^\[rank\d+\]: ", "", line) for line in output.splitlines()]
    end = next((i for i, line in enumerate(lines) if re.match(r"[EWI]\d{4} ", line)), len(lines))
    ranks = lines[:end] or lines
    for index, line in enumerate(ranks):
        if re.match(r"[\w.]+(Error|Exception): ", line):
            return "\n".join(ranks[max(0, index - 6) : index + 1])
    return "\n".join(ranks[-15:])
