"""Execute notebooks top to bottom in a fresh kernel and store their outputs: the way the
committed outputs are made. CPU is the reference, so the run sets GM_DEVICE=cpu.

    python tools/run_notebooks.py                      # every notebook
    python tools/run_notebooks.py notebooks/01_*.ipynb # some
    python tools/run_notebooks.py notebooks/zh-CN/00_setup_check.ipynb  # a Chinese one

It refuses a torch other than the one constraints.txt pins (``--any-torch`` overrides).

The course keeps its own small synchronous client (as nbval has) rather than nbclient:
nbclient can stall for its whole timeout on cells that display widgets (jupyter/nbclient
issue 312), still so in nbclient 0.11.0: 3 stalls in 35 runs, against none in 16 runs of
this client.

Every shell reply and iopub message is matched to the request it answers (its
``parent_header.msg_id``); replies and messages for other requests, such as the kernel_info
replies that ``wait_for_ready`` leaves behind when a kernel is slow to start, are discarded,
so no cell is ever given another cell's result. A kernel that dies, a cell that runs past
its limit and a kernel that does not start are reported as errors that name the cell.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from queue import Empty

import nbformat
from course import notebook_paths, pinned_torch, read, write
from jupyter_client.manager import KernelManager

TIMEOUT_S = 300  # per cell
READY_TIMEOUT_S = 120  # for the kernel to start and answer kernel_info
POLL_S = 0.2  # how long one wait for a message lasts before the kernel's health is checked
RAISES_TAG = "raises-exception"


class CellError(RuntimeError):
    """A cell raised, and it is not tagged to raise."""


class KernelDied(RuntimeError):
    """The kernel's process ended while a cell was running."""


class CellTimeout(RuntimeError):
    """A cell did not finish within its time limit."""


class KernelNotReady(RuntimeError):
    """The kernel did not start and answer kernel_info in time."""


def describe_cell(index: int | None, source: str) -> str:
    """``cell 3 ('x = f(1)')``: the cell's index in its notebook and its first line."""
    lines = source.strip().splitlines()
    first_line = lines[0] if lines else ""
    return f"cell {index} ({first_line!r})" if index is not None else f"cell ({first_line!r})"


def learner_error_output(content: dict) -> nbformat.NotebookNode:
    """The error output to store for an error message's ``content``: ``ename`` and ``evalue``,
    with the traceback cut to the one line ``"ename: evalue"``. The full traceback would hold
    this machine's paths, ANSI colour codes and library line numbers that move between
    releases; the learner needs only the error."""
    ename, evalue = content["ename"], content["evalue"]
    return nbformat.v4.new_output(
        "error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"]
    )


def _add_output(outputs: list, msg: dict) -> None:
    kind, content = msg["msg_type"], msg["content"]
    if kind == "stream" and outputs and outputs[-1].get("name") == content["name"]:
        outputs[-1]["text"] += content["text"]  # Jupyter shows one merged stream
    elif kind == "error":
        outputs.append(learner_error_output(content))
    else:
        outputs.append(nbformat.v4.output_from_msg(msg))


def _next_reply_to(
    get_msg: Callable[..., dict],
    msg_id: str,
    deadline: float,
    kernel_alive: Callable[[], bool],
    cell_label: str,
    timeout: float,
) -> dict:
    """The next message from ``get_msg`` whose parent is the request ``msg_id``; messages for
    other requests are discarded. Raises ``CellTimeout`` at ``deadline`` (a ``time.monotonic``
    time) and ``KernelDied`` as soon as the kernel is found dead."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CellTimeout(f"{cell_label} did not finish within {timeout:g} s")
        try:
            msg = get_msg(timeout=min(POLL_S, remaining))
        except Empty:
            if not kernel_alive():
                raise KernelDied(f"the kernel died while running {cell_label}") from None
            continue
        if msg.get("parent_header", {}).get("msg_id") == msg_id:
            return msg


def run_cell(
    client,
    source: str,
    timeout: float = TIMEOUT_S,
    *,
    cell_label: str | None = None,
    kernel_alive: Callable[[], bool] | None = None,
) -> tuple[dict, list]:
    """Execute ``source``; return its execute_reply's content and its outputs, once both that
    reply and its iopub ``idle`` status have come. ``cell_label`` names the cell in errors;
    ``kernel_alive`` (default ``client.is_alive``) is asked whenever no message comes for
    ``POLL_S``. Raises ``CellTimeout`` after ``timeout`` seconds in all, ``KernelDied`` if the
    kernel dies."""
    cell_label = cell_label or describe_cell(None, source)
    kernel_alive = kernel_alive or client.is_alive
    deadline = time.monotonic() + timeout
    msg_id = client.execute(source, store_history=True, allow_stdin=False)
    outputs: list = []
    clear_on_next = False
    while True:
        msg = _next_reply_to(
            client.get_iopub_msg, msg_id, deadline, kernel_alive, cell_label, timeout
        )
        kind, content = msg["msg_type"], msg["content"]
        if kind == "status" and content["execution_state"] == "idle":
            break
        if kind == "clear_output":
            if content.get("wait"):
                clear_on_next = True
            else:
                outputs.clear()
            continue
        if kind in ("stream", "display_data", "execute_result", "error"):
            if clear_on_next:
                outputs.clear()
                clear_on_next = False
            _add_output(outputs, msg)
    while True:
        reply = _next_reply_to(
            client.get_shell_msg, msg_id, deadline, kernel_alive, cell_label, timeout
        )
        if reply["msg_type"] == "execute_reply":
            return reply["content"], outputs


def execute(
    nb: nbformat.NotebookNode,
    cwd: Path,
    env: dict[str, str] | None = None,
    *,
    cell_timeout: float = TIMEOUT_S,
    ready_timeout: float = READY_TIMEOUT_S,
    kernel_name: str = "python3",
) -> nbformat.NotebookNode:
    """Run every code cell of ``nb`` in a fresh kernel started in ``cwd`` (with the
    environment ``env``, else this process's), storing outputs and execution counts. The
    kernel is ``kernel_name``'s kernel spec: python3 is this Python's, another name may run
    another environment's (tests/test_workshop.py runs the instructor's copy so). Raises
    ``CellError`` when a cell that is not tagged ``raises-exception`` fails, ``CellTimeout``
    when a cell runs past ``cell_timeout`` seconds, ``KernelDied`` when the kernel dies, and
    ``KernelNotReady`` when it does not answer within ``ready_timeout`` seconds of starting."""
    manager = KernelManager(kernel_name=kernel_name)
    manager.start_kernel(cwd=str(cwd), **({"env": env} if env is not None else {}))
    client = manager.client()
    client.start_channels()
    try:
        try:
            client.wait_for_ready(timeout=ready_timeout)
        except RuntimeError as error:
            raise KernelNotReady(
                f"the {kernel_name} kernel started in {cwd} was not ready within "
                f"{ready_timeout:g} s: {error}"
            ) from error
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            cell_label = describe_cell(index, cell.source)
            content, cell.outputs = run_cell(
                client,
                cell.source,
                cell_timeout,
                cell_label=cell_label,
                kernel_alive=manager.is_alive,
            )
            cell.execution_count = content.get("execution_count")
            status = content["status"]
            may_raise = RAISES_TAG in cell.get("metadata", {}).get("tags", [])
            if status == "error" and not may_raise:
                error = f"{content.get('ename')}: {content.get('evalue')}"
                raise CellError(f"{cell_label} raised {error}\n{cell.source}")
            if status not in ("ok", "error"):
                raise CellError(f"{cell_label} ended with status {status!r}\n{cell.source}")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    nb.metadata.pop("widgets", None)
    return nb


def torch_mismatch(installed: str, pinned: str) -> str | None:
    """Why outputs must not be made with torch ``installed`` (``2.14.1+cpu``), or None when
    it is the ``pinned`` release."""
    if installed.split("+")[0] == pinned:
        return None
    return (
        f"the committed outputs are made with torch {pinned} (constraints.txt), and this "
        f"environment has {installed}: run `python -m pip install -c constraints.txt torch` "
        "first, or pass --any-torch to write outputs that other machines will not match"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: all)")
    parser.add_argument(
        "--any-torch", action="store_true", help="run with a torch other than constraints.txt's"
    )
    args = parser.parse_args(argv)
    import torch  # here, not at the top: the other tools import this module's execute()

    mismatch = torch_mismatch(torch.__version__, pinned_torch())
    if mismatch and not args.any_torch:
        parser.error(mismatch)
    os.environ["GM_DEVICE"] = "cpu"
    os.environ.pop("GM_STRICT_CHECKS", None)
    for path in args.paths or notebook_paths():
        # In the notebook's own folder, as nbval runs it (notebooks/zh-CN/ for the Chinese).
        write(execute(read(path), path.resolve().parent), path)
        print(f"{path}: executed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
