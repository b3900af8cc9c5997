"""The versions the course runs on, stated once (helpers/versions.py): the places that repeat
them agree with it, and a learner on a torch or Python that is too old gets a message with the
fix, in notebook 00's report and at every notebook's setup cell, never a traceback."""

from __future__ import annotations

import re
import tomllib

import pytest
from course import NOTEBOOKS, ROOT, cells_tagged, notebook_paths, read, repository_url
from jupyter_client.manager import KernelManager
from run_notebooks import run_cell
from sync_notebooks import SETUP_TAG, setup_source

from helpers import versions
from helpers.setup_check import environment
from helpers.versions import (
    PYTHON_MINIMUM,
    TORCH_FLOOR,
    TORCH_FOR_EVERY_NOTEBOOK,
    TORCH_MINIMUMS,
    CourseSetupError,
    dotted,
    minimums_sentence,
    parse_version,
    stop_unless_supported,
    torch_verdict,
)

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# The loop auditor's own distribution: the same floor and Python
AUDITOR_PYPROJECT = tomllib.loads((ROOT / "loop_auditor" / "pyproject.toml").read_text("utf-8"))
README = (ROOT / "README.md").read_text(encoding="utf-8")


def requirement_lines(path: str) -> list[str]:
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith(("#", "-"))]


def torch_minimum(lines: list[str]) -> tuple[int, ...]:
    [spec] = [line for line in lines if re.match(r"torch\b", line)]
    return parse_version(re.fullmatch(r"torch>=([\d.]+)", spec).group(1))


# --- one statement, repeated where it must be ------------------------------------------------


def test_every_notebook_has_a_minimum_and_the_ends_of_the_range_are_the_measured_ones():
    assert list(TORCH_MINIMUMS) == [path.stem for path in notebook_paths()]
    assert (TORCH_FLOOR, TORCH_FOR_EVERY_NOTEBOOK) == ((2, 3), (2, 9))


def test_pyproject_states_the_floor_and_the_python_minimum():
    for project in (PYPROJECT["project"], AUDITOR_PYPROJECT["project"]):
        assert torch_minimum(project["dependencies"]) == TORCH_FLOOR, project["name"]
        assert project["requires-python"] == f">={dotted(PYTHON_MINIMUM)}", project["name"]
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py" + "".join(map(str, PYTHON_MINIMUM))


def test_requirements_and_binder_ask_for_the_torch_every_notebook_runs_on():
    assert torch_minimum(requirement_lines("requirements.txt")) == TORCH_FOR_EVERY_NOTEBOOK
    assert torch_minimum(requirement_lines("binder/requirements.txt")) == TORCH_FOR_EVERY_NOTEBOOK
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    assert parse_version(runtime.removeprefix("python-")) >= PYTHON_MINIMUM


def test_notebook_00_checks_the_floor_and_states_every_minimum():
    torch_requirement = next(r for r in environment.REQUIREMENTS if r.name == "torch")
    assert torch_requirement.minimum == TORCH_FLOOR
    text = "\n".join(c.source for c in read(NOTEBOOKS / "00_setup_check.ipynb").cells)
    assert minimums_sentence() in text
    assert f'"Notebook 00 needs torch {dotted(TORCH_FLOOR)} or newer"' in text
    assert f"Python {dotted(PYTHON_MINIMUM)} or newer" in text


def test_the_readme_states_the_minimums_and_ci_runs_both_ends_of_the_range():
    assert minimums_sentence() in README
    assert f"Python {dotted(PYTHON_MINIMUM)} or newer" in README
    assert f"the loop auditor needs only torch {dotted(TORCH_FLOOR)}" in README
    auditor_readme = (ROOT / "loop_auditor" / "README.md").read_text(encoding="utf-8")
    needs = f"Python {dotted(PYTHON_MINIMUM)} or newer and torch {dotted(TORCH_FLOOR)} or newer"
    assert f"The loop auditor needs {needs}" in auditor_readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python tools/torch_range.py minimums" in ci
    assert "python tools/torch_range.py newest" in ci
    tested = README[README.index("## Tested on") :]
    for minimum in sorted(set(TORCH_MINIMUMS.values())):
        assert f"| {dotted((*minimum, 0))} |" in tested, f"Tested on lacks torch {minimum}"
    assert f"| {dotted(versions.TORCH_NEWEST_TESTED)} |" in tested


def test_the_learner_setup_page_states_the_minimums():
    setup = (ROOT / "workshop" / "setup.md").read_text(encoding="utf-8")
    assert minimums_sentence() in setup
    assert f"Python {dotted(PYTHON_MINIMUM)} or newer" in setup
    assert f"torch {dotted(TORCH_FOR_EVERY_NOTEBOOK)} or newer" in setup


def test_the_minimums_in_words():
    assert minimums_sentence() == (
        "Notebooks 00-06 run on torch 2.3 or newer; 07 and 09 on 2.4 or newer; 08 on 2.9 or newer."
    )


# --- what a learner sees ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("found", "status", "text"),
    [
        ("2.13.0+cpu", "OK", "2.13.0+cpu"),
        ("2.15.0+cu132", "OK", "2.15.0+cu132"),
        ("2.9.0", "OK", "2.9.0"),
        (
            "2.6.0",
            "WARN",
            "2.6.0: notebooks 00-07 and 09 run; 08 needs 2.9 or newer -> "
            "python -m pip install -U torch",
        ),
        (
            "2.3.1",
            "WARN",
            "2.3.1: notebooks 00-06 run; 07 and 09 need 2.4 or newer; 08 needs 2.9 or newer -> "
            "python -m pip install -U torch",
        ),
        (
            "2.2.2",
            "FAIL",
            "2.2.2: 00-06 need 2.3 or newer; 07 and 09 need 2.4 or newer; 08 needs 2.9 or newer -> "
            "python -m pip install -U torch",
        ),
        (None, "FAIL", "not installed -> python -m pip install torch"),
    ],
)
def test_the_torch_verdict_names_what_cannot_run_and_the_fix(found, status, text):
    assert torch_verdict(found) == (status, text)


def test_notebook_00s_torch_line(monkeypatch):
    real_version = environment.metadata.version

    def report_with(found):
        monkeypatch.setattr(
            environment.metadata,
            "version",
            lambda name: found if name == "torch" else real_version(name),
        )
        return next(line for line in environment.check_environment() if line.name == "torch")

    warned = report_with("2.6.0")
    assert warned.status == "WARN" and warned.ok
    assert str(warned) == (
        "[WARN] torch       2.6.0: notebooks 00-07 and 09 run; 08 needs 2.9 or newer  ->  "
        "python -m pip install -U torch"
    )
    failed = report_with("2.2.2")
    assert failed.status == "FAIL" and not failed.ok
    assert str(failed).startswith("[FAIL] torch       2.2.2: 00-06 need 2.3 or newer")
    assert str(report_with("2.9.0")) == "[OK]   torch       2.9.0"


def test_a_notebook_stops_on_a_torch_below_its_minimum_with_the_fix():
    with pytest.raises(CourseSetupError) as stopped:
        stop_unless_supported("08_training_stacks", torch="2.6.0")
    assert str(stopped.value) == (
        "Notebook 08 needs torch 2.9 or newer, and this kernel has torch 2.6.0 (notebooks "
        "00-07 and 09 run on it). To upgrade, run `python -m pip install -U torch`, then restart "
        "the kernel."
    )
    assert stopped.value._render_traceback_() == [str(stopped.value)]
    with pytest.raises(CourseSetupError, match=r"has torch 2\.2\.2\. To upgrade"):
        stop_unless_supported("00_setup_check.ipynb", torch="2.2.2")
    with pytest.raises(CourseSetupError, match="needs torch, and this kernel has none"):
        stop_unless_supported("01_autograd_accumulates", torch=None)


def test_on_colab_the_fix_is_a_cell_and_a_restart(monkeypatch):
    import sys
    import types

    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    with pytest.raises(CourseSetupError) as stopped:
        stop_unless_supported("07_accumulation_at_scale", torch="2.3.0")
    assert str(stopped.value).endswith(
        "To upgrade, run `!pip install -U torch` in a cell, then Runtime > Restart session."
    )


def test_a_python_below_the_minimum_stops_every_notebook():
    with pytest.raises(CourseSetupError) as stopped:
        stop_unless_supported("03_gradient_accumulation", python="3.10.12", torch="2.13.0")
    assert str(stopped.value) == (
        "Notebook 03 cannot run on Python 3.10.12: the course needs Python 3.11 or newer -> "
        "make a new environment with Python 3.11 or newer and install the course there."
    )


@pytest.mark.parametrize("found", ["2.13.0+cpu", "2.9.0", "2.15.0"])
def test_a_supported_torch_passes_silently(found, capsys):
    for name in TORCH_MINIMUMS:
        assert stop_unless_supported(name, torch=found) is None
    assert capsys.readouterr() == ("", "")


def test_bad_input_says_what_to_change():
    with pytest.raises(ValueError, match="no notebook named '08_x': use one of 00_setup_check"):
        stop_unless_supported("08_x")
    with pytest.raises(TypeError, match="notebook must be a name such as"):
        stop_unless_supported(7)
    with pytest.raises(ValueError, match=r"write it as '2\.13\.0'"):
        torch_verdict("latest")
    with pytest.raises(TypeError, match="version must be a string"):
        torch_verdict(2.9)


def test_the_setup_cell_stops_in_a_real_kernel_with_only_the_message():
    """In Jupyter the stop shows the message alone, no traceback, and the cell fails, so that
    Run All stops there. The kernel's torch is made to report 2.6.0."""
    path = NOTEBOOKS / "08_training_stacks.ipynb"
    [index] = cells_tagged(read(path), SETUP_TAG)
    assert read(path).cells[index].source == setup_source(repository_url(), path.name)
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(NOTEBOOKS))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        reply, _ = run_cell(client, "import torch\ntorch.__version__ = '2.6.0'", 60)
        assert reply["status"] == "ok"
        reply, outputs = run_cell(client, read(path).cells[index].source, 60)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert reply["status"] == "error" and reply["ename"] == "CourseSetupError"
    expected = (
        "Notebook 08 needs torch 2.9 or newer, and this kernel has torch 2.6.0 (notebooks "
        "00-07 and 09 run on it). To upgrade, run `python -m pip install -U torch`, then restart "
        "the kernel."
    )
    assert reply["traceback"] == [expected]
    assert [o.output_type for o in outputs] == ["error"]


def test_the_loop_auditor_keeps_the_floor_and_refuses_an_older_torch_by_name():
    import subprocess
    import sys

    import loop_auditor

    assert loop_auditor.TORCH_MINIMUM == TORCH_FLOOR
    assert loop_auditor.torch_too_old("2.3.0+cu121") is None
    assert loop_auditor.torch_too_old("2.13.0+cpu") is None
    assert loop_auditor.torch_too_old("2.2.2") == (
        "the loop auditor needs torch 2.3 or newer, and this is torch 2.2.2: "
        "run `python -m pip install -U torch`"
    )
    script = "import torch; torch.__version__ = '2.1.0'; import loop_auditor"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "ImportError: the loop auditor needs torch 2.3 or newer, and this is torch 2.1.0: "
        "run `python -m pip install -U torch`"
    )
