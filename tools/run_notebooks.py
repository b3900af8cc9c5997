"""Execute notebooks top to bottom in a fresh kernel and store their outputs: the way the
committed outputs are made. CPU is the reference, so the run sets GM_DEVICE=cpu.

    python tools/run_notebooks.py                      # every notebook
    python tools/run_notebooks.py notebooks/01_*.ipynb # some

A small synchronous client (as nbval has) rather than nbclient: nbclient can stall for its
whole timeout on cells that display widgets (jupyter/nbclient issue 312).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from queue import Empty

import nbformat
from course import NOTEBOOKS, notebook_paths, read, write
from jupyter_client.manager import KernelManager

TIMEOUT_S = 300
RAISES_TAG = "raises-exception"


class CellError(RuntimeError):
    """A cell raised, and it is not tagged to raise."""


def _add_output(outputs: list, msg: dict) -> None:
    kind = msg["msg_type"]
    if kind == "stream" and outputs and outputs[-1].get("name") == msg["content"]["name"]:
        outputs[-1]["text"] += msg["content"]["text"]  # Jupyter shows one merged stream
        return
    outputs.append(nbformat.v4.output_from_msg(msg))


def run_cell(client, source: str, timeout: float = TIMEOUT_S) -> tuple[dict, list]:
    """Execute ``source``; return the execute reply's content and the cell's outputs."""
    msg_id = client.execute(source, store_history=True, allow_stdin=False)
    outputs: list = []
    clear_on_next = False
    while True:
        try:
            msg = client.get_iopub_msg(timeout=timeout)
        except Empty:
            raise TimeoutError(f"no output for {timeout} s from cell:\n{source}") from None
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
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
    reply = client.get_shell_msg(timeout=timeout)
    return reply["content"], outputs


def execute(
    nb: nbformat.NotebookNode, cwd: Path, env: dict[str, str] | None = None
) -> nbformat.NotebookNode:
    """Run every code cell of ``nb`` in a fresh python3 kernel started in ``cwd`` (with the
    environment ``env``, else this process's), storing outputs and execution counts. Raises
    ``CellError`` when a cell that is not tagged ``raises-exception`` fails."""
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(cwd), **({"env": env} if env is not None else {}))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            content, cell.outputs = run_cell(client, cell.source)
            cell.execution_count = content.get("execution_count")
            may_raise = RAISES_TAG in cell.get("metadata", {}).get("tags", [])
            if content["status"] == "error" and not may_raise:
                error = f"{content.get('ename')}: {content.get('evalue')}"
                raise CellError(f"cell {index} raised {error}\n{cell.source}")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    nb.metadata.pop("widgets", None)
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: all)")
    args = parser.parse_args(argv)
    os.environ["GM_DEVICE"] = "cpu"
    os.environ.pop("GM_STRICT_CHECKS", None)
    for path in args.paths or notebook_paths():
        write(execute(read(path), NOTEBOOKS), path)
        print(f"{path.name}: executed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
