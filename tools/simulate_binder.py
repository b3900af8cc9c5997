"""Binder, simulated: build a fresh environment only from binder/, the way repo2docker reads
it (runtime.txt, requirements.txt, then postBuild), and run the whole nbval suite in it.

    python tools/simulate_binder.py             # the environment goes to build/binder-env
    python tools/simulate_binder.py --env DIR
    python tools/simulate_binder.py --build-only  # only build it (CI, in the background); the
                                                  # next run uses it while binder/ is unchanged

Where torch's CPU-wheel index (binder/requirements.txt's --extra-index-url) cannot be
reached, the index line is dropped and torch is installed first at the version the
committed outputs were made with (constraints.txt), from what pip finds without the index
(a local wheel here): the newest torch in binder's range would be a CUDA build of GBs.
pytest, nbval and pytest-xdist are added to run the suite: they are the test's tools, not
part of what Binder builds. Exit status: the suite's.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import venv
from pathlib import Path

from course import ROOT, pinned_torch

BINDER = ROOT / "binder"


def index_reachable(url: str, timeout: float = 5) -> bool:
    try:
        urllib.request.urlopen(url, timeout=timeout).close()
        return True
    except OSError:
        return False


def requirements_for_here(text: str) -> tuple[str, str | None]:
    """binder/requirements.txt as pip here can use it, and the torch pin to install first
    (None when the index answers and nothing needs changing)."""
    index = re.search(r"^--extra-index-url\s+(\S+)", text, flags=re.MULTILINE)
    if index is None or index_reachable(index.group(1)):
        return text, None
    if re.search(r"^torch\b", text, flags=re.MULTILINE) is None:
        raise ValueError("binder/requirements.txt does not ask for torch")
    without_index = re.sub(r"^--extra-index-url.*\n", "", text, flags=re.MULTILINE)
    return without_index, f"torch=={pinned_torch()}"


def run(command: list[str], **kwargs) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, **kwargs)


def ready_mark() -> str:
    """What ``.ready`` says in an environment built from binder/ as it is now, on this Python:
    a digest of binder/'s files, so that a changed binder/ builds the environment again."""
    digest = hashlib.sha256()
    for path in sorted(BINDER.iterdir()):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"binder/ {digest.hexdigest()[:16]} on Python {sys.version.split()[0]}"


def ready_python(env: Path) -> str | None:
    """The python of an environment that ``build`` made from binder/ as it is now, else None."""
    mark = env / ".ready"
    if mark.is_file() and mark.read_text(encoding="utf-8") == ready_mark():
        return str(env / "bin" / "python")
    return None


def build(env: Path) -> str:
    """A fresh environment in ``env`` built only from binder/ (and pytest, nbval and
    pytest-xdist to run the suite), marked ready; returns its python."""
    runtime = (BINDER / "runtime.txt").read_text(encoding="utf-8").strip()
    wanted = runtime.removeprefix("python-")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if wanted != here:
        print(f"note: binder/runtime.txt asks for Python {wanted}; this simulation uses {here}")

    shutil.rmtree(env, ignore_errors=True)
    venv.create(env, with_pip=True)
    python = str(env / "bin" / "python")
    text, torch_first = requirements_for_here(
        (BINDER / "requirements.txt").read_text(encoding="utf-8")
    )
    if torch_first:
        print(f"the CPU-wheel index is unreachable: installing {torch_first} without it")
        run([python, "-m", "pip", "install", "--quiet", torch_first])
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as requirements:
        requirements.write(text)
    try:
        run([python, "-m", "pip", "install", "--quiet", "-r", requirements.name])
    finally:
        os.unlink(requirements.name)
    run(["bash", str(BINDER / "postBuild")], cwd=ROOT, env=binder_environment(env))
    run([python, "-m", "pip", "install", "--quiet", "pytest>=8", "nbval>=0.11", "pytest-xdist>=3"])
    (env / ".ready").write_text(ready_mark(), encoding="utf-8")
    return python


def binder_environment(env: Path) -> dict[str, str]:
    """This process's environment variables with ``env``'s bin first on PATH, no PYTHONPATH."""
    variables = dict(os.environ, PATH=f"{env / 'bin'}{os.pathsep}{os.environ['PATH']}")
    variables.pop("PYTHONPATH", None)
    return variables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", type=Path, default=ROOT / "build" / "binder-env")
    parser.add_argument(
        "--build-only",
        action="store_true",
        help="only build the environment and mark it ready (CI does it in the background); "
        "a later run without it uses it while binder/ is unchanged",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    python = None if args.build_only else ready_python(args.env)
    if python:
        print(f"Binder simulation: the environment in {args.env} is ready ({ready_mark()})")
    else:
        python = build(args.env)
    if args.build_only:
        print(f"Binder simulation: environment built in {time.monotonic() - started:.0f} s")
        return 0
    suite = subprocess.run(  # the notebooks spread over the cores, each on torch's own threads
        [python, "-m", "pytest", "-q", "-n", "auto", "--dist", "loadfile", "notebooks"],
        cwd=ROOT,
        env=dict(binder_environment(args.env), GM_DEVICE="cpu"),
    )
    verdict = "passed" if suite.returncode == 0 else "FAILED"
    seconds = time.monotonic() - started
    print(f"Binder simulation: the nbval suite {verdict} in an environment built from binder/ "
          f"({seconds:.0f} s in all)")  # fmt: skip
    return suite.returncode


if __name__ == "__main__":
    sys.exit(main())
