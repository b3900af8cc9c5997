"""A pytest plugin: nbval's run of a notebook also checks its exercises' solutions.

nbval executes every code cell in one kernel and compares each output with the committed one;
an exercise cell's committed output says it is not answered yet. Right after nbval has run
and compared an exercise cell (tag ``exercise``), this plugin runs, in the same kernel, the
code of the folded solution that follows it (tag ``solution``: one python block), with
``GM_STRICT_CHECKS=1`` so that a failing check raises, and requires its result to start with
"✅ Correct" (or its translation in the Chinese notebooks, whose setup cell sets GM_LANG:
:func:`correct_verdicts`). The cells after it then run with the solution's definitions, as a
learner who answered would run them, and nbval still compares their outputs with the committed ones.

One execution of each notebook thus checks its outputs and its solutions (it used to take two:
nbval, then the notebook again with every exercise replaced by its solution). Enabled in
pyproject.toml's addopts (``-p nbval_solutions``); off with ``-p no:nbval_solutions``.
"""

from __future__ import annotations

import re
from queue import Empty

import pytest

CORRECT = "✅ Correct"


def correct_verdicts() -> tuple[str, ...]:
    """ "✅ Correct" in every language of the checkers' messages (helpers/translation.py)."""
    import gettext

    from helpers.translation import _ as course
    from loop_auditor.language import ENGLISH, LANGUAGES

    return (
        CORRECT,
        *(
            gettext.translation(course.domain, course.folder, languages=[lang]).gettext(CORRECT)
            for lang in LANGUAGES
            if lang != ENGLISH
        ),
    )


STRICT_ON = 'import os as _gm_os; _gm_os.environ["GM_STRICT_CHECKS"] = "1"'
STRICT_OFF = '_gm_os.environ.pop("GM_STRICT_CHECKS", None); del _gm_os'


def solution_code(markdown: str) -> str:
    """The one python block of a folded solution cell."""
    blocks = re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)
    if len(blocks) != 1:
        raise ValueError(f"a solution holds exactly one python block, this one {len(blocks)}")
    return blocks[0]


def solution_after(item) -> str | None:
    """The solution's code when ``item`` is nbval's item for an exercise cell, else None."""
    cell = getattr(item, "cell", None)
    notebook = getattr(getattr(item, "parent", None), "nb", None)
    if cell is None or notebook is None or "exercise" not in cell.metadata.get("tags", []):
        return None
    index = next(i for i, c in enumerate(notebook.cells) if c is cell)
    following = notebook.cells[index + 1] if index + 1 < len(notebook.cells) else None
    if following is None or "solution" not in following.metadata.get("tags", []):
        raise ValueError(f"exercise cell {index} is not followed by its solution cell")
    return solution_code(following.source)


def run_in_kernel(item, code: str, timeout: float = 300) -> tuple[str, str | None]:
    """Run ``code`` in the notebook's kernel: (its result's text/plain, its error or None)."""
    kernel = item.parent.kernel
    msg_id = kernel.execute_cell_input(code, allow_stdin=False)
    kernel.await_reply(msg_id, timeout=timeout)
    result, error = "", None
    while True:
        try:
            msg = item.parent.get_kernel_message(timeout=timeout)
        except Empty:
            return result, f"no reply from the kernel in {timeout} s"
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "status" and content["execution_state"] == "idle":
            return result, error
        if kind == "execute_result":
            result = content["data"].get("text/plain", "")
        elif kind == "error":
            error = f"{content['ename']}: {content['evalue']}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield  # nbval ran the cell and compared its output (raises if that failed)
    code = solution_after(item)
    if code is None:
        return result
    run_in_kernel(item, STRICT_ON)
    try:
        shown, error = run_in_kernel(item, code)
    finally:
        run_in_kernel(item, STRICT_OFF)
    if error is not None:
        pytest.fail(f"the exercise's solution raised {error}", pytrace=False)
    if not shown.startswith(correct_verdicts()):
        pytest.fail(f"the exercise's solution is not accepted: {shown!r}", pytrace=False)
    return result
