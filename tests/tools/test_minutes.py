"""tools/minutes.py: the main path's minutes come from the reading model, the stated minutes
(overview cells, README) are the computed ones, every notebook and the whole course fit their
limits, and a notebook the model cannot measure is refused with its name and cell."""

from __future__ import annotations

import math

import minutes
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

OVERVIEW = "**Objectives**\n- one\n\n**Minutes:** 0 teaching / 0 exercises"


def notebook(*cells, overview=OVERVIEW):
    nb = new_notebook()
    nb.cells = [new_markdown_cell("# 99 · A test notebook")]
    if overview is not None:
        nb.cells.append(new_markdown_cell(overview, metadata={"tags": ["course-overview"]}))
    nb.cells += list(cells)
    nb.cells += [new_markdown_cell("## Key points\n- one"), new_markdown_cell("next")]
    return nb


def exercise(kind: str, source: str = "answer = ...") -> nbformat.NotebookNode:
    return new_code_cell(source, metadata={"tags": ["exercise", f"exercise-{kind}"]})


def measure(nb, tmp_path, **kwargs):
    path = tmp_path / "99_test.ipynb"
    nbformat.write(nb, path)
    return minutes.measure(path, **kwargs)


def test_prose_code_and_output_are_read_at_the_models_speeds(tmp_path):
    words = " ".join(["word"] * 240)  # 2 minutes at 120 words a minute
    code = new_code_cell("a = 1\n\nb = 2\n" * 6)  # 12 non-blank lines: 2 minutes
    code.outputs = [new_output("stream", name="stdout", text="x\n" * 60)]  # 60 lines: 2 minutes
    nb = notebook(new_markdown_cell("## 1. A section"), new_markdown_cell(words), code)
    result = measure(nb, tmp_path)
    [section] = [s for s in result.sections if s.heading == "1. A section"]
    assert section.teaching == pytest.approx(2 + 2 + 2 + 3 / 120)  # and "1. A section"


def test_terms_tables_and_dense_code_are_read_more_slowly(tmp_path):
    terms = "`zero_grad` and $w$ and [a term](../workshop/glossary.md#term)"
    table = "| a | b |\n|---|---|\n| one | two |"
    dense = "x = f(a, b, c, d, e, f, g, h, i, j, k, l, m)"  # 30 tokens
    printed = new_code_cell("print()")
    printed.outputs = [new_output("stream", name="stdout", text="a   1   2\nplain\n")]
    nb = notebook(
        new_markdown_cell("## 1. A"),
        new_markdown_cell(terms),
        new_markdown_cell(table),
        new_code_cell(dense),
        printed,
    )
    result = measure(nb, tmp_path)
    [section] = [s for s in result.sections if s.heading == "1. A"]
    words = minutes.prose_words(terms) + 3 * (minutes.TERM_WORDS - 1)  # three terms
    expected = (
        (2 + words) / minutes.WORDS_PER_MINUTE  # "1. A" and the terms
        + minutes.prose_words(table) / minutes.TABLE_WORDS_PER_MINUTE
        + 30 / minutes.DENSE_LINE_TOKENS / minutes.CODE_LINES_PER_MINUTE
        + 1 / minutes.CODE_LINES_PER_MINUTE
        + 1 / minutes.TABLE_OUTPUT_LINES_PER_MINUTE
        + 1 / minutes.OUTPUT_LINES_PER_MINUTE
    )
    assert section.teaching == pytest.approx(expected)
    assert minutes.code_lines(dense) == pytest.approx(30 / minutes.DENSE_LINE_TOKENS)
    assert minutes.code_lines("x = 1") == 1


def test_an_exercise_costs_its_stated_minutes_and_the_retry_allowance(tmp_path):
    nb = notebook(
        new_markdown_cell("## 1. A section\n**Predict (1 min):** which?"),
        exercise("predict"),
        new_markdown_cell("## Exercise 99.1: fill in the table (7 min)"),
        exercise("trace"),
        new_markdown_cell("## Exercise 99.2: the capstone (30 min)"),
        exercise("write"),
    )
    result = measure(nb, tmp_path)
    allowance = 1 + minutes.WRONG_FIRST_TIME * minutes.RETRY_SHARE
    assert minutes.RETRY_ALLOWANCE == pytest.approx(allowance - 1)
    assert [s.exercises for s in result.sections if s.exercises] == pytest.approx(
        [1 * allowance, 7 * allowance, 30 * allowance]
    )
    assert result.exercises == math.ceil(38 * allowance)


def test_an_exercise_that_states_no_minutes_is_refused(tmp_path):
    nb = notebook(new_markdown_cell("## Exercise 99.1: write it"), exercise("write"))
    with pytest.raises(minutes.MinutesError, match=r"cell 2: .* states its minutes once"):
        measure(nb, tmp_path)


def test_a_prompt_that_states_two_minutes_is_refused(tmp_path):
    nb = notebook(new_markdown_cell("## 1. Predict (1 min), then (2 min)"), exercise("predict"))
    with pytest.raises(minutes.MinutesError, match=r"cell 2: .* states its minutes once"):
        measure(nb, tmp_path)


def test_the_setup_cell_solutions_and_going_deeper_are_off_the_main_path(tmp_path):
    long = " ".join(["word"] * 1200)  # 10 minutes
    nb = notebook(
        new_code_cell("x = 1\n" * 60, metadata={"tags": ["course-setup"]}),
        new_markdown_cell("## 1. Main"),
        new_markdown_cell("short text"),
        new_markdown_cell(long, metadata={"tags": ["solution"]}),
        new_markdown_cell("## 2. Going deeper (optional): more"),
        new_markdown_cell(long + " (10 min)"),
        exercise("write"),
    )
    result = measure(nb, tmp_path)
    assert result.teaching <= 1 and result.exercises == 0
    # 10 minutes of prose and "(10 min)", the heading's 5 words, and an optional write
    deeper = (1202 + 5) / minutes.WORDS_PER_MINUTE + 10 * (1 + minutes.RETRY_ALLOWANCE)
    assert result.going_deeper == math.ceil(deeper)
    assert result.stated.endswith(f"/ {math.ceil(deeper)} going deeper")


def test_a_notebook_without_an_overview_cell_is_refused(tmp_path):
    with pytest.raises(minutes.MinutesError, match=r"99_test.ipynb: a notebook needs one overview"):
        measure(notebook(overview=None), tmp_path)


def test_an_overview_without_a_minutes_line_is_refused(tmp_path):
    with pytest.raises(minutes.MinutesError, match=r"99_test.ipynb, cell 1: .*Minutes"):
        measure(notebook(overview="**Objectives**\n- one"), tmp_path)


def test_an_exercise_without_a_kind_is_refused_by_cell(tmp_path):
    nb = notebook(
        new_markdown_cell("## Exercise"), new_code_cell("x", metadata={"tags": ["exercise"]})
    )
    with pytest.raises(minutes.MinutesError, match=r"99_test.ipynb, cell 3: .*exactly one kind"):
        measure(nb, tmp_path)


def stated_exercises(n: int, minutes_each: int = 10) -> list:
    cells = []
    for _ in range(n):
        cells += [new_markdown_cell(f"## Exercise ({minutes_each} min)"), exercise("write")]
    return cells


def test_a_main_path_over_the_limit_is_refused_at_the_cell_that_passes_it(tmp_path):
    nb = notebook(*stated_exercises(7))
    cost = 10 * (1 + minutes.RETRY_ALLOWANCE)  # each, and its prompt's 3 words
    passing = next(n for n in range(1, 8) if n * (cost + 3 / minutes.WORDS_PER_MINUTE) > 60)
    cell = 1 + 2 * passing  # the title, the overview, then a prompt and an exercise each
    with pytest.raises(minutes.MinutesError, match=rf"99_test.ipynb, cell {cell}: .*limit of 60"):
        measure(nb, tmp_path)
    assert measure(nb, tmp_path, limit=100).exercises == math.ceil(7 * cost)


def test_a_course_over_its_limit_is_refused(tmp_path, monkeypatch):
    nb = notebook(*stated_exercises(4))
    paths = []
    for n in range(9):
        path = tmp_path / f"{n:02d}_test.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    with pytest.raises(minutes.MinutesError, match=r"takes \d+ minutes, more than 420"):
        minutes.measure_course(paths)


def test_every_notebook_and_the_course_fit_and_state_the_computed_minutes():
    notebooks = minutes.measure_course()  # raises if a notebook or the course is over
    assert minutes.drift(notebooks) == [], "run: python tools/minutes.py --write"


def test_the_readme_states_the_reading_model():
    readme = " ".join(minutes.README.read_text(encoding="utf-8").split())  # lines rewrapped
    for phrase in (
        f"{minutes.WORDS_PER_MINUTE} words a minute",
        f"{minutes.CODE_LINES_PER_MINUTE} non-blank lines a minute",
        f"{minutes.OUTPUT_LINES_PER_MINUTE} lines a minute",
        f"read as {minutes.TERM_WORDS} words",
        f"more than {minutes.DENSE_LINE_TOKENS} tokens",
        f"one answer in {round(1 / minutes.WRONG_FIRST_TIME)} is wrong the first time",
        f"{minutes.RETRY_SHARE:g} of the stated minutes",
        '"(2 min)"',
        f"at most {minutes.NOTEBOOK_LIMIT} minutes",
    ):
        assert phrase in readme, phrase


def test_writing_the_minutes_line_does_not_change_the_minutes(tmp_path):
    nb = notebook(new_markdown_cell("## 1. A section"), new_markdown_cell("word " * 119))
    before = measure(nb, tmp_path)
    nb.cells[1].source = nb.cells[1].source.replace(
        "**Minutes:** 0 teaching / 0 exercises",
        "**Minutes:** 12 teaching / 30 exercises / 45 going deeper",
    )
    after = measure(nb, tmp_path)
    assert (after.teaching, after.stated) == (before.teaching, before.stated)
