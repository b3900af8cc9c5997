"""Download the wheels the test suite needs on the CUDA machine, into .whl/ (run it here,
where PyPI answers; the CUDA machine has no network).

    python3 tools/fetch_gpu_wheels.py               # download into .whl/, then check it
    python3 tools/fetch_gpu_wheels.py --check .whl  # only check a folder (no network)
    python3 tools/fetch_gpu_wheels.py --closure     # what this environment's metadata needs

The CUDA machine (Python 3.12, x86_64, its own torch with CUDA) has pytest, hypothesis,
matplotlib and numpy but none of Jupyter: ``WHEELS`` is every package the suite needs that it
lacks, pinned to one version each (the versions the CPU test environment uses), binary only,
for CPython 3.12 on manylinux x86_64, downloaded with ``--no-deps`` (every dependency is
listed). Never torch, triton or nvidia-*: the machine's own CUDA build stays.
``tools/gpu_suite.sh`` installs them with ``pip install --no-deps --target`` and checks the
folder with ``--check`` first. tests/tools/test_gpu_suite.py checks that ``WHEELS`` is exactly
the dependency closure of ``ROOTS`` less ``MACHINE_HAS``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEST = ROOT / ".whl"
TARGET_PYTHON = "3.12"
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "any",
)
NEVER = ("torch", "triton", "nvidia-")
"""Names (or prefixes) that must never be fetched: the machine's own CUDA build stays."""

ROOTS = (
    "pytest",  # the runner
    "nbval",  # pyproject's addopts: --nbval --nbval-current-env
    "ipykernel",  # the kernel nbval and tools/run_notebooks.py start
    "jupyter-client",  # tools/run_notebooks.py: KernelManager
    "nbformat",  # tools/course.py, tests
    "ipython",  # helpers/widgets.py: IPython.display
    "ipywidgets",  # helpers/widgets.py, the widget explorers
    "matplotlib",  # helpers/plots.py
    "hypothesis",  # property tests
    "numpy",  # tests
    "torch",  # the machine's own
    "nbconvert",  # tools/build_site.py (its tests are skipped there, but tools/ is imported)
    "mistune",  # tools/build_site.py
    "ruff",  # tests/course/test_repository.py runs `python -m ruff`
    "packaging",  # tools/gpu_suite_checks.py, tests/tools/test_gpu_suite.py
    "polib",  # tools/translate_notebooks.py: the Chinese edition's catalogs
)
"""What the suite uses directly (tests/tools/test_gpu_suite.py checks its imports against this)."""

MACHINE_HAS = (
    "hypothesis",
    "jinja2",
    "markupsafe",
    "matplotlib",
    "numpy",
    "packaging",
    "psutil",
    "pygments",
    "pytest",
    "python-dateutil",
    "torch",
    "typing-extensions",
)
"""What the closure of ROOTS reaches that the CUDA machine already has (with their own
dependencies): not fetched, so that the machine's versions stay. pytest-timeout is there too;
the suite uses it when it is installed and its own per-test alarm otherwise."""

WHEELS = {
    "asttokens": "3.0.2",
    "attrs": "26.1.0",
    "beautifulsoup4": "4.15.0",
    "bleach": "6.4.0",
    "comm": "0.2.3",
    "coverage": "7.17.5",
    "debugpy": "1.8.22",
    "defusedxml": "0.7.1",
    "executing": "2.3.0",
    "fastjsonschema": "2.22.3",
    "ipykernel": "7.4.0",
    "ipython": "9.18.1",
    "ipython-pygments-lexers": "1.1.1",
    "ipywidgets": "8.1.9",
    "jedi": "0.20.1",
    "jsonschema": "4.26.0",
    "jsonschema-specifications": "2025.9.1",
    "jupyter-client": "8.10.0",
    "jupyter-core": "5.9.1",
    "jupyterlab-pygments": "0.3.0",
    "jupyterlab-widgets": "3.0.17",
    "matplotlib-inline": "0.2.2",
    "mistune": "3.4.0",
    "nbclient": "0.11.0",
    "nbconvert": "7.17.2",
    "nbformat": "5.11.1",
    "nbval": "0.11.0",
    "nest-asyncio2": "1.7.4",
    "pandocfilters": "1.5.1",
    "parso": "0.8.7",
    "pexpect": "4.9.0",
    "platformdirs": "4.14.9",
    "polib": "1.2.0",
    "prompt-toolkit": "3.0.53",
    "ptyprocess": "0.7.0",
    "pure-eval": "0.2.4",
    "pyzmq": "27.3.0",
    "referencing": "0.37.0",
    "rpds-py": "2026.9.1",
    "ruff": "0.17.6",
    "soupsieve": "4.1.3",
    "stack-data": "0.6.3",
    "tinycss2": "1.5.1",
    "tornado": "6.6.1",
    "traitlets": "5.16.1",
    "wcwidth": "0.9.4",
    "webencodings": "0.6.1",
    "widgetsnbextension": "4.0.16",
}
"""Every package the suite needs that the CUDA machine lacks: name -> the one version."""


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares it: ``Jupyter_Client`` -> ``jupyter-client``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def never_fetched(name: str) -> bool:
    name = normalize(name)
    return any(name == bad or (bad.endswith("-") and name.startswith(bad)) for bad in NEVER)


WHEEL_FILE = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?"
    r"-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$"
)


def parse_wheel(filename: str) -> dict[str, str]:
    """The fields of a wheel's file name (PEP 427); ValueError if it is not one."""
    match = WHEEL_FILE.match(filename)
    if match is None:
        raise ValueError(f"{filename} is not a wheel file name (NAME-VERSION-PY-ABI-PLATFORM)")
    fields = match.groupdict()
    fields["name"] = normalize(fields["name"])
    return fields


def runs_on_target(fields: dict[str, str]) -> bool:
    """Whether a wheel with these tags installs on CPython 3.12, Linux x86_64 (glibc)."""
    minor = int(TARGET_PYTHON.split(".")[1])
    pythons = fields["python"].split(".")
    abis = fields["abi"].split(".")
    platforms = fields["platform"].split(".")
    python_ok = any(
        tag in ("py3", f"py3{minor}", f"cp3{minor}")
        or (tag.startswith("cp3") and "abi3" in abis and int(tag[3:]) <= minor)
        for tag in pythons
    )
    abi_ok = any(abi in ("none", "abi3", f"cp3{minor}") for abi in abis)
    platform_ok = any(
        tag == "any" or (tag.startswith("manylinux") and tag.endswith("_x86_64"))
        for tag in platforms
    )
    return python_ok and abi_ok and platform_ok


def check(folder: Path, wheels: dict[str, str] | None = None) -> list[str]:
    """What is wrong with ``folder`` as the wheel set: each problem as a sentence (none: ok).
    It must hold exactly one wheel of each of ``wheels`` (default ``WHEELS``), at its pinned
    version, with tags for CPython 3.12 on x86_64 Linux, and nothing else."""
    wheels = {normalize(name): version for name, version in (wheels or WHEELS).items()}
    if not folder.is_dir():
        return [f"{folder} does not exist: run python3 tools/fetch_gpu_wheels.py (with network)"]
    problems, found = [], {}
    for path in sorted(folder.iterdir()):
        if path.suffix != ".whl":
            continue
        try:
            fields = parse_wheel(path.name)
        except ValueError as error:
            problems.append(str(error))
            continue
        name = fields["name"]
        if never_fetched(name):
            problems.append(f"{path.name}: never install {name} here, the machine's own stays")
        elif name not in wheels:
            problems.append(f"{path.name}: {name} is not in WHEELS (remove the file)")
        elif fields["version"] != wheels[name]:
            problems.append(f"{path.name}: WHEELS pins {name}=={wheels[name]} (remove the file)")
        elif not runs_on_target(fields):
            problems.append(f"{path.name}: its tags do not fit CPython {TARGET_PYTHON} x86_64")
        found.setdefault(name, []).append(path.name)
    problems += [
        f"{name}: {len(files)} wheels ({', '.join(files)}); keep one"
        for name, files in found.items()
        if len(files) > 1
    ]
    problems += [
        f"{name}=={version}: no wheel in {folder}"
        for name, version in wheels.items()
        if name not in found
    ]
    return problems


def pip_download_command(dest: Path, python: str = sys.executable) -> list[str]:
    """One ``pip download`` of every pinned wheel: binary only, no dependencies, for 3.12."""
    command = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", TARGET_PYTHON, "--implementation", "cp"]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    command += ["-d", str(dest)]
    return command + [f"{name}=={version}" for name, version in sorted(WHEELS.items())]


def download(dest: Path) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    for path in dest.glob("*.whl"):  # a stale version next to the pinned one breaks install
        try:
            fields = parse_wheel(path.name)
        except ValueError:
            continue
        if WHEELS.get(fields["name"]) != fields["version"]:
            print(f"removing {path.name}: not the pinned version")
            path.unlink()
    command = pip_download_command(dest)
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)
    problems = check(dest)
    for problem in problems:
        print("problem:", problem)
    files = sorted(dest.glob("*.whl"))
    total = sum(path.stat().st_size for path in files)
    for path in files:
        print(f"{path.stat().st_size / 2**20:8.2f} MiB  {path.name}")
    print(f"{len(files)} wheels, {total / 2**20:.1f} MiB in {dest}")
    return 1 if problems else 0


def dependency_closure(
    roots: tuple[str, ...] = ROOTS, stop: tuple[str, ...] = MACHINE_HAS
) -> dict[str, str]:
    """Every distribution that ``roots`` need on the CUDA machine, by the metadata installed
    in this environment, with requirement markers evaluated for CPython 3.12 on x86_64
    Linux: ``{name: installed version}``. Not followed past ``stop`` (the machine's own)."""
    from importlib import metadata

    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    environment = dict(
        default_environment(),
        python_version=TARGET_PYTHON,
        python_full_version=f"{TARGET_PYTHON}.0",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        os_name="posix",
        implementation_name="cpython",
        platform_python_implementation="CPython",
    )
    stop = {normalize(name) for name in stop}
    found: dict[str, str] = {}
    todo = [(normalize(name), frozenset()) for name in roots]
    seen = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        found[name] = metadata.version(name)
        if name in stop:
            continue
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            marker = requirement.marker
            wanted = ["", *sorted(extras)]
            if marker is None or any(
                marker.evaluate(dict(environment, extra=extra)) for extra in wanted
            ):
                todo.append((normalize(requirement.name), frozenset(requirement.extras)))
    return dict(sorted(found.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEST, help="download folder (.whl/)")
    parser.add_argument("--check", type=Path, metavar="DIR", help="only check DIR, no network")
    parser.add_argument(
        "--closure", action="store_true", help="print what ROOTS need by this environment"
    )
    args = parser.parse_args(argv)
    if args.closure:
        machine = {normalize(name) for name in MACHINE_HAS}
        for name, version in dependency_closure().items():
            where = "machine has" if name in machine else "WHEELS"
            pinned = WHEELS.get(name, "")
            print(f"{name}=={version}  ({where}{', pinned ' + pinned if pinned else ''})")
        return 0
    if args.check is not None:
        problems = check(args.check)
        for problem in problems:
            print("problem:", problem)
        wheels = sorted(args.check.glob("*.whl")) if args.check.is_dir() else []
        total = sum(path.stat().st_size for path in wheels) / 2**20
        verdict = "FAILED" if problems else "ok"
        print(f"wheel check {verdict}: {len(wheels)} wheels, {total:.1f} MiB in {args.check}")
        return 1 if problems else 0
    return download(args.dest)


if __name__ == "__main__":
    sys.exit(main())
