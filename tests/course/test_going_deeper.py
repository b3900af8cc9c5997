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


def main_path_code_after_a_section(nb) -> list[int]:
    """The main path's code cells that come after a Going deeper section's first cell."""
    skipped = {i for section in going_deeper_sections(nb) for i in section}
    first = min(skipped, default=len(nb.cells))
    return [
        i
        for i in range(first, len(nb.cells))
        if i not in skipped and nb.cells[i].cell_type == "code"
    ]


# A notebook whose main path has no code after its first Going deeper section runs its main
# path as the first part of nbval's run, in the same order, before any optional cell: that
# run already shows the main path needs nothing from them. The others run here without them.
INTERLEAVED = [p for p in WITH_SECTIONS if main_path_code_after_a_section(read(p))]


def test_the_sections_are_read_as_they_lie():
    """Which notebooks have main-path code after a section (the sections of 01, 02, 03, 04, 05
    and 07 sit between the sections of their main path), so that the test below runs those
    and no other."""
    assert [p.name[:2] for p in INTERLEAVED] == ["01", "02", "03", "04", "05", "07"]
    nb = read(INTERLEAVED[0])
    [last] = going_deeper_sections(nb)[-1:]
    assert main_path_code_after_a_section(nb)[0] > going_deeper_sections(nb)[0].start
    assert all(i not in range(last.start, last.stop) for i in main_path_code_after_a_section(nb))


@pytest.mark.parametrize("path", INTERLEAVED, ids=[p.name for p in INTERLEAVED])
def test_the_notebook_runs_without_its_going_deeper_sections(path):
    nb = read(path)
    skipped = {i for section in going_deeper_sections(nb) for i in section}
    nb.cells = [cell for i, cell in enumerate(nb.cells) if i not in skipped]
    execute(nb, NOTEBOOKS)  # raises CellError if a later cell needs a skipped one
