"""Optional "Going deeper" sections: declared in the overview's minutes, kept out of the
teaching minutes, and never needed by anything after them."""

from __future__ import annotations

import re

import pytest
from build_workshop import MINUTES
from course import NOTEBOOKS, notebook_paths, read
from run_notebooks import execute

PATHS = notebook_paths()
HEADING = re.compile(r"^(#{2,3}) (.*)")


def going_deeper_sections(nb) -> list[range]:
    """The cell ranges of each section whose heading says "Going deeper": from its heading
    to the next heading of the same or a higher level."""
    headings = []
    for index, cell in enumerate(nb.cells):
        match = HEADING.match(cell.source) if cell.cell_type == "markdown" else None
        if match:
            headings.append((index, len(match.group(1)), match.group(2)))
    sections = []
    for position, (index, level, text) in enumerate(headings):
        if "going deeper" in text.lower():
            end = next(
                (i for i, lvl, _ in headings[position + 1 :] if lvl <= level), len(nb.cells) - 2
            )
            sections.append(range(index, end))
    return sections


def declared_minutes(nb) -> int:
    [overview] = [c for c in nb.cells if "**Minutes:**" in c.source]
    return int(re.search(MINUTES, overview.source).group(3) or 0)


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_going_deeper_sections_are_declared_marked_optional_and_outside_the_exercises(path):
    nb = read(path)
    sections = going_deeper_sections(nb)
    assert bool(sections) == bool(declared_minutes(nb)), "declare their minutes, or none"
    for section in sections:
        heading = nb.cells[section.start].source.splitlines()[0]
        assert "(optional)" in heading, heading
        inside = [nb.cells[i] for i in section]
        assert not any("exercise" in c.metadata.get("tags", []) for c in inside)


WITH_SECTIONS = [p for p in PATHS if going_deeper_sections(read(p))]


def test_the_first_notebook_has_its_section():
    assert any(p.name.startswith("01_") for p in WITH_SECTIONS)


@pytest.mark.parametrize("path", WITH_SECTIONS, ids=[p.name for p in WITH_SECTIONS])
def test_the_notebook_runs_without_its_going_deeper_sections(path):
    nb = read(path)
    skipped = {i for section in going_deeper_sections(nb) for i in section}
    nb.cells = [cell for i, cell in enumerate(nb.cells) if i not in skipped]
    execute(nb, NOTEBOOKS)  # raises CellError if a later cell needs a skipped one
