"""The checks tools/gpu_suite.sh runs around the test suite on the CUDA machine.

    python3 tools/gpu_suite_checks.py torch                  # this python's torch, as JSON
    python3 tools/gpu_suite_checks.py env --expect JSON [--require-cuda] [--site DIR]
    python3 tools/gpu_suite_checks.py deps DIR               # requirements of DIR's packages
    python3 tools/gpu_suite_checks.py kernel [--require-cuda]  # the python3 kernel's view
    python3 tools/gpu_suite_checks.py report JUNIT [--out DIR]  # failed tests and cells
    python3 tools/gpu_suite_checks.py unpack DIR WHEEL...     # install wheels without pip

Each prints what it found and exits non-zero when the run cannot be trusted (``deps`` only
warns). Standard library only, except ``deps`` (packaging) and ``kernel`` (jupyter_client).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parents[1]

SUITE_MODULES = {
    "pytest": "pytest",
    "nbval": "nbval",
    "nbformat": "nbformat",
    "jupyter_client": "jupyter-client",
    "ipykernel": "ipykernel",
    "IPython": "ipython",
    "ipywidgets": "ipywidgets",
    "matplotlib": "matplotlib",
    "hypothesis": "hypothesis",
    "nbconvert": "nbconvert",
    "mistune": "mistune",
    "zmq": "pyzmq",
    "tornado": "tornado",
    "jsonschema": "jsonschema",
}
"""What the suite imports first (module: distribution): each must import, or nothing else is
worth running."""


def torch_build() -> dict:
    """This interpreter's torch: version, file, CUDA version (None for a CPU build)."""
    import torch

    return {"version": torch.__version__, "file": torch.__file__, "cuda": torch.version.cuda}


def _under(path: str, folder: str | None) -> bool:
    if not folder:
        return False
    return Path(path).resolve().is_relative_to(Path(folder).resolve())


def check_env(expect: dict | None, require_cuda: bool, site: str | None) -> list[str]:
    """Print the versions the run depends on; return what is wrong."""
    problems = []
    print(f"python   {sys.version.split()[0]} ({sys.executable}), {platform.machine()}")
    now = torch_build()
    import torch

    print(f"torch    {now['version']} ({now['file']}), CUDA build: {now['cuda']}")
    if expect is not None and now != expect:
        problems.append(f"torch changed with the wheels on the path: was {expect}, now {now}")
    if _under(now["file"], site):
        problems.append(f"torch comes from {site}: the wheels must never hold torch")
    available = torch.cuda.is_available()
    print(f"cuda     available: {available}")
    if available:
        print(f"         cudnn {torch.backends.cudnn.version()}, {torch.cuda.device_count()} GPUs")
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            print(
                f"         cuda:{index} {props.name}, {props.total_memory / 2**30:.0f} GiB, "
                f"compute capability {props.major}.{props.minor}"
            )
        nccl = torch.distributed.is_available() and torch.distributed.is_nccl_available()
        version = torch.cuda.nccl.version() if nccl else "-"
        version = ".".join(map(str, version)) if isinstance(version, tuple) else version
        print(f"         nccl available: {nccl} (version {version})")
    elif require_cuda:
        problems.append("torch.cuda.is_available() is False: this run needs the GPU")
    if shutil.which("nvidia-smi"):
        query = "--query-gpu=name,driver_version,memory.total"
        done = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        for line in done.stdout.strip().splitlines():
            print(f"nvidia-smi {line}")
    from importlib import metadata

    for module, dist in SUITE_MODULES.items():
        try:
            imported = __import__(module)
        except Exception as error:  # any failure to import is the finding
            problems.append(f"import {module} failed: {type(error).__name__}: {error}")
            continue
        version = metadata.version(dist)
        where = "wheels" if _under(imported.__file__, site) else "machine"
        print(f"{module:<15} {version:<12} ({where}: {Path(imported.__file__).parent})")
    return problems


def check_deps(site: Path) -> list[str]:
    """Requirements of the packages in ``site`` that this environment does not meet."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.version import Version

    problems = []
    for dist in metadata.distributions(path=[str(site)]):
        name = dist.metadata["Name"]
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            try:
                have = metadata.version(requirement.name)
            except metadata.PackageNotFoundError:
                problems.append(f"{name} needs {requirement}: not installed")
                continue
            if not requirement.specifier.contains(Version(have), prereleases=True):
                problems.append(f"{name} needs {requirement}: {requirement.name} {have} here")
    return problems


KERNEL_PROBE = """
import json, os, sys
import ipykernel, torch
print("GM-KERNEL " + json.dumps({
    "executable": sys.executable,
    "torch": {"version": torch.__version__, "file": torch.__file__, "cuda": torch.version.cuda},
    "cuda_available": torch.cuda.is_available(),
    "ipykernel": ipykernel.__file__,
    "gm_device": os.environ.get("GM_DEVICE"),
}))
"""


def check_kernel(require_cuda: bool) -> list[str]:
    """Start the ``python3`` kernel (as tools/run_notebooks.py does) and compare what it
    sees with this process: same python, same torch, CUDA as required."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    print(f"kernelspec python3: {spec.argv[0]} ({spec.resource_dir})")
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(ROOT / "notebooks"))
    client = manager.client()
    client.start_channels()
    lines = []
    try:
        client.wait_for_ready(timeout=120)

        def collect(msg):
            if msg["msg_type"] == "stream":
                lines.extend(msg["content"]["text"].splitlines())
            elif msg["msg_type"] == "error":
                lines.append("ERROR " + msg["content"]["ename"] + ": " + msg["content"]["evalue"])

        client.execute_interactive(KERNEL_PROBE, timeout=120, output_hook=collect)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    found = [line for line in lines if line.startswith("GM-KERNEL ")]
    if not found:
        return [f"the python3 kernel did not report: {lines}"]
    seen = json.loads(found[0].removeprefix("GM-KERNEL "))
    print(f"kernel   {seen['executable']}, torch {seen['torch']['version']}, "
          f"cuda {seen['cuda_available']}, GM_DEVICE={seen['gm_device']}")  # fmt: skip
    problems = []
    if Path(seen["executable"]).resolve() != Path(sys.executable).resolve():
        problems.append(f"the kernel runs {seen['executable']}, not {sys.executable}")
    if seen["torch"] != torch_build():
        problems.append(f"the kernel's torch is {seen['torch']}, not {torch_build()}")
    if require_cuda and not seen["cuda_available"]:
        problems.append("the kernel does not see CUDA")
    return problems


def unpack(site: Path, wheels: list[Path]) -> None:
    """Install wheels into ``site`` without pip, for an interpreter that has none, as
    ``pip install --target`` lays them out: unzip each, move its ``*.data/purelib`` and
    ``platlib`` into ``site`` and its ``scripts`` into ``site/bin`` (where ``python -m ruff``
    looks for its binary); other data, such as the kernelspec, is not needed."""
    site.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
        for data in site.glob("*.data"):
            for kind in ("purelib", "platlib"):
                if (data / kind).is_dir():
                    shutil.copytree(data / kind, site, dirs_exist_ok=True)
            if (data / "scripts").is_dir():
                shutil.copytree(data / "scripts", site / "bin", dirs_exist_ok=True)
                for script in (site / "bin").iterdir():
                    script.chmod(0o755)
            shutil.rmtree(data)
    print(f"unpacked {len(wheels)} wheels into {site}")


def _notebook_path(classname: str) -> Path | None:
    """``notebooks.03_gradient_accumulation.ipynb`` (junit's classname) -> the notebook."""
    if not classname.endswith(".ipynb"):
        return None
    stem = classname.removesuffix(".ipynb")
    candidate = ROOT / (stem.replace(".", "/") + ".ipynb")
    if candidate.exists():
        return candidate
    matches = sorted(ROOT.glob(f"**/{stem.rsplit('.', 1)[-1]}.ipynb"))
    return matches[0] if matches else None


def _python_test_path(classname: str) -> list[str]:
    """``tests.core.test_checks.TestX`` (junit's classname) -> ``["tests/core/test_checks.py",
    "TestX"]``."""
    parts = classname.split(".") if classname else []
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if (ROOT / path).exists():
            return [path, *parts[end:]]
    return ["/".join(parts) + ".py"] if parts else []


def describe_cell(notebook: Path, code_cell: int) -> str:
    """Where nbval's ``Cell N`` (the N-th code cell, from 0) is: its index among all the
    notebook's cells, its tags and its first line."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    code = [(index, cell) for index, cell in enumerate(cells) if cell["cell_type"] == "code"]
    if code_cell >= len(code):
        return f"(the notebook has only {len(code)} code cells)"
    index, cell = code[code_cell]
    source = "".join(cell["source"]).strip().splitlines()
    tags = cell.get("metadata", {}).get("tags", [])
    first = source[0] if source else ""
    return f"notebook cell {index}, tags {tags or '[]'}: {first}"


def _plain(text: str) -> str:
    """Text without terminal colours (nbval's, which junit XML keeps as ``#x1B[91m``)."""
    return re.sub(r"(?:\x1b|#x1B)\[[0-9;]*m", "", text)


def read_junit(path: Path) -> list[dict]:
    """Each test case of a pytest junit XML: nodeid-like id, outcome, message, text."""
    cases = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        notebook = _notebook_path(classname)
        if notebook is not None:
            test_id = f"{notebook.relative_to(ROOT)}::{name}"
        else:
            test_id = "::".join([*_python_test_path(classname), name])
        outcome, message, text = "passed", "", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message, text = child.get("message", ""), child.text or ""
                if outcome != "skipped":
                    break
        cases.append(
            {
                "id": test_id,
                "outcome": outcome,
                "message": message,
                "text": text,
                "notebook": str(notebook) if notebook else None,
                "name": name,
                "seconds": float(case.get("time", 0) or 0),
            }
        )
    return cases


def report(junit: Path, out: Path | None) -> int:
    """Print the run's counts, every failed test, and every failed nbval cell with where it
    is; write failed-tests.txt and failed-cells.txt to ``out``. Non-zero: a failure, an
    error, a test the deadline kept from running, or no junit at all."""
    if not junit.exists():
        print(f"report: no junit XML at {junit}: pytest did not get to write it")
        return 1
    cases = read_junit(junit)
    counts: dict[str, int] = {}
    for case in cases:
        counts[case["outcome"]] = counts.get(case["outcome"], 0) + 1
    print("report: " + ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())))
    bad = [case for case in cases if case["outcome"] in ("failed", "error")]
    late = [case for case in cases if case["message"].startswith("gm-deadline")]
    cells = [case for case in bad if case["notebook"] and case["name"].startswith("Cell ")]
    for case in bad:
        first = _plain(case["message"]).strip().splitlines()[:1] or [""]
        print(f"FAILED {case['id']}: {first[0][:200]}")
    if cells:
        print(f"nbval cells that failed ({len(cells)}):")
    for case in cells:
        where = describe_cell(Path(case["notebook"]), int(case["name"].split()[1]))
        print(f"  {case['id']}  ({where})")
        for line in _plain(case["text"]).strip().splitlines()[:30]:
            print(f"      {line}")
    if late:
        print(f"{len(late)} tests did not run: the suite's deadline came first")
    slowest = sorted(cases, key=lambda case: case["seconds"], reverse=True)[:5]
    print("slowest: " + ", ".join(f"{c['id']} {c['seconds']:.1f} s" for c in slowest))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "failed-tests.txt").write_text("".join(f"{c['id']}\n" for c in bad))
        (out / "failed-cells.txt").write_text("".join(f"{c['id']}\n" for c in cells))
    return 1 if bad or late or not cases else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("torch", help="this python's torch as JSON")
    env = commands.add_parser("env", help="print versions; check torch, CUDA, imports")
    env.add_argument("--expect", help="torch's JSON from before the wheels were on the path")
    env.add_argument("--require-cuda", action="store_true")
    env.add_argument("--site", help="where the wheels are installed")
    deps = commands.add_parser("deps", help="warn about unmet requirements of DIR's packages")
    deps.add_argument("site", type=Path)
    kernel = commands.add_parser("kernel", help="start the python3 kernel and compare")
    kernel.add_argument("--require-cuda", action="store_true")
    rep = commands.add_parser("report", help="failed tests and nbval cells from a junit XML")
    rep.add_argument("junit", type=Path)
    rep.add_argument("--out", type=Path)
    unp = commands.add_parser("unpack", help="install wheels into DIR without pip")
    unp.add_argument("site", type=Path)
    unp.add_argument("wheels", type=Path, nargs="+")
    args = parser.parse_args(argv)

    if args.command == "torch":
        print(json.dumps(torch_build()))
        return 0
    if args.command == "unpack":
        unpack(args.site, args.wheels)
        return 0
    if args.command == "report":
        return report(args.junit, args.out)
    if args.command == "deps":
        problems = check_deps(args.site)
        for problem in problems:
            print("warning:", problem)
        print(f"deps: {len(problems)} unmet requirements of the packages in {args.site}")
        return 0
    if args.command == "env":
        expect = json.loads(args.expect) if args.expect else None
        problems = check_env(expect, args.require_cuda, args.site)
    else:
        problems = check_kernel(args.require_cuda)
    for problem in problems:
        print("problem:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
