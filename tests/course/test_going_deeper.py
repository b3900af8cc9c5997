"""Optional "Going deeper" sections: declared in the overview's minutes, kept out of the
main path's minutes, and never needed by anything after them. They may hold optional
exercises, which count in their minutes."""

from __future__ import annotations

import minutes
import pytest
from course import NOTEBOOKS, notebook_paths, read
from run_notebooks import execute

PATHS = notebook_paths()
going_deeper_sections = minutes.going_deeper_sections


def declared_minutes(nb) -> int:
    [overview] = [c for c in nb.cells if "**Minutes:**" in c.source]
    return int(minutes.MINUTES_LINE.search(overview.source).group(3) or 0)


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_going_deeper_sections_are_declared_and_marked_optional(path):
    nb = read(path)
    sections = going_deeper_sections(nb)
    assert bool(sections) == bool(declared_minutes(nb)), "declare their minutes, or none"
    for section in sections:
        heading = nb.cells[section.start].source.splitlines()[0]
        assert "(optional)" in heading, heading


WITH_SECTIONS = [p for p in PATHS if going_deeper_sections(read(p))]


def test_the_first_notebook_has_its_section():
    assert any(p.name.startswith("01_") for p in WITH_SECTIONS)


@pytest.mark.parametrize("path", WITH_SECTIONS, ids=[p.name for p in WITH_SECTIONS])
def test_the_notebook_runs_without_its_going_deeper_sections(path):
    nb = read(path)
    skipped = {i for section in going_deeper_sections(nb) for i in section}
    nb.cells = [cell for i, cell in enumerate(nb.cells) if i not in skipped]
    execute(nb, NOTEBOOKS)  # raises CellError if a later cell needs a skipped one
