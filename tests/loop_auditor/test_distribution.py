"""The loop auditor's distribution, built and installed as a practitioner gets it: ``python -m
build`` makes its wheel and sdist (and the sdist a wheel again), the wheel holds the package
and nothing else, and in a fresh virtual environment with torch alone (``constraints.txt``'s,
a local file or pip's cache here) the wheel installs, pulls nothing more, and gives ``import
loop_auditor``, ``loop-audit`` and ``python -m loop_auditor``, which find a forgotten
``zero_grad()`` in a small script. The course's own wheel holds none of it.

It builds in isolated environments (build's default: setuptools from the package index, as
pip builds it for a practitioner), and makes a virtual environment with torch: 83 s on 2 busy
cores (torch's install 38 s of it), so it is a step of its own, left out of the test command:
``python -m pytest -m distribution -s`` (which prints the install's time and size; CI runs it
beside the Colab simulation and the instructor's copy)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
import strip_solutions
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.distribution

ROOT = Path(__file__).resolve().parents[2]
NAME = "loop-auditor"
PROJECT = tomllib.loads((ROOT / "loop_auditor" / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]

# A training loop with the classic bug: no zero_grad(), so step 2 uses step 1's gradients too.
TRAIN = textwrap.dedent(
    """
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        nn.functional.mse_loss(model(torch.randn(4, 3)), torch.randn(4, 1)).backward()
        optimizer.step()
    print("trained")
    """
)
# The Python API on the same bug, in the installed package
API = textwrap.dedent(
    """
    import json, sys, torch
    import loop_auditor
    from loop_auditor import LoopAuditor

    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with LoopAuditor(model, optimizer) as audit:
        for _ in range(2):
            model(torch.randn(4, 3)).sum().backward()
            optimizer.step()
    print(json.dumps({"file": loop_auditor.__file__,
                      "codes": [finding.code for finding in audit.findings]}))
    """
)


def run(*command, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, env=env, **kwargs
    )
    return done


def ok(*command, **kwargs) -> subprocess.CompletedProcess:
    done = run(*command, **kwargs)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def copy_of_the_course(out: Path) -> Path:
    """What a learner installs the course from (tools/strip_solutions.py's list, the loop
    auditor's folder among it), copied without what a build or an install leaves behind: the
    builds write into it, never into this checkout."""
    out.mkdir(parents=True)
    for name in strip_solutions.course_files():
        source, target = ROOT / name, out / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=strip_solutions.IGNORED)
        else:
            shutil.copy2(source, target)
    return out


def wheel_files(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as wheel:
        return sorted(wheel.namelist())


def dependency_closure(site: Path, name: str) -> set[str]:
    """``name`` and every distribution it requires, transitively, as installed in ``site`` and
    as this interpreter's markers select them (the environment was made from it)."""
    installed = {
        canonicalize_name(dist.metadata["Name"]): dist
        for dist in importlib.metadata.distributions(path=[str(site)])
    }
    found, todo = set(), [canonicalize_name(name)]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        assert current in installed, f"{current} is required but not installed in {site}"
        found.add(current)
        for line in installed[current].requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return found


def pip_list(python: Path) -> set[str]:
    listed = json.loads(ok(python, "-m", "pip", "list", "--format=json").stdout)
    return {canonicalize_name(item["name"]) for item in listed}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The loop auditor's wheel and sdist, the wheel built again from the sdist, and the
    course's wheel, all built from a copy of the course."""
    base = tmp_path_factory.mktemp("distribution")
    course = copy_of_the_course(base / "course")
    dist = base / "dist"
    ok(
        sys.executable,
        "-m",
        "build",
        "--sdist",
        "--wheel",
        "--outdir",
        dist,
        course / "loop_auditor",
    )
    [wheel], [sdist] = dist.glob("*.whl"), dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:  # an archive built here: safe to unpack as it is
        data = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.11.4 and newer
        archive.extractall(base / "unpacked", **data)
    [unpacked] = (base / "unpacked").iterdir()
    ok(sys.executable, "-m", "build", "--wheel", "--outdir", base / "from-sdist", unpacked)
    [again] = (base / "from-sdist").glob("*.whl")
    ok(sys.executable, "-m", "build", "--wheel", "--outdir", base / "course-dist", course)
    [course_wheel] = (base / "course-dist").glob("*.whl")
    return {"wheel": wheel, "sdist": sdist, "again": again, "course": course_wheel, "base": base}


def test_the_wheel_holds_the_package_alone_and_the_sdist_builds_the_same(built):
    names = wheel_files(built["wheel"])
    info = f"loop_auditor-{VERSION}.dist-info/"
    package = ROOT / "loop_auditor" / "src" / "loop_auditor"
    # its modules and its compiled message catalogs (package data), nothing else
    files = [*package.glob("*.py"), *package.glob("locale/*/LC_MESSAGES/*.mo")]
    assert package / "locale" / "zh_CN" / "LC_MESSAGES" / "loop_auditor.mo" in files
    expected = sorted(f"loop_auditor/{p.relative_to(package).as_posix()}" for p in files)
    assert [n for n in names if not n.startswith(info)] == expected
    assert {n.removeprefix(info) for n in names if n.startswith(info)} == {
        "METADATA", "WHEEL", "RECORD", "entry_points.txt", "top_level.txt"
    }  # fmt: skip
    assert wheel_files(built["again"]) == names
    with zipfile.ZipFile(built["wheel"]) as wheel:
        metadata = wheel.read(f"{info}METADATA").decode()
        entry_points = wheel.read(f"{info}entry_points.txt").decode()
    assert [line for line in metadata.splitlines() if line.startswith("Requires-Dist")] == [
        "Requires-Dist: torch>=2.3"
    ]
    assert "loop-audit = loop_auditor.cli:main" in entry_points
    assert "loop_auditor.pytest_plugin = loop_auditor.pytest_plugin" in entry_points
    with tarfile.open(built["sdist"]) as archive:
        top = f"loop_auditor-{VERSION}/"
        files = {name.removeprefix(top) for name in archive.getnames()}
    assert {"pyproject.toml", "README.md", "src/loop_auditor/__init__.py"} <= files
    assert not [name for name in files if name.startswith(("tests", "helpers", "notebooks"))]


def test_the_courses_wheel_holds_no_loop_auditor_and_depends_on_it(built):
    names = wheel_files(built["course"])
    assert [name for name in names if "loop_auditor" in name] == []
    assert any(name.startswith("helpers/") for name in names)
    assert "helpers/locale/zh_CN/LC_MESSAGES/helpers.mo" in names  # its message catalog
    [info] = {name.split("/")[0] for name in names if ".dist-info/" in name}
    with zipfile.ZipFile(built["course"]) as wheel:
        metadata = wheel.read(f"{info}/METADATA").decode()
        entry_points = (
            wheel.read(f"{info}/entry_points.txt").decode()
            if f"{info}/entry_points.txt" in names
            else ""
        )
    assert f"Requires-Dist: loop-auditor=={VERSION}" in metadata.splitlines()
    assert "loop_auditor" not in entry_points  # the command and the fixture are loop-auditor's


def test_the_wheel_installs_with_torch_alone_and_its_command_finds_the_bug(built, capsys):
    base = built["base"]
    env_dir = base / "env"
    python = env_dir / "bin" / "python"
    ok(sys.executable, "-m", "venv", env_dir)
    venv_own = pip_list(python)  # pip (and setuptools on older Pythons)
    started = time.perf_counter()
    ok(python, "-m", "pip", "install", "-q", "-c", ROOT / "constraints.txt", "torch")
    torch_seconds = time.perf_counter() - started
    [site] = (env_dir / "lib").glob("python3.*/site-packages")
    with_torch = dependency_closure(site, "torch")
    assert pip_list(python) == venv_own | with_torch
    installing = ok(python, "-m", "pip", "install", built["wheel"])
    assert pip_list(python) == venv_own | with_torch | {NAME}, installing.stdout
    assert dependency_closure(site, NAME) == with_torch | {NAME}

    work = base / "work"
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    api = json.loads(ok(python, "-c", API, cwd=work).stdout)
    assert api == {
        "file": str(site / "loop_auditor" / "__init__.py"),
        "codes": ["missing-zero-grad"],
    }
    for command in ([env_dir / "bin" / "loop-audit"], [python, "-m", "loop_auditor"]):
        done = run(*command, "train.py", cwd=work)
        assert done.returncode == 3, done.stderr  # findings
        assert done.stdout == "trained\n"
        assert "missing-zero-grad (optimizer, step 2)" in done.stderr, done.stderr
        assert run(*command, "--exit-zero", "train.py", cwd=work).returncode == 0
    # pytest is not there: the plugin is for environments that have it
    assert "pytest" not in pip_list(python)
    sizes = {
        "site-packages": sum(p.stat().st_size for p in site.rglob("*") if p.is_file()),
        NAME: sum(
            p.stat().st_size
            for folder in (site / "loop_auditor", *site.glob("loop_auditor-*.dist-info"))
            for p in folder.rglob("*")
            if p.is_file()
        ),
    }
    with capsys.disabled():  # the figures, for whoever runs it: -m distribution -s
        print(
            f"\nfresh environment: torch installed in {torch_seconds:.1f} s; site-packages "
            f"{sizes['site-packages'] / 2**20:.0f} MiB, of which {NAME} "
            f"{sizes[NAME] / 2**10:.0f} KiB; installed: {sorted(pip_list(python) - venv_own)}"
        )
