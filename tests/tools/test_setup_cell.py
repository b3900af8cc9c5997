"""The setup cell every notebook starts with, run as Colab and as a local kernel would."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sync_notebooks
import translate_notebooks
from course import ROOT, repository_url

AUDITOR_PACKAGE = ROOT / "loop_auditor" / "src" / "loop_auditor"

# Runs the setup cell in a fresh interpreter where neither `helpers` nor `loop_auditor` is
# importable (the checkout's editable installs taken off the path), records the commands it
# runs (git really runs; pip is only recorded), then reports what happened and where the two
# packages were imported from.
HARNESS = textwrap.dedent(
    """
    import importlib.util, json, subprocess, sys, types
    sys.path = [p for p in sys.path if p not in ("", {root!r}, {auditor_src!r})]
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    assert importlib.util.find_spec("helpers") is None
    assert importlib.util.find_spec("loop_auditor") is None
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
    import helpers, loop_auditor, os
    from loop_auditor import LoopAuditor
    from helpers.checks import CheckResult
    print(json.dumps({{"commands": commands, "helpers": helpers.__file__, "stopped": stopped,
                      "loop_auditor": loop_auditor.__file__,
                      "GM_LANG": os.environ.get("GM_LANG"),
                      "verdict": repr(CheckResult(True, "17"))}}))
    """
)


# Runs each scenario's harness in its own fork of one interpreter that has imported torch and
# nothing of the course: torch's import is most of a fresh interpreter's 2 s, and the setup
# cell imports it to read its version. Each fork starts where `helpers` was never imported,
# in its own folder, with its own environment and output files, as a fresh kernel would.
FORKS = textwrap.dedent(
    """
    import json, os, sys, traceback
    import torch  # noqa: F401
    codes = []
    for scenario in json.load(sys.stdin):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.chdir(scenario["cwd"])
                os.environ.clear()
                os.environ.update(scenario["env"])
                for fd, name in ((1, "stdout"), (2, "stderr")):
                    os.dup2(os.open(scenario[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
                exec(compile(scenario["script"], "harness", "exec"), {"__name__": "__main__"})
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    print(json.dumps(codes))
    """
)


def scenario(
    cwd,
    colab: bool,
    env_repo: str | None = None,
    hide: tuple = (),
    notebook="03_gradient_accumulation",
    torch_version=None,
    source: str | None = None,
) -> dict:
    """The harness for one notebook's setup cell (``source``, else the English one), the
    folder it runs in and its environment."""
    source = source or sync_notebooks.setup_source(repository_url(), notebook)
    script = HARNESS.format(
        root=str(ROOT),
        auditor_src=str(ROOT / "loop_auditor" / "src"),
        colab=colab,
        source=source,
        hide=list(hide),
        torch_version=torch_version,
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    if env_repo:
        env["COURSE_REPO"] = env_repo
    return {"cwd": str(cwd), "env": env, "script": script}


@pytest.fixture(scope="module")
def setup_cell_runs(tmp_path_factory) -> dict:
    """Every scenario the tests read, run once: name -> its folder, exit status and output."""
    on_colab = {"colab": True, "env_repo": str(ROOT)}  # the course cloned from this checkout
    scenarios = {
        "local": scenario(ROOT / "notebooks", colab=False),
        "local, Chinese": scenario(
            ROOT / "notebooks" / "zh-CN",
            colab=False,
            source=translate_notebooks.chinese_setup(repository_url(), "00_setup_check.ipynb"),
        ),
        "colab": scenario(tmp_path_factory.mktemp("colab"), **on_colab),
        "colab, Chinese": scenario(
            tmp_path_factory.mktemp("colab"),
            **on_colab,
            source=translate_notebooks.chinese_setup(repository_url(), "00_setup_check.ipynb"),
        ),
        "colab lacking ipywidgets": scenario(
            tmp_path_factory.mktemp("colab"), **on_colab, hide=("ipywidgets",)
        ),
        "08 on torch 2.8.0": scenario(
            ROOT / "notebooks", colab=False, notebook="08_training_stacks", torch_version="2.8.0"
        ),
        "03 on torch 2.8.0": scenario(ROOT / "notebooks", colab=False, torch_version="2.8.0"),
        "colab, 07 on torch 2.3.0": scenario(
            tmp_path_factory.mktemp("colab"),
            **on_colab,
            notebook="07_accumulation_at_scale",
            torch_version="2.3.0",
        ),
    }
    outputs = tmp_path_factory.mktemp("outputs")
    for index, run in enumerate(scenarios.values()):
        run["stdout"], run["stderr"] = (str(outputs / f"{index}.{name}") for name in ("out", "err"))
    done = subprocess.run(
        [sys.executable, "-c", FORKS],
        input=json.dumps(list(scenarios.values())),
        cwd=outputs,
        env={"PATH": "/usr/bin:/bin", "HOME": str(outputs)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    codes = json.loads(done.stdout)
    return {
        name: {
            "cwd": Path(run["cwd"]),
            "code": code,
            "stdout": Path(run["stdout"]).read_text(),
            "stderr": Path(run["stderr"]).read_text(),
        }
        for (name, run), code in zip(scenarios.items(), codes, strict=True)
    }


def run_setup_cell(setup_cell_runs: dict, name: str):
    """What the setup cell printed in the scenario ``name``, and the harness's report."""
    run = setup_cell_runs[name]
    assert run["code"] == 0, run["stderr"]
    *printed, report = run["stdout"].strip().splitlines()
    return printed, json.loads(report)


def test_in_the_notebooks_folder_it_finds_the_helpers_and_prints_nothing(setup_cell_runs):
    printed, report = run_setup_cell(setup_cell_runs, "local")
    assert printed == []
    assert report["commands"] == [] and report["stopped"] is None
    assert report["helpers"] == str(ROOT / "helpers" / "__init__.py")
    # the package in loop_auditor/src, not loop_auditor/ (its distribution's folder, which
    # with the root on sys.path is a namespace package with nothing in it)
    assert report["loop_auditor"] == str(AUDITOR_PACKAGE / "__init__.py")
    assert report["GM_LANG"] is None
    assert report["verdict"] == "✅ Correct: 17"


def test_in_the_chinese_notebooks_folder_it_finds_the_helpers_and_sets_gm_lang(setup_cell_runs):
    printed, report = run_setup_cell(setup_cell_runs, "local, Chinese")
    assert printed == []
    assert report["commands"] == [] and report["stopped"] is None
    assert report["helpers"] == str(ROOT / "helpers" / "__init__.py")
    assert report["loop_auditor"] == str(AUDITOR_PACKAGE / "__init__.py")
    assert report["GM_LANG"] == "zh_CN"
    assert report["verdict"] == "✅ 正确。17"  # the course's messages speak Chinese


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the course as a git repository")
def test_on_colab_the_chinese_setup_cell_brings_the_message_catalogs(setup_cell_runs):
    """The clone holds the compiled catalogs (committed): the verdicts are Chinese there too."""
    printed, report = run_setup_cell(setup_cell_runs, "colab, Chinese")
    clone = setup_cell_runs["colab, Chinese"]["cwd"] / repository_url().rsplit("/", 1)[-1]
    assert report["helpers"] == str(clone / "helpers" / "__init__.py")
    assert (report["GM_LANG"], report["verdict"]) == ("zh_CN", "✅ 正确。17")
    assert printed == []


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the course as a git repository")
def test_on_colab_it_clones_the_course_and_installs_nothing_colab_has(setup_cell_runs):
    printed, report = run_setup_cell(setup_cell_runs, "colab")
    clone = setup_cell_runs["colab"]["cwd"] / repository_url().rsplit("/", 1)[-1]
    assert report["commands"] == [["git", "clone", "-q", "--depth=1", str(ROOT), str(clone)]]
    assert report["helpers"] == str(clone / "helpers" / "__init__.py")
    auditor = clone / AUDITOR_PACKAGE.relative_to(ROOT)
    assert report["loop_auditor"] == str(auditor / "__init__.py")
    assert printed == []


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the course as a git repository")
def test_on_colab_it_installs_only_what_is_missing_and_never_torch(setup_cell_runs):
    _, report = run_setup_cell(setup_cell_runs, "colab lacking ipywidgets")
    git, pip = report["commands"]
    assert git[:2] == ["git", "clone"]
    assert pip[1:] == ["-m", "pip", "install", "-q", "ipywidgets"]


def test_on_a_torch_too_old_for_the_notebook_it_stops_with_the_fix(setup_cell_runs):
    _, report = run_setup_cell(setup_cell_runs, "08 on torch 2.8.0")
    assert report["stopped"] == (
        "CourseSetupError: Notebook 08 needs torch 2.9 or newer, and this kernel has torch 2.8.0 "
        "(notebooks 00-07 and 09 run on it). To upgrade, run `python -m pip install -U torch`, "
        "then restart the kernel."
    )
    _, report = run_setup_cell(setup_cell_runs, "03 on torch 2.8.0")
    assert report["stopped"] is None, "notebook 03 runs on 2.8.0"


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the course as a git repository")
def test_on_colab_with_a_torch_too_old_it_clones_then_stops_with_colabs_fix(setup_cell_runs):
    _, report = run_setup_cell(setup_cell_runs, "colab, 07 on torch 2.3.0")
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
