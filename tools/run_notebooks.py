"""Execute notebooks top to bottom in a fresh kernel and store their outputs: the way the
committed outputs are made. CPU is the reference, so the run sets GM_DEVICE=cpu.

    python tools/run_notebooks.py                      # every notebook
    python tools/run_notebooks.py notebooks/01_*.ipynb # some
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import nbformat
from course import NOTEBOOKS, notebook_paths, read, write
from nbclient import NotebookClient

TIMEOUT_S = 300


def execute(nb: nbformat.NotebookNode, cwd: Path, allow_errors: bool = False):
    """Run ``nb`` in a fresh python3 kernel started in ``cwd``; return it with outputs."""
    client = NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
        record_timing=False,
        allow_errors=allow_errors,
    )
    client.execute()
    nb.metadata.pop("widgets", None)
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: all)")
    args = parser.parse_args(argv)
    os.environ["GM_DEVICE"] = "cpu"
    os.environ.pop("GM_STRICT_CHECKS", None)
    for path in args.paths or notebook_paths():
        nb = read(path)
        # cells tagged raises-exception are expected to fail; nbval checks they still do
        execute(nb, NOTEBOOKS)
        write(nb, path)
        print(f"{path.name}: executed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
