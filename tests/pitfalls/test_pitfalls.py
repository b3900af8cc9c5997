"""Helpers of notebooks 05 and 06: the plain and the audited runner and its core, graph and
saved-activation measures, and notebook 05's loops as helpers.pitfalls.buggy_loops keeps them. The
exercises' checkers are tested in tests/audit_and_repair/test_pitfall_exercises.py."""

import ast
import inspect
import re
import textwrap

import pytest
import torch
from course import NOTEBOOKS, read
from torch import nn
from torch.nn import functional as F

from helpers.data import make_teacher_batches
from helpers.loop_runs import audited_run, run_loop, run_under_auditor
from helpers.models import make_mlp
from helpers.pitfalls.buggy_loops import (
    NOTEBOOK_05_LOOPS,
    SavedTensorMeter,
    accumulate_clipping,
    graph_size,
)


def plain(model, optimizer, batches):
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
    return "done"


def test_teacher_batches_are_seeded_and_learnable():
    a, b = make_teacher_batches(seed=3), make_teacher_batches(seed=3)
    assert len(a) == 12 and a[0][0].shape == (8, 8) and a[0][1].shape == (8, 1)
    assert all(torch.equal(x, y) for (x, _), (y, _) in zip(a, b, strict=True))
    run = audited_run(plain, a * 5)
    losses = [F.mse_loss(run.model(x), y).item() for x, y in a]
    start = audited_run(lambda m, o, bs: None, a).model
    assert sum(losses) < 0.5 * sum(F.mse_loss(start(x), y).item() for x, y in a)
    with pytest.raises(ValueError, match="n_batches"):
        make_teacher_batches(n_batches=0)


def test_audited_run_reports_result_weights_and_findings():
    run = audited_run(plain, make_teacher_batches())
    assert run.result == "done" and run.codes == [] and run.weight_change() > 0
    assert run.auditor.steps == 12 and isinstance(run.optimizer, torch.optim.SGD)


def test_audited_run_passes_scheduler_and_scaler_to_the_loop():
    seen = {}

    def loop(model, optimizer, batches, scheduler, scaler):
        seen.update(scheduler=scheduler, scaler=scaler)

    scaler = torch.amp.GradScaler("cpu")

    def step_lr(optimizer):
        return torch.optim.lr_scheduler.StepLR(optimizer, 1)

    audited_run(loop, make_teacher_batches(), make_scheduler=step_lr, scaler=scaler)
    assert isinstance(seen["scheduler"], torch.optim.lr_scheduler.StepLR)
    assert seen["scaler"] is scaler


def test_audited_run_refuses_bad_input():
    with pytest.raises(TypeError, match="loop must be a function"):
        audited_run("loop", make_teacher_batches())
    with pytest.raises(ValueError, match="empty"):
        audited_run(plain, [])


def test_graph_size_counts_operations_and_grows_linearly():
    w = torch.ones(3, requires_grad=True)
    assert graph_size(w.detach()) == 0 and graph_size(w) == 0
    assert graph_size((w * 2).sum()) == 2
    total = 0
    for _ in range(5):
        total = total + (w * 2).sum()
    assert graph_size(total) == 5 * 2 + 5, "5 (mul, sum) pairs and 5 additions (the first to 0)"
    with pytest.raises(TypeError):
        graph_size(3.0)


def test_saved_tensor_meter_sees_held_activations_and_their_release():
    model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 1))
    inputs = torch.randn(10, 4)
    with SavedTensorMeter() as meter:
        out = model(inputs).sum()
        held = meter.held_bytes()
        out.backward()
        after_backward = meter.held_bytes()
    assert held == 10 * 32 * 4, "the ReLU output, saved by ReLU and by the next Linear, once"
    assert after_backward == 0
    with SavedTensorMeter() as meter, torch.no_grad():
        model(inputs)
        assert meter.held_bytes() == 0


def test_meter_does_not_change_gradients():
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    inputs = torch.randn(6, 4)
    model(inputs).pow(2).sum().backward()
    reference = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with SavedTensorMeter():
        model(inputs).pow(2).sum().backward()
    assert all(torch.equal(p.grad, r) for p, r in zip(model.parameters(), reference, strict=True))


def test_audited_run_runs_the_loop_through_its_core(monkeypatch):
    import helpers.loop_runs

    calls = []
    core = helpers.loop_runs.run_under_auditor

    def spy(*args):
        calls.append(args)
        return core(*args)

    monkeypatch.setattr(helpers.loop_runs, "run_under_auditor", spy)
    run = audited_run(plain, make_teacher_batches(), accumulation_steps=1)
    assert len(calls) == 1 and calls[0][0] is plain and calls[0][5] == 1
    assert run.result == "done" and run.auditor.steps == 12


def test_run_under_auditor_returns_the_auditor_and_the_result():
    model = make_mlp((8, 16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    auditor, result = run_under_auditor(
        plain, model, optimizer, make_teacher_batches(), {}, None, ()
    )
    assert result == "done" and auditor.codes == [] and auditor.steps == 12


def test_run_loop_runs_a_loop_without_an_auditor():
    run = run_loop(plain, make_teacher_batches())
    assert run.result == "done" and run.weight_change() > 0
    assert not hasattr(run, "auditor") and isinstance(run.optimizer, torch.optim.SGD)
    with pytest.raises(TypeError, match="loop must be a function"):
        run_loop("loop", make_teacher_batches())
    with pytest.raises(ValueError, match="empty"):
        run_loop(plain, [])


def test_run_loop_and_audited_run_train_the_same_weights():
    batches = make_teacher_batches()
    plain_run, audited = run_loop(plain, batches), audited_run(plain, batches)
    for a, b in zip(plain_run.model.parameters(), audited.model.parameters(), strict=True):
        assert torch.equal(a, b)


def notebook_functions(stem: str) -> dict[str, str]:
    """Each function a notebook's code cells define, as its AST dump."""
    nb = read(NOTEBOOKS / f"{stem}.ipynb")
    return {
        node.name: ast.dump(node)
        for cell in nb.cells
        if cell.cell_type == "code" and "course-setup" not in cell.metadata.get("tags", [])
        for node in ast.parse(cell.source).body
        if isinstance(node, ast.FunctionDef)
    }


@pytest.mark.parametrize("loop", NOTEBOOK_05_LOOPS, ids=lambda f: f.__name__)
def test_notebook_05_defines_each_loop_as_helpers_pitfalls_keeps_it(loop):
    """Notebook 06 shows and audits these functions as notebook 05's loops: the same code."""
    helper = ast.parse(textwrap.dedent(inspect.getsource(loop))).body[0]
    assert notebook_functions("05_pitfalls")[loop.__name__] == ast.dump(helper)


def test_notebook_06_shows_the_loop_its_prediction_audits():
    """Exercise 06.1's answer is what the auditor reports on helpers.pitfalls.buggy_loops's loop:
    the exercise cell must show that loop, the same code."""
    helper = ast.parse(textwrap.dedent(inspect.getsource(accumulate_clipping))).body[0]
    assert notebook_functions("06_loop_auditor")["accumulate_clipping"] == ast.dump(helper)


def test_the_loops_notebook_06_audits_are_notebook_05s_or_its_own():
    source = "".join(c.source for c in read(NOTEBOOKS / "06_loop_auditor.ipynb").cells)
    used = set(re.findall(r"(?<![\w.])buggy_loops\.(\w+)", source))
    kept = {loop.__name__ for loop in NOTEBOOK_05_LOOPS} | {"accumulate_without_dividing"}
    assert used and used <= kept, used - kept


def test_notebook_05_needs_no_auditor():
    """The auditor is taught in notebook 06: 05 may name its rule ids, never run it. (The
    setup cell, the same in every notebook, puts the auditor's folder on the path.)"""
    nb = read(NOTEBOOKS / "05_pitfalls.ipynb")
    code = "".join(
        c.source
        for c in nb.cells
        if c.cell_type == "code" and "course-setup" not in c.metadata.get("tags", [])
    )
    for name in ("LoopAuditor", "audited_run", "helpers.audit", "loop_auditor"):
        assert name not in code, name


def test_helpers_pitfalls_imports_no_auditor():
    """Notebook 05 imports helpers.pitfalls.buggy_loops and helpers.loop_runs: the auditor
    loads only when a run uses it. (The helpers' messages load the loop auditor's language
    module, loop_auditor.language, which imports no torch and nothing of the auditor.)"""
    import subprocess
    import sys

    code = (
        "import sys, helpers.pitfalls.buggy_loops, helpers.loop_runs;"
        " print(sorted(m for m in sys.modules if m.startswith('loop_auditor')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() in ("[]", "['loop_auditor', 'loop_auditor.language']")
