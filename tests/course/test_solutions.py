"""Each notebook, run with every exercise answered by its revealed solution, passes every
check (strict mode makes a failing check raise)."""

from __future__ import annotations

import re

import pytest
from course import NOTEBOOKS, cells_tagged, notebook_paths, read
from run_notebooks import execute

from helpers.versions import why_it_cannot_run

PATHS = notebook_paths()


def solution_code(markdown: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)
    assert len(blocks) == 1, "a solution holds exactly one python block"
    return blocks[0]


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_notebook_passes_every_check_with_its_solutions(path, strict_checks):
    if reason := why_it_cannot_run(path.name):
        pytest.skip(reason)  # it stops at its setup cell there (tests/course/test_torch_range.py)
    nb = read(path)
    exercises = cells_tagged(nb, "exercise")
    for index in exercises:
        nb.cells[index].source = solution_code(nb.cells[index + 1].source)
    execute(nb, NOTEBOOKS)  # raises CellExecutionError if a check fails
    for index in exercises:
        [result] = [o for o in nb.cells[index].outputs if o.output_type == "execute_result"]
        assert result["data"]["text/plain"].startswith("✅ Correct"), result["data"]["text/plain"]
