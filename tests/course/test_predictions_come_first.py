"""Predict before the reveal: a prediction whose answer a later cell shows stands before that
cell. Each such checker (helpers/predictions.py) names the text that reveals its answer; the
text must be printed after the prompt and by no output before it, and the prompt must show
every option its checker knows."""

from __future__ import annotations

import importlib
import re

import minutes
import pytest
from course import cells_tagged, notebook_paths, read
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

PATHS = notebook_paths()
CALL = re.compile(r"^(check_\w+)\(", re.MULTILINE)
IMPORT = re.compile(r"^from ([\w.]+) import (check_\w+)$", re.MULTILINE)


def printed(cell) -> str:
    if cell.cell_type != "code":
        return ""
    texts = []
    for output in cell.get("outputs", []):
        texts.append(str(output.get("text", "")))
        texts.append(str(output.get("data", {}).get("text/plain", "")))
    return "".join(texts)


def prompt_checkers(nb):
    """(cell index, checker) for each predict exercise whose checker names a reveal."""
    found = []
    for index in cells_tagged(nb, "exercise-predict"):
        source = nb.cells[index].source
        imports = dict((name, module) for module, name in IMPORT.findall(source))
        for name in CALL.findall(source):
            check = getattr(importlib.import_module(imports[name]), name)
            if getattr(check, "reveal", None):
                found.append((index, check))
    return found


def reveal_problems(nb) -> list[str]:
    problems = []
    for index, check in prompt_checkers(nb):
        before = [i for i in range(index) if check.reveal in printed(nb.cells[i])]
        after = [i for i in range(index + 1, len(nb.cells)) if check.reveal in printed(nb.cells[i])]
        if before:
            problems.append(f"cell {index}: cell {before[0]} prints its answer before it")
        if not after:
            problems.append(f"cell {index}: no later cell prints {check.reveal!r}")
        prompt = nb.cells[index - 1].source
        options = getattr(check, "options", {})  # a number to predict has none
        missing = [letter for letter in options if f"({letter})" not in prompt]
        if missing:
            problems.append(f"cell {index}: its prompt does not show option(s) {missing}")
    return problems


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_no_prediction_is_answered_before_it_is_asked(path):
    assert reveal_problems(read(path)) == []


def test_the_course_predicts_before_it_reveals():
    counted = sum(len(prompt_checkers(read(path))) for path in PATHS)
    assert counted >= 3, "the predictions with a reveal are found"


# The course's floor for predictions on the main paths: every notebook from 01 to 08 asks at
# least two, the gallery of bugs (05) at least four, and the course at least thirty.
PER_NOTEBOOK, IN_THE_GALLERY, IN_ALL = 2, 4, 30


def main_path_predictions(path) -> int:
    nb = read(path)
    deeper = {i for section in minutes.going_deeper_sections(nb) for i in section}
    return sum(1 for i in cells_tagged(nb, "exercise-predict") if i not in deeper)


def test_every_main_path_asks_for_predictions():
    counts = {path.name[:2]: main_path_predictions(path) for path in PATHS}
    taught = {number: count for number, count in counts.items() if "01" <= number <= "08"}
    assert min(taught.values()) >= PER_NOTEBOOK, taught
    assert counts["05"] >= IN_THE_GALLERY, counts
    assert sum(counts.values()) >= IN_ALL, counts


def test_a_reveal_printed_before_its_prompt_is_found():
    reveal = "== (2.0, 4.0)"  # what check_second_backward's reveal cell prints
    prompt = new_markdown_cell("(a) 2.0 (b) 4.0")
    exercise = new_code_cell(
        "from helpers.autograd_accumulates.checkers_01 import check_second_backward\n\n"
        "answer = ...\ncheck_second_backward(answer)",
        metadata={"tags": ["exercise", "exercise-predict"]},
    )
    shown = new_code_cell("check(...)", outputs=[new_output("stream", name="stdout", text=reveal)])
    nb = new_notebook(cells=[shown, prompt, exercise])
    problems = reveal_problems(nb)
    assert any("cell 0 prints its answer before it" in p for p in problems), problems
    assert any("no later cell prints" in p for p in problems), problems
    assert any("does not show option(s) ['c']" in p for p in problems), problems
    nb = new_notebook(cells=[new_markdown_cell("(a) (b) (c)"), exercise, shown])
    assert reveal_problems(nb) == []
