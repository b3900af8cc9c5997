"""Start the ranks of a one-machine PyTorch program the way ``torchrun`` does, in less time.

    python -m helpers.processes.launcher --nproc 2 --port 29500 [--preload M] MODULE [ARGS ...]

Each rank runs ``python -m MODULE ARGS`` with the environment torchrun gives it (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1``,
``MASTER_PORT``), so a program that runs here runs under ``torchrun`` unchanged. The
difference is the start-up: torchrun starts a fresh interpreter per rank, and each imports
torch and, on its first ``DistributedDataParallel``, ``torch._dynamo`` (about 2 s a rank on
one slow core). On Linux this launcher imports the modules named with ``--preload`` once
(``torch._dynamo`` for a DDP program, which imports torch too; nothing for a program that
needs no torch) and forks the ranks from itself; elsewhere (no safe ``fork``) each rank is a
fresh interpreter, as under torchrun.

When a rank fails, the others are stopped and the launcher exits with the failing rank's code.
With ``--finish-grace S``, ranks still running S seconds after one has finished well are
stopped too (exit code 1): they are most likely waiting in a collective the finished rank
never joined.
It ends with its ranks on SIGTERM or SIGINT (``helpers.processes.run_ranks.launch`` sends SIGTERM to
its whole process group on a timeout).
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import runpy
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence

FORK_RANKS = sys.platform.startswith("linux")


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (``os.kill(pid, 0)`` sends no signal)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def rank_environment(rank: int, world: int, port: int) -> dict[str, str]:
    """What torchrun sets for rank ``rank`` of ``world`` processes on one machine."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "GROUP_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def _run_forked_rank(module: str, args: list[str], env: dict[str, str]) -> None:
    """In a forked child: run ``module`` as ``__main__``, then leave with its exit code."""
    code = 1
    try:
        os.environ.update(env)
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:  # sys.exit("message"): Python prints the message and exits with 1
            print(stop.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
# Set (to anything) in the environment, a forked rank stopped by SIGTERM first prints every
# thread's Python stack: CI sets it, so that a run stopped on a timeout shows where it waited.
STACKS_ON_STOP = "GM_RANK_STACKS"


def _start_ranks(
    module: str, args: list[str], world: int, port: int, ranks: dict[int, object]
) -> None:
    """Start every rank, recording each in ``ranks`` (``{rank: pid}`` when forked, else
    ``{rank: Popen}``) as soon as it exists, so that a stop signal reaches it."""
    for rank in range(world):
        env = rank_environment(rank, world, port)
        if FORK_RANKS:
            sys.stdout.flush()
            sys.stderr.flush()
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # held until recorded
            pid = os.fork()
            if pid == 0:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the rank's own defaults
                signal.signal(signal.SIGINT, signal.default_int_handler)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
                if os.environ.get(STACKS_ON_STOP):  # where the rank was, when stopped
                    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
                _run_forked_rank(module, args, env)
            ranks[rank] = pid
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        else:
            command = [sys.executable, "-m", module, *args]
            ranks[rank] = subprocess.Popen(command, env=dict(os.environ, **env))


def _poll(handle) -> int | None:
    """The exit code of a rank that has ended (a signal as 128 + its number), else None."""
    if isinstance(handle, subprocess.Popen):
        code = handle.poll()
        return None if code is None else (128 - code if code < 0 else code)
    pid, status = os.waitpid(handle, os.WNOHANG)
    if pid == 0:
        return None
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _stop(ranks: dict[int, object], grace: float = 10.0) -> None:
    """SIGTERM to every rank still running, SIGKILL to those left after ``grace`` seconds;
    every one is reaped before this returns."""
    running = dict(ranks)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for handle in running.values():
            pid = handle.pid if isinstance(handle, subprocess.Popen) else handle
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while running and time.monotonic() < deadline:
            for rank, handle in list(running.items()):
                try:
                    ended = _poll(handle) is not None
                except ChildProcessError:  # reaped already
                    ended = True
                if ended:
                    del running[rank]
            time.sleep(0.05)
        if not running:
            return


OUT_OF_STEP = (
    "launcher: rank {done} finished {grace:g} s ago but rank {running} is still running: it is "
    "probably waiting in a collective (an all-reduce, a barrier) that rank {done} never joined, "
    "because the ranks ran different numbers of collectives (for example of synchronized "
    "micro-batches); the run was stopped"
)


def run(
    module: str,
    args: list[str],
    world: int,
    port: int,
    finish_grace: float | None = None,
    preload: Sequence[str] = (),
) -> int:
    """Run ``world`` ranks of ``module``; 0 if all succeed, else the first failing code.
    With ``finish_grace``, ranks still running that long after one has finished well are
    stopped (exit code 1, with a message saying why). The modules in ``preload`` are
    imported before the ranks are forked (what every rank would import anyway)."""
    ranks: dict[int, object] = {}

    def stop_all(signum, _frame):
        _stop(ranks)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop_all)  # before any rank exists: none is left behind
    signal.signal(signal.SIGINT, stop_all)
    if FORK_RANKS:  # what every rank imports anyway, once, before the fork
        for name in preload:
            importlib.import_module(name)
    _start_ranks(module, args, world, port, ranks)
    running = dict(ranks)
    first_done: tuple[int, float] | None = None  # (rank, when) of the first to finish well
    while running:
        for rank, handle in list(running.items()):
            code = _poll(handle)
            if code is None:
                continue
            del running[rank]
            if code != 0:
                print(f"launcher: rank {rank} exited with code {code}", file=sys.stderr)
                _stop(running)
                return code
            first_done = first_done or (rank, time.monotonic())
        late = first_done and finish_grace is not None and running
        if late and time.monotonic() - first_done[1] > finish_grace:
            waiting = min(running)
            message = OUT_OF_STEP.format(done=first_done[0], grace=finish_grace, running=waiting)
            print(message, file=sys.stderr, flush=True)
            _stop(running)
            return 1
        time.sleep(0.02)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, required=True, help="processes (ranks)")
    parser.add_argument("--port", type=int, required=True, help="MASTER_PORT on 127.0.0.1")
    parser.add_argument(
        "--finish-grace",
        type=float,
        default=None,
        help="stop ranks still running this many seconds after one has finished well",
    )
    parser.add_argument(
        "--preload",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE once before forking the ranks (torch._dynamo for a program that "
        "builds DistributedDataParallel); repeat for more",
    )
    parser.add_argument("module", help="the program, run as python -m MODULE")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    options = parser.parse_args(argv)
    if options.nproc < 1:
        parser.error(f"--nproc must be at least 1, got {options.nproc}")
    if options.finish_grace is not None and not options.finish_grace > 0:
        parser.error(f"--finish-grace must be above 0 seconds, got {options.finish_grace}")
    return run(
        options.module,
        options.args,
        options.nproc,
        options.port,
        options.finish_grace,
        options.preload,
    )


if __name__ == "__main__":
    sys.exit(main())
