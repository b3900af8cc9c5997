"""Run the notebooks on the ends of the torch range the course states, each in a virtual
environment of its own: the oldest torch each notebook names (``helpers/versions.py``) on the
oldest Python the course supports, and the newest release CI knows on Python 3.12.

    python tools/torch_range.py minimums                    # 2.3.0, 2.4.0 and 2.9.0, Python 3.11
    python tools/torch_range.py newest                      # 2.15.0, Python 3.12
    python tools/torch_range.py --torch 2.6.0 --python 3.11 # any other pair
    python tools/torch_range.py prepare                     # only make the environments of
                                                            # minimums and newest, for later

In each environment:

- nbval runs the notebooks, with all their checks, and compares every output with the
  committed one; only the PyTorch message texts listed in ``tools/torch_message_texts.cfg``
  may differ; in the same run each exercise's solution must pass
  (``tools/nbval_solutions.py``). On a minimum, the notebooks that name it as their oldest
  torch (``helpers/versions.py``): a notebook whose oldest torch is 2.3 is not run again on
  2.4 and 2.9, which lie inside the range; on the newest release and on ``--torch``, every
  notebook that torch runs. pytest-xdist spreads the notebooks over the cores;
- ``tests/course/test_torch_range.py`` checks that every notebook this torch does not run stops at
  its setup cell with the message that names the torch it needs;
- on the newest release, the notebook checks too (``tests/course/test_notebooks.py``).

An environment gets ``torch==X`` from PyPI (a CUDA build on Linux, which runs on the CPU), with
``PIP_CONFIG_FILE=/dev/null`` so that a machine-wide pip setting cannot cap or redirect it, then
what the notebooks and nbval need (``requirements.txt`` and ``requirements-test.txt``, less torch)
and this course and its loop auditor (``loop_auditor/``) with ``--no-deps``. It lives in
``build/venv-torch-X`` and is deleted afterwards (several GB), unless ``--keep``.

``prepare`` makes the environments of ``minimums`` and ``newest`` and nothing else, each
marked ready (``.ready``: its torch and Python) once it imports the torch it was made for;
``minimums`` and ``newest`` then use a ready environment instead of making it again. CI
prepares them in the background while other steps run: making them is mostly downloading and
unpacking (CUDA builds of several GB), and the tests in them run later, on their own.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from course import ROOT

sys.path.insert(0, str(ROOT))
from helpers.versions import (
    PYTHON_MINIMUM,
    PYTHON_NEWEST_TESTED,
    TORCH_MINIMUMS,
    TORCH_NEWEST_TESTED,
    dotted,
    runs_on,
)

SANITIZER = ROOT / "tools" / "torch_message_texts.cfg"
# What the notebooks and nbval need, by name, from the course's own requirement files
# (JupyterLab too: notebook 00's report fails without it).
COURSE_PACKAGES = ("jupyterlab", "matplotlib", "ipywidgets")
# polib: the notebook checks import tools/build_site.py, which reads the Chinese catalogs.
TEST_PACKAGES = ("pytest", "pytest-xdist", "nbval", "nbformat", "jupyter_client", "polib")
NEWEST_TESTS = ("tests/course/test_notebooks.py",)
MARKERS = "not browser and not colab"  # the default run's, with torch_range


def requirement_specs(path: Path, names: tuple[str, ...]) -> list[str]:
    """The lines of a requirements file that name one of ``names`` (``matplotlib>=3.8``)."""
    specs = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"([A-Za-z0-9_.-]+)", line.strip())
        if match and not line.lstrip().startswith(("#", "-")):
            specs[match.group(1).lower()] = line.strip()
    missing = [name for name in names if name not in specs]
    if missing:
        raise ValueError(f"{path.name} names no {', '.join(missing)}")
    return [specs[name] for name in names]


def find_python(version: tuple[int, ...]) -> str:
    """An interpreter of this minor version: ``pythonX.Y`` on PATH, else pyenv's."""
    name = f"python{dotted(version[:2])}"
    pyenv = os.path.expanduser(f"~/.pyenv/versions/{dotted(version[:2])}.*/bin/{name}")
    candidates = [shutil.which(name), *sorted(glob.glob(pyenv))]
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return candidate
    raise SystemExit(f"torch_range: no {name} here: install Python {dotted(version[:2])}")


def run(command: list[str], **kwargs) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT, **kwargs)


def make_environment(folder: Path, python: str, torch: str) -> Path:
    """A fresh venv in ``folder`` with ``torch==torch``, the notebooks' packages and the
    course; returns its python."""
    shutil.rmtree(folder, ignore_errors=True)
    run([python, "-m", "venv", str(folder)])
    env_python = folder / "bin" / "python"
    pip = [str(env_python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    run([*pip, f"torch=={torch}"], env=env)
    packages = requirement_specs(ROOT / "requirements.txt", COURSE_PACKAGES)
    packages += requirement_specs(ROOT / "requirements-test.txt", TEST_PACKAGES)
    run([*pip, *packages], env=env)
    run([*pip, "--no-deps", "--editable", "./loop_auditor", "--editable", "."], env=env)
    found = subprocess.run(
        [
            str(env_python),
            "-c",
            "import torch, sys; print(torch.__version__, sys.version.split()[0])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not found[0].startswith(torch):
        raise SystemExit(f"torch_range: asked for torch {torch}, the environment has {found[0]}")
    print(f"torch {found[0]} on Python {found[1]}", flush=True)
    return env_python


def environment_folder(torch: str) -> Path:
    return ROOT / "build" / f"venv-torch-{torch}"


def ready_mark(torch: str, python_version: tuple[int, ...]) -> str:
    """What ``.ready`` says in an environment made for this torch on this Python."""
    return f"torch {torch} on Python {dotted(python_version[:2])}"


def ready_environment(torch: str, python_version: tuple[int, ...]) -> Path | None:
    """The python of an environment that ``prepare`` made for this pair, else None."""
    folder = environment_folder(torch)
    mark = folder / ".ready"
    if mark.is_file() and mark.read_text(encoding="utf-8") == ready_mark(torch, python_version):
        return folder / "bin" / "python"
    return None


def prepare(torch: str, python_version: tuple[int, ...]) -> int:
    """Make the environment for this pair and mark it ready; 1 (and a line) if it fails."""
    folder = environment_folder(torch)
    started = time.monotonic()
    try:
        make_environment(folder, find_python(python_version), torch)
    except (SystemExit, subprocess.CalledProcessError) as error:
        print(f"torch_range: no environment for torch {torch}: {error}", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
        return 1
    (folder / ".ready").write_text(ready_mark(torch, python_version), encoding="utf-8")
    print(f"torch {torch}: environment ready in {time.monotonic() - started:.0f} s", flush=True)
    return 0


def notebooks_to_run(torch: str, own_minimum_only: bool) -> list[str]:
    """The notebooks this torch runs; with ``own_minimum_only``, those of them whose oldest
    torch (``helpers/versions.py``) is this one's release."""
    runs = set(runs_on(torch))
    release = tuple(int(part) for part in torch.split(".")[:2])
    return [
        f"notebooks/{name}.ipynb"
        for name, minimum in TORCH_MINIMUMS.items()
        if name[:2] in runs and (not own_minimum_only or minimum == release)
    ]


def check(
    torch: str, python_version: tuple[int, ...], newest: bool, keep: bool, minimum: bool = False
) -> int:
    """Make the environment (or take the one ``prepare`` made), run the checks, return
    pytest's exit status. ``minimum``: only the notebooks whose oldest torch this is."""
    folder = environment_folder(torch)
    started = time.monotonic()
    try:
        try:
            env_python = ready_environment(torch, python_version) or make_environment(
                folder, find_python(python_version), torch
            )
        except (SystemExit, subprocess.CalledProcessError) as error:
            print(f"torch_range: no environment for torch {torch}: {error}", flush=True)
            return 1
        made = time.monotonic()
        notebooks = notebooks_to_run(torch, own_minimum_only=minimum)
        command = [
            str(env_python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "-n", "auto", "--dist", "loadfile",
            "--nbval-sanitize-with", str(SANITIZER.relative_to(ROOT)),
            "-m", MARKERS,
            *notebooks, "tests/course/test_torch_range.py", *(NEWEST_TESTS if newest else ()),
        ]  # fmt: skip
        print("+", " ".join(command), flush=True)
        status = subprocess.run(command, cwd=ROOT)
        print(
            f"torch {torch}: environment {made - started:.0f} s, tests "
            f"{time.monotonic() - made:.0f} s, exit {status.returncode}",
            flush=True,
        )
        return status.returncode
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def version_text(text: str) -> str:
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", text):
        raise argparse.ArgumentTypeError(f"write a version as 2.9.0, got {text!r}")
    return text


def minimum_pairs() -> list[tuple[str, tuple[int, ...], bool]]:
    """(torch, Python, newest?) for each notebook's oldest torch, on the oldest Python."""
    minimums = sorted(set(TORCH_MINIMUMS.values()))
    return [(dotted((*m, 0)[:3]), PYTHON_MINIMUM, False) for m in minimums]


def newest_pairs() -> list[tuple[str, tuple[int, ...], bool]]:
    return [(dotted(TORCH_NEWEST_TESTED), PYTHON_NEWEST_TESTED, True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="?", choices=("minimums", "newest", "prepare"))
    parser.add_argument("--torch", type=version_text, help="one torch release, e.g. 2.6.0")
    parser.add_argument("--python", type=version_text, help="its Python, e.g. 3.11")
    parser.add_argument("--keep", action="store_true", help="keep the environment")
    args = parser.parse_args(argv)
    if (args.which is None) == (args.torch is None):
        parser.error("name either minimums, newest, prepare, or --torch (with --python)")
    if args.torch:
        python = tuple(int(p) for p in (args.python or dotted(PYTHON_MINIMUM)).split("."))
        pairs = [(args.torch, python, False)]
    elif args.which == "newest":
        pairs = newest_pairs()
    elif args.which == "minimums":
        pairs = minimum_pairs()
    else:
        failed = [t for t, python, _ in minimum_pairs() + newest_pairs() if prepare(t, python)]
        return 1 if failed else 0
    minimum = args.which == "minimums"
    failed = [t for t, python, newest in pairs if check(t, python, newest, args.keep, minimum)]
    if failed:
        print(f"torch_range: failed on torch {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
