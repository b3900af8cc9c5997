"""Write a copy of the course whose notebooks have no solutions, for a live session where
the instructor hands the solutions out later.

    python tools/strip_solutions.py OUT

OUT receives what a learner installs and runs, and nothing else: pyproject.toml and the README it
names, every package pyproject lists (its whole folder: helpers), the folder of each distribution of
this repository that the course depends on (loop_auditor/: its pyproject.toml, README and src/), any
other module of the course that a notebook imports, requirements.txt, binder/, and the notebooks
without their folded solution cells (tag "solution"); the exercise cells stay, still checked by
their checkers. In OUT, ``pip install -r requirements.txt -e ./loop_auditor -e .`` installs the
course and every notebook runs (tests/tools/test_workshop.py checks both, in a fresh virtual
environment: ``python -m pytest -m instructor_copy``). Tests, tools, the workshop notes and CI stay
behind. OUT must be new or empty. Push it to a repository of its own (and point tools/hub_link.py
--repo at it) to hand it to learners.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path

from course import ROOT, notebook_paths, read, write

# Besides pyproject.toml, the packages it lists and the README it names: what a learner
# installs with, locally and on Binder.
INSTALL_FILES = ("requirements.txt", "binder")
SOLUTION_TAG = "solution"
# What building or installing leaves in a folder (``python -m build loop_auditor`` writes
# loop_auditor/build/ and dist/): never copied.
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


def package_folders(root: Path = ROOT) -> list[str]:
    """The folders of the packages that ``pip install .`` installs: the top level of each
    package in pyproject.toml's ``[tool.setuptools] packages`` (a list, or ``find``)."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config.get("tool", {}).get("setuptools", {})
    if "package-dir" in setuptools:
        raise ValueError("pyproject.toml's [tool.setuptools] package-dir is not supported here")
    packages = setuptools.get("packages")
    where = "."
    if isinstance(packages, dict) and "find" in packages:
        find = packages["find"]
        [where] = find.get("where", ["."])
        packages = top_level_found(
            root / where,
            find.get("include", ["*"]),
            find.get("exclude", []),
            namespaces=find.get("namespaces", True),
        )
    if not isinstance(packages, list) or not packages:
        raise ValueError("pyproject.toml's [tool.setuptools] names no packages")
    tops = dict.fromkeys(name.split(".")[0] for name in packages)
    return [(Path(where) / top).as_posix() for top in tops]


def canonical_name(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503): ``Loop_Auditor`` -> ``loop-auditor``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def local_distributions(root: Path = ROOT) -> list[str]:
    """The folders of the distributions in this repository that the course depends on: a
    folder at the top with a pyproject.toml whose project the course's ``dependencies`` name
    (loop_auditor/, the loop auditor, on no package index: ``pip install -e ./loop_auditor -e
    .`` installs it with the course)."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    needed = set()
    for requirement in project.get("dependencies", []):
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if match is None:
            raise ValueError(f"pyproject.toml: a dependency without a name: {requirement!r}")
        needed.add(canonical_name(match.group(1)))
    folders = []
    for pyproject in sorted(root.glob("*/pyproject.toml")):
        other = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if canonical_name(other.get("name", "")) in needed:
            folders.append(pyproject.parent.name)
    return folders


def top_level_found(
    base: Path, include: list[str], exclude: list[str], namespaces: bool = True
) -> list[str]:
    """The top-level folders of the packages that setuptools' ``find`` names under ``base``:
    a folder counts when its name, or a subpackage's dotted name below it (``helpers.*``),
    matches an ``include`` pattern (fnmatch, as setuptools matches) and its name no ``exclude``
    one; with ``namespaces = false`` it must also hold an ``__init__.py``."""

    def included(name: str) -> bool:
        return any(fnmatch(name, p) or p.startswith(f"{name}.") for p in include)

    folders = sorted(p for p in base.iterdir() if p.is_dir() and p.name.isidentifier())
    return [
        folder.name
        for folder in folders
        if included(folder.name)
        and not any(fnmatch(folder.name, pattern) for pattern in exclude)
        and (namespaces or (folder / "__init__.py").is_file())
    ]


def imported_modules(path: Path) -> set[str]:
    """The top-level names that a notebook's code cells import (shell and magic lines aside)."""
    names = set()
    for index, cell in enumerate(read(path).cells):
        if cell.cell_type != "code":
            continue
        lines = cell.source.splitlines()
        code = "\n".join("" if line.lstrip().startswith(("!", "%")) else line for line in lines)
        try:
            tree = ast.parse(code)
        except SyntaxError as error:
            raise ValueError(f"{path.name}, cell {index}: not Python: {error}") from error
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def course_files(root: Path = ROOT) -> list[str]:
    """What the copy takes besides its notebooks, as paths relative to ``root``: pyproject.toml,
    its readme, its packages' folders, the folders of the distributions it depends on, the
    course modules the notebooks import, and INSTALL_FILES. Derived from pyproject and the
    notebooks, so it follows them."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    readme = project.get("readme")
    readme = readme.get("file") if isinstance(readme, dict) else readme
    files = ["pyproject.toml", *([readme] if readme else []), *package_folders(root)]
    files += local_distributions(root)
    imported = set().union(*(imported_modules(path) for path in notebook_paths()))
    for name in sorted(imported):
        for candidate in (name, f"{name}.py"):
            if (root / candidate).exists():
                files.append(candidate)
    files.extend(INSTALL_FILES)
    return list(dict.fromkeys(files))


def strip_solutions(out: Path) -> list[Path]:
    """Write the stripped course into ``out``; return the notebooks written."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty: give a new or empty folder")
    out.mkdir(parents=True, exist_ok=True)
    for name in course_files():
        source = ROOT / name
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, out / name, ignore=IGNORED)
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
