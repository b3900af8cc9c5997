"""Repository-level checks: Binder matches requirements.txt, one set of minimum versions,
README matches the notebooks, and ruff is clean on helpers, tests, tools and notebooks."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib

from course import ROOT, notebook_paths, read, repository_url, title

from helpers.setup_check.environment import REQUIREMENTS, parse_version


def requirement_lines(path):
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def split_requirement(line):
    name, spec = re.match(r"([A-Za-z0-9_.-]+)(.*)", line).groups()
    return name.lower(), spec


def test_binder_installs_the_same_packages_with_the_cpu_torch_wheel():
    course = dict(split_requirement(line) for line in requirement_lines("requirements.txt"))
    binder_lines = requirement_lines("binder/requirements.txt")
    assert binder_lines[0] == "--extra-index-url https://download.pytorch.org/whl/cpu"
    binder = dict(split_requirement(line) for line in binder_lines[1:])
    assert binder == course


def project_setting(name: str):
    """A ``[project]`` value of pyproject.toml, a string or list literal on one line."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(rf"^{name}\s*=\s*(.+)$", text, flags=re.MULTILINE)
    assert match, f"pyproject.toml has no one-line {name} = ..."
    return ast.literal_eval(match.group(1))


def minimums(lines):
    """{package: (minimum version)} of requirement lines written ``name>=X.Y``."""
    found = {}
    for line in lines:
        name, spec = split_requirement(line)
        match = re.fullmatch(r">=(\d+(?:\.\d+)*)", spec)
        if match:
            found[name] = parse_version(match.group(1))
    return found


def test_learners_get_ranges_and_only_the_constraints_file_pins_versions():
    for path in ("requirements.txt", "binder/requirements.txt", "requirements-test.txt"):
        assert not any("==" in line for line in requirement_lines(path) if "torch" in line), path
    assert requirement_lines("constraints.txt") == [
        "torch==2.13.0",  # the committed outputs
        # the frameworks notebook 07 quotes (tests/at_scale/test_frameworks_real.py)
        "accelerate==1.15.0",
        "lightning==2.6.6",
        "pytorch-lightning==2.6.6",
        "transformers==5.24.0",
    ]


def test_notebook_00_checks_pyprojects_minimums():
    """torch's and Python's minimums: tests/core/test_versions.py."""
    declared = minimums(project_setting("dependencies"))
    checked = {req.name: req.minimum for req in REQUIREMENTS}
    for name, minimum in declared.items():
        assert checked[name] == minimum, (
            f"helpers/setup_check/environment.py checks {name} >= {checked[name]}"
        )


def test_binder_pins_the_tested_python_and_installs_the_helpers():
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    assert runtime == "python-3.11"
    assert "Python 3.11" in (ROOT / "README.md").read_text(encoding="utf-8")
    post_build = (ROOT / "binder" / "postBuild").read_text()
    assert "pip install --no-deps --editable ./loop_auditor --editable ." in post_build


def test_readme_lists_every_notebook_and_links_binder_to_notebook_00():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for path in notebook_paths():
        nb = read(path)
        overview = next(c.source for c in nb.cells if "**Minutes:**" in c.source)
        teaching, exercises = re.search(r"(\d+) teaching / (\d+) exercises", overview).groups()
        row = f"[{title(nb)}](notebooks/{path.name}) | {teaching} / {exercises} |"
        assert row in readme, f"README's notebook table lacks: {row}"
    owner_repo = repository_url().removeprefix("https://github.com/")
    binder = f"https://mybinder.org/v2/gh/{owner_repo}/main?urlpath=lab/tree/notebooks/00_setup_check.ipynb"
    assert binder in readme


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    command = "python -m pytest"
    assert command in readme and command in ci


def test_the_chinese_notebooks_run_in_a_ci_step_of_their_own():
    """Left out of the README's test command (its 3 minutes), run by CI on their own."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "--ignore=notebooks/zh-CN" in options["tool"]["pytest"]["ini_options"]["addopts"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "`python -m pytest -n auto --dist loadfile notebooks/zh-CN`" in readme
    assert "\npython -m pytest -q -n auto --dist loadfile notebooks/zh-CN\n" in ci


def ruff(*args):
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_ruff_check_is_clean():
    done = ruff("check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_is_clean():
    done = ruff("format", "--check", ".")
    assert done.returncode == 0, done.stdout + done.stderr
