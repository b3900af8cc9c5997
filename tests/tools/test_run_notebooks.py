"""The course's notebook runner gives each cell its own result, and reports a dead kernel, a
cell past its time limit and a kernel that does not start as errors that name the cell.

Fakes with scripted message queues test the matching of replies to requests; real python3
kernels test what only a real kernel shows (a slow start, a death, a timeout, a traceback)."""

from __future__ import annotations

import os
import time
from queue import Empty

import nbformat
import pytest
from run_notebooks import (
    RAISES_TAG,
    CellTimeout,
    KernelDied,
    KernelNotReady,
    execute,
    learner_error_output,
    run_cell,
)

OWN_ID = "execute-own"
STALE_ID = "request-before"


def message(parent_id: str, msg_type: str, **content) -> dict:
    """A kernel message of type ``msg_type`` answering the request ``parent_id``."""
    return {
        "header": {"msg_type": msg_type, "msg_id": f"{parent_id}-{msg_type}"},
        "parent_header": {"msg_id": parent_id},
        "msg_type": msg_type,
        "content": content,
    }


def stream(parent_id: str, text: str) -> dict:
    return message(parent_id, "stream", name="stdout", text=text)


def status(parent_id: str, state: str) -> dict:
    return message(parent_id, "status", execution_state=state)


class ScriptedClient:
    """A kernel client whose shell and iopub queues hold scripted messages; ``execute``
    returns ``OWN_ID``. An empty queue waits out its timeout, then raises ``Empty``."""

    def __init__(self, shell: list[dict], iopub: list[dict], alive: bool = True):
        self.shell, self.iopub, self.alive = list(shell), list(iopub), alive
        self.sources: list[str] = []

    def execute(self, source: str, **kwargs) -> str:
        self.sources.append(source)
        return OWN_ID

    def _pop(self, queue: list, timeout: float | None) -> dict:
        if queue:
            return queue.pop(0)
        time.sleep(timeout or 0)
        raise Empty

    def get_shell_msg(self, timeout: float | None = None) -> dict:
        return self._pop(self.shell, timeout)

    def get_iopub_msg(self, timeout: float | None = None) -> dict:
        return self._pop(self.iopub, timeout)

    def is_alive(self) -> bool:
        return self.alive


def notebook(*sources: str, raising: tuple[int, ...] = ()) -> nbformat.NotebookNode:
    """A notebook of code cells; those at the indices ``raising`` are tagged to raise."""
    cells = [nbformat.v4.new_code_cell(source) for source in sources]
    for index in raising:
        cells[index].metadata["tags"] = [RAISES_TAG]
    return nbformat.v4.new_notebook(cells=cells)


def slow_start_env(tmp_path, seconds: float) -> dict[str, str]:
    """An environment in which a python3 kernel sleeps ``seconds`` before it starts (a
    ``sitecustomize`` on ``PYTHONPATH`` runs before ipykernel binds its sockets)."""
    delay = tmp_path / "slow_start"
    delay.mkdir()
    (delay / "sitecustomize.py").write_text(f"import time\ntime.sleep({seconds})\n")
    paths = [str(delay), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))


def test_a_stale_error_reply_is_not_taken_for_the_cells_own():
    stale_reply = message(STALE_ID, "execute_reply", status="error", ename="ZeroDivisionError")
    own_reply = message(OWN_ID, "execute_reply", status="ok", execution_count=7)
    iopub = [status(OWN_ID, "busy"), stream(OWN_ID, "hello\n"), status(OWN_ID, "idle")]
    client = ScriptedClient(shell=[stale_reply, own_reply], iopub=iopub)

    content, outputs = run_cell(client, "print('hello')")

    assert content == {"status": "ok", "execution_count": 7}
    assert [(o.output_type, o.text) for o in outputs] == [("stream", "hello\n")]
    assert client.shell == []


def test_iopub_messages_of_other_requests_are_ignored():
    stale_error = message(STALE_ID, "error", ename="ValueError", evalue="old", traceback=[])
    iopub = [
        status(STALE_ID, "busy"),
        stream(STALE_ID, "not mine\n"),
        status(OWN_ID, "busy"),
        stale_error,
        stream(OWN_ID, "mine\n"),
        status(STALE_ID, "idle"),  # another request's idle must not end this cell
        stream(OWN_ID, "still mine\n"),
        status(OWN_ID, "idle"),
    ]
    own_reply = message(OWN_ID, "execute_reply", status="ok", execution_count=1)
    client = ScriptedClient(shell=[own_reply], iopub=iopub)

    content, outputs = run_cell(client, "print('mine')")

    assert content["status"] == "ok"
    assert [(o.output_type, o.text) for o in outputs] == [("stream", "mine\nstill mine\n")]


def test_a_kernel_found_dead_is_reported_without_waiting_for_the_timeout():
    client = ScriptedClient(shell=[], iopub=[status(OWN_ID, "busy")], alive=False)
    started = time.monotonic()
    with pytest.raises(KernelDied, match=r"cell 4 \('import os; os._exit\(1\)'\)"):
        run_cell(client, "import os; os._exit(1)\n", cell_label="cell 4 ('import os; os._exit(1)')")
    assert time.monotonic() - started < 30  # the default limit is 300 s


@pytest.fixture(scope="module")
def slow_start_run(tmp_path_factory) -> nbformat.NotebookNode:
    """One notebook run in a kernel that starts 2 s late, for two tests: a raising cell (tagged
    to raise) then cells that must each get their own result."""
    # While the kernel sleeps, wait_for_ready sends a kernel_info request each second; the
    # kernel answers them all when it wakes, so replies it did not wait for stay queued.
    nb = notebook("import os\n1 / 0", "a = 1", "b = 2", "print(a + b)", raising=(0,))
    tmp_path = tmp_path_factory.mktemp("slow_start")
    return execute(nb, tmp_path, env=slow_start_env(tmp_path, 2))


def test_a_slow_starting_kernel_gives_each_cell_its_own_result(slow_start_run):
    nb = slow_start_run
    assert [cell.execution_count for cell in nb.cells] == [1, 2, 3, 4]
    assert [o.output_type for o in nb.cells[0].outputs] == ["error"]
    assert [o.text for o in nb.cells[3].outputs] == ["3\n"]


def test_a_kernel_that_does_not_start_in_time_is_reported(tmp_path):
    with pytest.raises(KernelNotReady, match="not ready within 1 s"):
        execute(notebook("1"), tmp_path, env=slow_start_env(tmp_path, 60), ready_timeout=1)


def test_a_kernel_that_dies_mid_cell_is_reported_quickly_naming_the_cell(tmp_path):
    nb = notebook("x = 1", "import os; os._exit(1)", "x")
    with pytest.raises(KernelDied, match=r"cell 1 \('import os; os._exit\(1\)'\)"):
        execute(nb, tmp_path, cell_timeout=120)  # KernelDied, not CellTimeout: found at once
    assert nb.cells[2].outputs == []


def test_a_cell_past_its_time_limit_is_reported_naming_the_cell(tmp_path):
    nb = notebook("import time; time.sleep(60)")
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("Cells are named by their index."))
    with pytest.raises(CellTimeout, match=r"cell 1 \('import time; time.sleep\(60\)'\).* 1 s"):
        execute(nb, tmp_path, cell_timeout=1)  # no other code cell needs to finish within it


def test_a_raising_cells_stored_error_holds_no_traceback_paths(slow_start_run):
    nb = slow_start_run
    [error] = nb.cells[0].outputs
    assert error.output_type == "error"
    assert (error.ename, error.evalue) == ("ZeroDivisionError", "division by zero")
    assert error.traceback == ["ZeroDivisionError: division by zero"]
    assert [o.text for o in nb.cells[3].outputs] == ["3\n"], "the cells after it ran"


def test_the_learner_error_output_is_one_line_without_colour_codes():
    content = {
        "ename": "RuntimeError",
        "evalue": "grad can be implicitly created only for scalar outputs",
        "traceback": ["\x1b[0;31mRuntimeError\x1b[0m", 'File "/home/maker/.venv/lib/torch.py"'],
    }
    output = learner_error_output(content)
    assert output == nbformat.v4.new_output(
        "error",
        ename="RuntimeError",
        evalue="grad can be implicitly created only for scalar outputs",
        traceback=["RuntimeError: grad can be implicitly created only for scalar outputs"],
    )
    nbformat.validate(notebook_with(output))


def notebook_with(output: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A one-cell notebook storing ``output``, to validate it against the schema."""
    cell = nbformat.v4.new_code_cell("raise RuntimeError", outputs=[output])
    return nbformat.v4.new_notebook(cells=[cell])


def test_outputs_are_made_with_the_pinned_torch_only():
    from course import pinned_torch
    from run_notebooks import torch_mismatch

    assert pinned_torch() == "2.13.0"
    assert torch_mismatch("2.13.0+cpu", "2.13.0") is None
    assert torch_mismatch("2.13.0", "2.13.0") is None
    message = torch_mismatch("2.14.1+cu128", "2.13.0")
    assert "made with torch 2.13.0" in message and "has 2.14.1+cu128" in message
    assert "--any-torch" in message


def test_a_constraints_file_without_a_torch_pin_is_refused(tmp_path):
    from course import pinned_torch

    constraints = tmp_path / "constraints.txt"
    constraints.write_text("numpy==2.0\n")
    with pytest.raises(ValueError, match="pins no torch==VERSION"):
        pinned_torch(constraints)
