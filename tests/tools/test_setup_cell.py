"""The setup cell every notebook starts with, run as Colab and as a local kernel would."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import sync_notebooks
from course import ROOT, repository_url

# Runs the setup cell in a fresh interpreter where `helpers` is not importable, records the
# commands it runs (git really runs; pip is only recorded), then reports what happened.
HARNESS = textwrap.dedent(
    """
    import importlib.util, json, subprocess, sys, types
    sys.path = [p for p in sys.path if p not in ("", {root!r})]
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    assert importlib.util.find_spec("helpers") is None
    if {colab!r}:
        sys.modules["google.colab"] = types.ModuleType("google.colab")
    real_find_spec = importlib.util.find_spec
    def find_spec(name, *args):
        return None if name in {hide!r} else real_find_spec(name, *args)
    importlib.util.find_spec = find_spec
    commands, real_run = [], subprocess.run
    def run(cmd, *args, **kwargs):
        commands.append(list(cmd))
        return real_run(cmd, *args, **kwargs) if cmd[0] == "git" else None
    subprocess.run = run
    if {torch_version!r}:  # the kernel's torch reports this version
        import torch
        torch.__version__ = {torch_version!r}
    try:
        exec(compile({source!r}, "setup-cell", "exec"), {{}})
        stopped = None
    except Exception as error:
        stopped = f"{{type(error).__name__}}: {{error}}"
    import helpers
    print(json.dumps({{"commands": commands, "helpers": helpers.__file__, "stopped": stopped}}))
    """
)


def run_setup_cell(
    cwd,
    colab: bool,
    env_repo: str | None = None,
    hide: tuple = (),
    notebook="03_gradient_accumulation",
    torch_version=None,
):
    source = sync_notebooks.setup_source(repository_url(), notebook)
    script = HARNESS.format(
        root=str(ROOT), colab=colab, source=source, hide=list(hide), torch_version=torch_version
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    if env_repo:
        env["COURSE_REPO"] = env_repo
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    *printed, report = done.stdout.strip().splitlines()
    return printed, json.loads(report)


def test_in_the_notebooks_folder_it_finds_the_helpers_and_prints_nothing():
    printed, report = run_setup_cell(ROOT / "notebooks", colab=False)
    assert printed == []
    assert report["commands"] == [] and report["stopped"] is None
    assert report["helpers"] == str(ROOT / "helpers" / "__init__.py")


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the course as a git repository")
def test_on_colab_it_clones_the_course_and_installs_nothing_colab_has(tmp_path):
    printed, report = run_setup_cell(tmp_path, colab=True, env_repo=str(ROOT))
    clone = tmp_path / repository_url().rsplit("/", 1)[-1]
    assert report["commands"] == [["git", "clone", "-q", "--depth=1", str(ROOT), str(clone)]]
    assert report["helpers"] == str(clone / "helpers" / "__init__.py")
    assert printed == []


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the course as a git repository")
def test_on_colab_it_installs_only_what_is_missing_and_never_torch(tmp_path):
    _, report = run_setup_cell(tmp_path, colab=True, env_repo=str(ROOT), hide=("ipywidgets",))
    git, pip = report["commands"]
    assert git[:2] == ["git", "clone"]
    assert pip[1:] == ["-m", "pip", "install", "-q", "ipywidgets"]


def test_on_a_torch_too_old_for_the_notebook_it_stops_with_the_fix():
    _, report = run_setup_cell(
        ROOT / "notebooks", colab=False, notebook="08_training_stacks", torch_version="2.8.0"
    )
    assert report["stopped"] == (
        "CourseSetupError: Notebook 08 needs torch 2.9 or newer, and this kernel has torch 2.8.0 "
        "(notebooks 00-07 and 09 run on it). To upgrade, run `python -m pip install -U torch`, "
        "then restart the kernel."
    )
    _, report = run_setup_cell(ROOT / "notebooks", colab=False, torch_version="2.8.0")
    assert report["stopped"] is None, "notebook 03 runs on 2.8.0"


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the course as a git repository")
def test_on_colab_with_a_torch_too_old_it_clones_then_stops_with_colabs_fix(tmp_path):
    _, report = run_setup_cell(
        tmp_path,
        colab=True,
        env_repo=str(ROOT),
        notebook="07_accumulation_at_scale",
        torch_version="2.3.0",
    )
    assert report["commands"][0][:2] == ["git", "clone"]
    assert report["stopped"] == (
        "CourseSetupError: Notebook 07 needs torch 2.4 or newer, and this kernel has torch 2.3.0 "
        "(notebooks 00-06 run on it). To upgrade, run `!pip install -U torch` in a cell, then "
        "Runtime > Restart session."
    )


def test_sync_restores_the_setup_cells_folding_when_it_is_lost(tmp_path, monkeypatch):
    """Opening the cell in JupyterLab writes source_hidden: false; --check reports it, and a
    sync folds it again without touching anything else."""
    import shutil

    import course

    folder = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", folder)
    monkeypatch.setattr(course, "NOTEBOOKS", folder)
    path = course.notebook_paths()[2]
    nb = course.read(path)
    [index] = course.cells_tagged(nb, sync_notebooks.SETUP_TAG)
    nb.cells[index].metadata["jupyter"]["source_hidden"] = False
    del nb.cells[index].metadata["cellView"]
    course.write(nb, path)
    assert sync_notebooks.sync(check=True) == [path.name]
    assert sync_notebooks.sync() == [path.name]
    cell = course.read(path).cells[index]
    assert cell.metadata["jupyter"] == {"source_hidden": True}
    assert cell.metadata["cellView"] == "form"
    assert sync_notebooks.sync(check=True) == []
    assert (folder / path.name).read_bytes() == (ROOT / "notebooks" / path.name).read_bytes()
