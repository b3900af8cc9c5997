"""tools/nbval_solutions.py: nbval's run of a notebook also runs each exercise's folded
solution in the same kernel, and fails the exercise's cell when the solution raises or is not
accepted; a right solution passes, and the cells after it run with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from course import ROOT
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from nbval_solutions import correct_verdicts, solution_after, solution_code

RESULT = """\
class Result:  # stands in for a checker's result: it shows as its text
    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text"""


def exercise(number: int, solution: str) -> list:
    """An exercise cell whose committed output says it is not answered, and its solution."""
    cell = new_code_cell(f"answer{number} = None\nResult('✏️ Not answered yet')")
    cell.metadata["tags"] = ["exercise"]
    cell.execution_count = number + 1
    cell.outputs = [
        new_output(
            "execute_result", data={"text/plain": "✏️ Not answered yet"}, execution_count=number + 1
        )
    ]
    folded = new_markdown_cell(
        f"<details><summary>Solution</summary>\n\n```python\n{solution}\n```\n</details>"
    )
    folded.metadata["tags"] = ["solution"]
    return [cell, folded]


def notebook(tmp_path: Path) -> Path:
    first = new_code_cell(RESULT)
    first.execution_count = 1
    # runs with the right solution's answer, strict checks off again
    after = new_code_cell("import os\nprint(answer0, os.environ.get('GM_STRICT_CHECKS'))")
    after.execution_count = 9
    after.outputs = [new_output("stream", name="stdout", text="42 None\n")]
    cells = [first]
    strict = "os.environ.get('GM_STRICT_CHECKS') == '1'"
    cells += exercise(0, f"import os\nanswer0 = 42\nResult('✅ Correct' if {strict} else '❌ lax')")
    cells += [after]
    cells += exercise(1, "Result('❌ 41 is not it')")
    cells += exercise(2, "1 / 0")
    cells += exercise(3, "Result('✅ 正确。17 是对的。')")  # a Chinese notebook's verdict
    path = tmp_path / "exercises.ipynb"
    nbformat.write(new_notebook(cells=cells), path)
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> str:
    path = notebook(tmp_path_factory.mktemp("nb"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tools")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "nbval_solutions", "-p", "no:cacheprovider",
         "--nbval", "--nbval-current-env", "-rA", "-q", "-c", os.devnull, str(path)],
        cwd=path.parent, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    return done.stdout + done.stderr


def test_a_right_solution_passes_and_the_cells_after_it_run_with_it(report):
    assert "PASSED exercises.ipynb::Cell 1" in report, report  # exercise 0
    assert "PASSED exercises.ipynb::Cell 2" in report, report  # print(answer0) -> 42


def test_a_solution_the_checker_refuses_fails_its_exercise_cell(report):
    assert "FAILED exercises.ipynb::Cell 3" in report, report
    assert "the exercise's solution is not accepted: '❌ 41 is not it'" in report


def test_a_solution_that_raises_fails_its_exercise_cell(report):
    assert "FAILED exercises.ipynb::Cell 4" in report, report
    assert "the exercise's solution raised ZeroDivisionError: division by zero" in report


def test_strict_checks_are_on_only_while_a_solution_runs(report):
    assert "❌ lax" not in report  # exercise 0's solution saw GM_STRICT_CHECKS=1
    assert "2 failed, 4 passed" in report, report  # and the cell after it did not


def test_a_chinese_notebooks_correct_verdict_is_accepted(report):
    assert "PASSED exercises.ipynb::Cell 5" in report, report
    assert correct_verdicts() == ("✅ Correct", "✅ 正确")


def test_solution_code_is_the_one_python_block():
    assert solution_code("x\n```python\na = 1\n```\n") == "a = 1\n"
    with pytest.raises(ValueError, match="exactly one python block, this one 2"):
        solution_code("```python\na\n```\n```python\nb\n```")


def test_an_exercise_without_its_solution_cell_is_refused():
    class Item:
        pass

    item, parent = Item(), Item()
    cells = [new_code_cell("x")]
    cells[0].metadata["tags"] = ["exercise"]
    parent.nb, item.parent, item.cell = new_notebook(cells=cells), parent, cells[0]
    with pytest.raises(ValueError, match="not followed by its solution cell"):
        solution_after(item)
    cells[0].metadata["tags"] = []
    assert solution_after(item) is None
