"""tools/minutes.py: the main path's minutes come from the reading model, the stated minutes
(overview cells, README) are the computed ones, every notebook and the whole course fit their
limits, and a notebook the model cannot measure is refused with its name and cell."""

from __future__ import annotations

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


def test_exercises_count_by_kind_and_a_capstone_by_its_heading(tmp_path):
    nb = notebook(
        new_markdown_cell("## Exercise 99.1: predict"),
        exercise("predict"),
        new_markdown_cell("## Exercise 99.2: write"),
        exercise("write"),
        new_markdown_cell("## Exercise 99.3: the capstone"),
        exercise("write"),
    )
    result = measure(nb, tmp_path)
    assert [s.exercises for s in result.sections if s.exercises] == [3, 10, 30]
    assert result.exercises == 43


def test_an_exercise_costs_the_minutes_its_prompt_states_else_its_kinds(tmp_path):
    nb = notebook(
        new_markdown_cell("## 1. A section\n**Predict (1 min):** which?"),
        exercise("predict"),
        new_markdown_cell("## Exercise 99.1: fill in the table (7 min)"),
        exercise("trace"),
        new_markdown_cell("## Exercise 99.2: put the lines in order"),
        exercise("parsons"),
        new_markdown_cell("## Exercise 99.3: review these loops"),
        exercise("review"),
    )
    result = measure(nb, tmp_path)
    defaults = minutes.EXERCISE_MINUTES
    assert [s.exercises for s in result.sections if s.exercises] == [
        1,
        7,
        defaults["parsons"],
        defaults["review"],
    ]


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
        new_markdown_cell(long),
        exercise("write"),
    )
    result = measure(nb, tmp_path)
    assert result.teaching <= 1 and result.exercises == 0
    assert result.going_deeper == 21  # 10 minutes of prose, its heading, and an optional write
    assert result.stated.endswith("/ 21 going deeper")


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


def test_a_main_path_over_the_limit_is_refused_at_the_cell_that_passes_it(tmp_path):
    nb = notebook(*[exercise("write") for _ in range(7)])
    with pytest.raises(minutes.MinutesError, match=r"99_test.ipynb, cell 7: .*limit of 60"):
        measure(nb, tmp_path)
    assert measure(nb, tmp_path, limit=80).exercises == 70


def test_a_course_over_its_limit_is_refused(tmp_path, monkeypatch):
    nb = notebook(*[exercise("write") for _ in range(5)])
    paths = []
    for n in range(9):
        path = tmp_path / f"{n:02d}_test.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    with pytest.raises(minutes.MinutesError, match=r"takes 45\d minutes, more than 420"):
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
        "predict {predict}, trace {trace}, parsons {parsons}, write {write}, repair {repair}, "
        "review {review} minutes".format(**minutes.EXERCISE_MINUTES),
        '"(2 min)"',
        f"capstone {minutes.EXERCISE_MINUTES['capstone']}",
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
