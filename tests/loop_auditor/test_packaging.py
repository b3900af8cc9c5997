"""The loop auditor as a distribution of its own (loop_auditor/pyproject.toml), checked without
building it: it needs torch alone and imports nothing of the course, the course depends on it
without packaging a second copy, every install command names its folder, and importing it (as
pytest does at every start through its entry point) imports no torch. Building and installing
it: test_distribution.py (marker distribution)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import loop_auditor

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = ROOT / "loop_auditor"
PACKAGE = DISTRIBUTION / "src" / "loop_auditor"
AUDITOR = tomllib.loads((DISTRIBUTION / "pyproject.toml").read_text(encoding="utf-8"))
COURSE = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_package_is_the_one_in_its_distributions_src_folder():
    assert Path(loop_auditor.__file__).resolve() == PACKAGE / "__init__.py"
    assert not (DISTRIBUTION / "__init__.py").exists(), "the folder is the project, not a package"


def test_it_needs_torch_alone_and_has_its_command_and_fixture():
    project = AUDITOR["project"]
    assert project["name"] == "loop-auditor"
    assert project["dependencies"] == ["torch>=2.3"]  # the floor: tests/core/test_versions.py
    assert project["requires-python"] == COURSE["project"]["requires-python"]
    assert project["urls"] == COURSE["project"]["urls"]
    assert project["readme"] == "README.md" and (DISTRIBUTION / "README.md").is_file()
    assert project["scripts"] == {"loop-audit": "loop_auditor.cli:main"}
    plugin = "loop_auditor.pytest_plugin"
    assert project["entry-points"] == {"pytest11": {plugin: plugin}}
    assert AUDITOR["tool"]["setuptools"]["packages"]["find"]["where"] == ["src"]


def test_the_course_depends_on_this_version_and_packages_no_copy_of_it():
    project = COURSE["project"]
    assert f"loop-auditor=={AUDITOR['project']['version']}" in project["dependencies"]
    include = COURSE["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not [pattern for pattern in include if pattern.startswith("loop_auditor")]
    assert "scripts" not in project and "entry-points" not in project  # loop-auditor's own


def test_its_modules_import_only_the_standard_library_torch_and_pytest():
    """What the wheel installs must run with torch alone: nothing of the course (helpers,
    tools), and pytest only in the plugin, which pytest itself loads."""
    found = {}
    for path in sorted(PACKAGE.glob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        allowed = {"torch", "loop_auditor"} | (
            {"pytest"} if path.stem == "pytest_plugin" else set()
        )
        if extra := names - allowed - set(sys.stdlib_module_names):
            found[path.name] = sorted(extra)
    assert found == {}


# Every command that installs the course also installs the loop auditor from its folder: the
# course depends on loop-auditor, which is on no package index, and pip looks there for it
# otherwise (finding nothing, or someone else's package).
INSTALLING_THE_COURSE = re.compile(
    r"pip install (?:(?!pip install)[^`\n])*?(?:-e|--editable) \.(?![\w/])"
)


def install_commands(text: str) -> list[str]:
    """Each ``pip install ... -e .`` in ``text``, a command wrapped over lines joined first."""
    joined = re.sub(r"\s*\n\s*", " ", text)
    return [match.group(0) for match in INSTALLING_THE_COURSE.finditer(joined)]


def test_every_install_of_the_course_names_the_loop_auditors_folder():
    files = [ROOT / "README.md", ROOT / "constraints.txt", ROOT / ".ci" / "run"]
    files += [ROOT / "binder" / "postBuild", *sorted((ROOT / "workshop").rglob("*.md"))]
    files += sorted((ROOT / "notebooks").rglob("*.ipynb"))  # notebook 00's table, for one
    found = {
        path.relative_to(ROOT).as_posix(): install_commands(path.read_text()) for path in files
    }
    assert sum(map(len, found.values())) >= 8, found  # the check sees the commands
    missing = {
        name: [command for command in commands if "./loop_auditor" not in command]
        for name, commands in found.items()
    }
    assert {name: commands for name, commands in missing.items() if commands} == {}
    torch_range = (ROOT / "tools" / "torch_range.py").read_text()
    assert '"--editable", "./loop_auditor", "--editable", "."' in torch_range


def test_the_install_check_sees_a_command_that_forgets_the_folder():
    text = "run `python -m pip install -r requirements.txt\n  -e .` and `pip install -e ./x`"
    assert install_commands(text) == ["pip install -r requirements.txt -e ."]
    assert install_commands("pip install --no-deps --editable ./loop_auditor --editable .") == [
        "pip install --no-deps --editable ./loop_auditor --editable ."
    ]
    assert install_commands("pip install -e ./loop_auditor") == []


# In a fresh interpreter: what importing the package and its pytest plugin loads, and what its
# lazy names give (one process for all of it: each imports torch at the end).
IMPORTS = textwrap.dedent(
    """
    import json, sys
    import loop_auditor.pytest_plugin
    report = {"after_plugin": sorted(m for m in sys.modules if m.split(".")[0] == "torch")}
    import loop_auditor
    report["dir"] = [name for name in loop_auditor.__all__ if name not in dir(loop_auditor)]
    try:
        loop_auditor.LoopAuditer
    except AttributeError as error:
        report["typo"] = str(error)
    from loop_auditor import CODES, LoopAuditor
    from loop_auditor.auditor import LoopAuditor as defined
    report["same"] = LoopAuditor is defined and "missing-zero-grad" in CODES
    report["torch_after_use"] = "torch" in sys.modules
    print(json.dumps(report))
    """
)


def test_importing_it_and_its_pytest_plugin_imports_no_torch(tmp_path):
    """pytest imports the plugin at every start once loop-auditor is installed (its pytest11
    entry point): that must not import torch (seconds), only a test that uses the fixture."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report == {
        "after_plugin": [],
        "dir": [],
        "typo": "module 'loop_auditor' has no attribute 'LoopAuditer'",
        "same": True,
        "torch_after_use": True,
    }


def test_an_old_torch_is_refused_at_import_from_its_metadata_without_importing_it(tmp_path):
    """With torch not imported yet, the version comes from torch's installed metadata; an old
    one stops ``import loop_auditor`` with the fix, before torch is imported."""
    site = tmp_path / "site"
    info = site / "torch-2.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.1.0\n")
    script = (
        f"import sys; sys.path.insert(0, {str(site)!r})\n"
        "try:\n    import loop_auditor\nexcept ImportError as error:\n    print(error)\n"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "the loop auditor needs torch 2.3 or newer, and this is torch 2.1.0: "
        "run `python -m pip install -U torch`",
        "False",
    ]


@pytest.mark.parametrize("version", ["2.3.0", "2.13.0+cpu", "2.14.0a0+git1234"])
def test_a_torch_at_or_above_the_floor_is_accepted(version):
    assert loop_auditor.torch_too_old(version) is None
