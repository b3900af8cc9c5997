"""Colab, simulated: each notebook runs in a kernel that cannot import the course's helpers,
with a stand-in ``google.colab`` module, the repository served from this local clone instead
of GitHub (``COURSE_REPO``), and Colab's widget library, ipywidgets 7. The setup cell must
clone the course, install nothing (everything is there), never touch torch, and the notebook
must then run to the end. The widget tests also run under ipywidgets 7.

ipywidgets 7 comes from build/ipywidgets7 (or $GM_IPYWIDGETS7), which .ci/run fills with
``pip install --no-deps --target build/ipywidgets7 "ipywidgets>=7.7,<8" ipython_genutils``;
without it these tests are skipped, unless $GM_CI is set. They run every notebook again, so the
default test run leaves them out (marker ``colab``); run them with ``python -m pytest -m colab``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from course import ROOT, cells_tagged, notebook_paths, read, repository_url
from run_notebooks import execute

IPYWIDGETS7 = Path(os.environ.get("GM_IPYWIDGETS7", ROOT / "build" / "ipywidgets7"))
if not (IPYWIDGETS7 / "ipywidgets").is_dir():
    reason = f"needs ipywidgets 7 in {IPYWIDGETS7} (see this file's docstring)"
    if os.environ.get("GM_CI"):
        raise RuntimeError(f"GM_CI is set, but the Colab simulation {reason}")
    pytest.skip(reason, allow_module_level=True)
if not (ROOT / ".git").exists():
    pytest.skip("the Colab simulation clones this repository", allow_module_level=True)

PATHS = notebook_paths()
# The loop auditor's package where the course is not installed (the setup cell adds it)
AUDITOR_SRC = ROOT / "loop_auditor" / "src"
pytestmark = pytest.mark.colab  # a step of its own: python -m pytest -m colab

# Before the setup cell: make the kernel look like Colab's, and record what the cell runs.
COLAB_KERNEL = textwrap.dedent(
    f"""
    import importlib.util, subprocess, sys, types
    sys.path = [p for p in sys.path if p not in ("", {str(ROOT)!r}, {str(AUDITOR_SRC)!r})]
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    assert importlib.util.find_spec("helpers") is None, "helpers must not be importable yet"
    assert importlib.util.find_spec("loop_auditor") is None, "nor the loop auditor"
    sys.modules["google.colab"] = types.ModuleType("google.colab")
    _commands, _real_run = [], subprocess.run
    def _recording_run(cmd, *args, **kwargs):
        _commands.append([str(part) for part in cmd])
        return _real_run(cmd, *args, **kwargs)
    subprocess.run = _recording_run
    """
)
# After it: put subprocess.run back and report.
REPORT = textwrap.dedent(
    """
    import json, helpers, ipywidgets, loop_auditor
    subprocess.run = _real_run
    print(json.dumps({"commands": _commands, "helpers": helpers.__file__,
                      "loop_auditor": loop_auditor.__file__,
                      "ipywidgets": ipywidgets.__version__}))
    """
)


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_notebook_runs_as_on_colab_with_ipywidgets_7(path, tmp_path):
    nb = read(path)
    [setup] = cells_tagged(nb, "course-setup")
    nb.cells[setup + 1 : setup + 1] = [nbformat.v4.new_code_cell(REPORT)]
    nb.cells[setup:setup] = [nbformat.v4.new_code_cell(COLAB_KERNEL)]
    env = dict(os.environ, COURSE_REPO=str(ROOT), GM_DEVICE="cpu", PYTHONPATH=str(IPYWIDGETS7))
    env.pop("GM_STRICT_CHECKS", None)
    execute(nb, tmp_path, env=env)  # raises if a cell that should not fails

    [report] = [json.loads(o["text"]) for o in nb.cells[setup + 2].outputs if o.get("text")]
    clone = tmp_path / repository_url().rsplit("/", 1)[-1]
    assert report["commands"] == [["git", "clone", "-q", "--depth=1", str(ROOT), str(clone)]]
    assert report["helpers"] == str(clone / "helpers" / "__init__.py")
    auditor = clone / AUDITOR_SRC.relative_to(ROOT) / "loop_auditor" / "__init__.py"
    assert report["loop_auditor"] == str(auditor)
    assert report["ipywidgets"].startswith("7.")


def test_the_widget_explorers_work_with_ipywidgets_7():
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(ROOT / "tests" / "core" / "test_widgets_and_plots.py")],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(IPYWIDGETS7)),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    version = subprocess.run(
        [sys.executable, "-c", "import ipywidgets; print(ipywidgets.__version__)"],
        env=dict(os.environ, PYTHONPATH=str(IPYWIDGETS7)), capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert version.startswith("7.")
