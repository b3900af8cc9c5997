"""Write a copy of the course whose notebooks have no solutions, for a live session where
the instructor hands the solutions out later.

    python tools/strip_solutions.py OUT

OUT receives the helpers, the requirements and the notebooks without their folded solution
cells (tag "solution"); the exercise cells stay, still checked by their checkers. OUT must be
new or empty. Push it to a repository of its own (and point tools/hub_link.py --repo at it)
to hand it to learners.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from course import ROOT, notebook_paths, read, write

COPIED = ("helpers", "binder", "requirements.txt", "pyproject.toml", "README.md")
SOLUTION_TAG = "solution"


def strip_solutions(out: Path) -> list[Path]:
    """Write the stripped course into ``out``; return the notebooks written."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty: give a new or empty folder")
    out.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, out / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, out / name)
    written = []
    (out / "notebooks").mkdir()
    for path in notebook_paths():
        nb = read(path)
        nb.cells = [
            c for c in nb.cells if SOLUTION_TAG not in c.get("metadata", {}).get("tags", [])
        ]
        target = out / "notebooks" / path.name
        write(nb, target)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="a new or empty folder")
    args = parser.parse_args(argv)
    try:
        written = strip_solutions(args.out)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} notebooks without solutions to {args.out / 'notebooks'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
