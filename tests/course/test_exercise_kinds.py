"""The exercises make learners write and repair loops: every exercise says its kind, at
least half of the exercise minutes are for code written or repaired, every notebook keeps a
quick prediction, and the README's table counts them as the notebooks do."""

from __future__ import annotations

from collections import Counter

import minutes
import pytest
from course import ROOT, cells_tagged, notebook_paths, read, title

KINDS = minutes.KINDS
CODE_KINDS = ("write", "repair")
# Work on code: written or repaired, put in order, or reviewed for bugs (outcome O3), as
# against values predicted or traced.
WORK_ON_CODE = (*CODE_KINDS, "parsons", "review")
PATHS = notebook_paths()


def kinds_of(path) -> list[str]:
    nb = read(path)
    found = []
    for index in cells_tagged(nb, "exercise"):
        tags = [t[len("exercise-") :] for t in nb.cells[index].metadata.get("tags", [])]
        found += [t for t in tags if t in KINDS]
    return found


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_every_exercise_has_one_kind_and_each_notebook_a_prediction(path):
    nb = read(path)
    for index in cells_tagged(nb, "exercise"):
        tags = nb.cells[index].metadata.get("tags", [])
        assert len([t for t in tags if t.startswith("exercise-")]) == 1, tags
    assert len(kinds_of(path)) == len(cells_tagged(nb, "exercise"))
    assert "predict" in kinds_of(path)


def main_path_kinds(path) -> list[str]:
    nb = read(path)
    deeper = {i for section in minutes.going_deeper_sections(nb) for i in section}
    return [
        next(t.removeprefix("exercise-") for t in nb.cells[i].metadata["tags"] if t in TAGS)
        for i in cells_tagged(nb, "exercise")
        if i not in deeper
    ]


TAGS = tuple(f"exercise-{kind}" for kind in KINDS)


def exercise_minutes(path, main_path_only: bool) -> Counter:
    """Minutes by kind, as the reading model prices each exercise."""
    nb = read(path)
    deeper = {i for section in minutes.going_deeper_sections(nb) for i in section}
    spent = Counter()
    for index in cells_tagged(nb, "exercise"):
        if main_path_only and index in deeper:
            continue
        kind = next(
            t.removeprefix("exercise-") for t in nb.cells[index].metadata["tags"] if t in TAGS
        )
        spent[kind] += minutes.exercise_minutes(nb, index, path)
    return spent


def test_at_least_half_of_the_exercise_minutes_are_code_to_write_or_repair():
    """Over the whole course, optional exercises included, at least half of the exercise
    minutes go to code written or repaired; on the main path, where the predictions that come
    before each reveal stand, at least half go to work on code of any kind."""
    for main_path_only, kinds in ((False, CODE_KINDS), (True, WORK_ON_CODE)):
        spent = sum((exercise_minutes(path, main_path_only) for path in PATHS), Counter())
        code = sum(spent[kind] for kind in kinds)
        assert code >= sum(spent.values()) - code, (main_path_only, spent)


def summary(kinds: list[str]) -> str:
    counts = Counter(kinds)
    return ", ".join(f"{counts[k]} {k}" for k in KINDS if counts[k])


def test_the_readme_counts_the_exercises_of_each_kind():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for path in PATHS:
        row = next(line for line in readme.splitlines() if f"(notebooks/{path.name})" in line)
        assert row.rstrip().endswith(f"| {summary(kinds_of(path))} |"), (title(read(path)), row)
    total = Counter(kind for path in PATHS for kind in kinds_of(path))
    counted = [f"{total[kind]} {kind}" for kind in KINDS if total[kind]]
    sentence = f"{sum(total.values())} exercises: {', '.join(counted[:-1])} and {counted[-1]}"
    assert sentence in " ".join(readme.split()), sentence
