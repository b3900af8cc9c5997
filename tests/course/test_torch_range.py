"""On a torch too old for a notebook, the notebook stops at its setup cell, before anything
else runs, with the message that names the torch it needs and the command.

``tools/torch_range.py`` runs this file in each environment of the range (the oldest torch
each notebook names, and the newest release); there, nbval runs the notebooks this torch runs,
and this file the ones it does not. In the course's own environment every notebook runs, so
the default test run leaves it out (marker ``torch_range``); ``tests/core/test_versions.py`` checks
the same stop there with a stand-in torch version."""

from __future__ import annotations

import pytest
from course import NOTEBOOKS, cells_tagged, notebook_paths, read
from run_notebooks import CellError, execute
from sync_notebooks import SETUP_TAG

from helpers.versions import TORCH_MINIMUMS, dotted, installed_torch_version, runs_on

pytestmark = pytest.mark.torch_range
PATHS = notebook_paths()


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_a_notebook_this_torch_cannot_run_stops_at_its_setup_cell(path):
    found = installed_torch_version()
    if path.stem[:2] in runs_on(found):
        pytest.skip(f"torch {found} runs it: nbval runs it in this environment")
    nb = read(path)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.execution_count, cell.outputs = None, []
    [setup] = cells_tagged(nb, SETUP_TAG)
    with pytest.raises(CellError) as stopped:
        execute(nb, cwd=NOTEBOOKS)
    message = str(stopped.value)
    assert message.startswith(f"cell {setup} ("), message
    needed = dotted(TORCH_MINIMUMS[path.stem])
    assert (
        f"CourseSetupError: Notebook {path.stem[:2]} needs torch {needed} or newer, and this "
        f"kernel has torch {found}" in message
    ), message
    assert "python -m pip install -U torch" in message
    later = [cell for cell in nb.cells[setup + 1 :] if cell.cell_type == "code"]
    assert all(cell.get("execution_count") is None for cell in later), "a later cell ran"
