"""The machine, visible: every main path from 01 to 08 shows at least one figure drawn by a
run of the notebook itself, at least ten in all, and every figure on a main path carries its
description, as its text and as its image's alt text (helpers.figures.DescribedFigure)."""

from __future__ import annotations

import minutes
from course import notebook_paths, read

PATHS = notebook_paths()
PER_NOTEBOOK, IN_ALL = 1, 10  # the course's floor for figures on the main paths


def main_path_figures(nb) -> list[tuple[int, dict, dict]]:
    """(cell index, data, metadata) of each figure a main-path cell shows."""
    deeper = {i for section in minutes.going_deeper_sections(nb) for i in section}
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or index in deeper:
            continue
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                found.append((index, output["data"], output.get("metadata", {})))
    return found


def test_every_main_path_shows_the_machine():
    counts = {p.name[:2]: len(main_path_figures(read(p))) for p in PATHS}
    taught = {number: count for number, count in counts.items() if "01" <= number <= "08"}
    assert min(taught.values()) >= PER_NOTEBOOK, taught
    assert sum(counts.values()) >= IN_ALL, counts


def test_every_main_path_figure_is_described():
    for path in PATHS:
        for index, data, metadata in main_path_figures(read(path)):
            text = "".join(data.get("text/plain", ""))
            assert text.startswith("Figure: "), (path.name, index, text[:60])
            assert metadata.get("image/png", {}).get("alt") == text, (path.name, index)
