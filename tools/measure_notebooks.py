"""Run every notebook in a fresh kernel on one CPU core and print wall time and peak memory
next to the floor: a notebook that only imports torch, matplotlib and the helpers.

    python tools/measure_notebooks.py            # table; exit 1 if a notebook is over budget
    python tools/measure_notebooks.py --update-readme  # also write it into README.md

Budget per notebook: wall time within floor + 10 s, peak memory within 2x the floor's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from course import NOTEBOOKS, ROOT, notebook_paths, read, repository_url
from run_notebooks import execute
from sync_notebooks import setup_source

EXTRA_SECONDS = 10.0
MEMORY_FACTOR = 2.0
FLOOR_IMPORTS = """\
import torch
import matplotlib
import helpers.plots
import helpers.training
import helpers.widgets"""


def floor_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(setup_source(repository_url())),
        nbformat.v4.new_code_cell(FLOOR_IMPORTS),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


def measure_here(path: Path) -> dict:
    """Execute one notebook (in this process's only kernel) and measure it."""
    nb = read(path)
    started = time.perf_counter()
    execute(nb, NOTEBOOKS)
    seconds = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the kernel's peak
    return {"seconds": seconds, "peak_mib": peak_kib / 1024}


def measure(path: Path) -> dict:
    """Measure ``path`` in a child process pinned to one core with one thread."""
    env = dict(os.environ, GM_DEVICE="cpu", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("GM_STRICT_CHECKS", None)
    command = [sys.executable, __file__, "--one", str(path)]
    if shutil.which("taskset"):
        command = ["taskset", "-c", "0", *command]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{path.name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(markdown: bool) -> tuple[str, bool]:
    with tempfile.TemporaryDirectory() as folder:
        floor_path = Path(folder) / "floor.ipynb"
        nbformat.write(floor_notebook(), floor_path)
        floor = measure(floor_path)
    rows = [("floor (imports only)", floor, True)]
    for path in notebook_paths():
        result = measure(path)
        ok = (
            result["seconds"] <= floor["seconds"] + EXTRA_SECONDS
            and result["peak_mib"] <= MEMORY_FACTOR * floor["peak_mib"]
        )
        rows.append((path.name, result, ok))
    header = ("notebook", "wall time (s)", "peak memory (MiB)", "within budget")
    lines = []
    if markdown:
        lines += ["| " + " | ".join(header) + " |", "|---|---:|---:|---|"]
        for name, result, ok in rows:
            verdict = "(reference)" if name.startswith("floor") else ("yes" if ok else "**no**")
            lines.append(
                f"| {name} | {result['seconds']:.1f} | {result['peak_mib']:.0f} | {verdict} |"
            )
    else:
        lines.append(f"{header[0]:<34} {header[1]:>13} {header[2]:>18}  {header[3]}")
        for name, result, ok in rows:
            verdict = "" if name.startswith("floor") else ("yes" if ok else "NO")
            lines.append(
                f"{name:<34} {result['seconds']:>13.1f} {result['peak_mib']:>18.0f}  {verdict}"
            )
    return "\n".join(lines), all(ok for _, _, ok in rows)


def update_readme(text: str) -> None:
    """Replace the table between the README's speed-table markers."""
    readme = ROOT / "README.md"
    start, end = "<!-- speed-table -->", "<!-- /speed-table -->"
    before, rest = readme.read_text(encoding="utf-8").split(start)
    _, after = rest.split(end)
    readme.write_text(f"{before}{start}\n{text}\n{end}{after}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update-readme", action="store_true", help="write the README's table")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_here(args.one)))
        return 0
    text, within = table(markdown=args.update_readme)
    print(text)
    if args.update_readme:
        update_readme(text)
    if not within:
        print(
            f"over budget: keep each notebook within floor + {EXTRA_SECONDS:.0f} s "
            f"and {MEMORY_FACTOR:.0f}x the floor's peak memory"
        )
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
