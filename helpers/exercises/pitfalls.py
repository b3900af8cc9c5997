"""Checkers for notebook 05: repair five short training loops, and predict what clipping
every micro-batch leaves in ``.grad``.

A repair is run the way the buggy loop was: under the loop auditor, on 10 micro-batches,
and beside a correct loop on the same data. The checker names each finding the auditor
still reports, then compares what every optimizer step used (each parameter's gradient,
weight and param-group settings, with ``torch.allclose``) and the final weights: a loop the
auditor is silent on can still be wrong.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import torch
from torch import nn
from torch.nn import functional as F

from helpers.accumulation import windows
from helpers.audit import CODES
from helpers.checks import (
    NOT_ANSWERED,
    AnswerKindError,
    CheckResult,
    as_function,
    call_learner,
    checker,
    correct,
    is_unanswered,
    number_checker,
    wrong,
)
from helpers.models import make_mlp
from helpers.pitfalls import AuditedRun, audited_run, make_teacher_batches

# ---------------------------------------------------------------- the loops to repair


def loop_a(model, optimizer, batches):
    running_loss = 0.0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss
    return running_loss / len(batches)


def loop_b(model, optimizer, batches, scheduler, k=4):
    optimizer.zero_grad()
    for i, (inputs, targets) in enumerate(batches):
        loss = F.mse_loss(model(inputs), targets) / k
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()
        scheduler.step()


def loop_c(model, optimizer, batches):
    model[-1] = nn.Linear(16, 1)  # a fresh head for the new task
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def loop_d(model, optimizer, batches, k=4):
    optimizer.zero_grad()
    for i, (inputs, targets) in enumerate(batches):
        loss = F.mse_loss(model(inputs), targets) / k
        loss.backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()
    if len(batches) % k != 0:  # the last, short window
        optimizer.step()
        optimizer.zero_grad()


def loop_e(model, optimizer, batches, scaler):
    for inputs, targets in batches:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets)
        scaler.scale(loss).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()


# ---------------------------------------------------------------- the correct loops


def repaired_a(model, optimizer, batches):
    running_loss = 0.0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    return running_loss / len(batches)


def repaired_b(model, optimizer, batches, scheduler, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            loss = F.mse_loss(model(inputs), targets) / len(window)
            loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        optimizer.step()
        scheduler.step()


def repaired_c(model, optimizer, batches):
    model[-1] = nn.Linear(16, 1)
    optimizer.add_param_group({"params": model[-1].parameters()})
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def repaired_d(model, optimizer, batches, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            loss = F.mse_loss(model(inputs), targets) / len(window)
            loss.backward()
        optimizer.step()


def repaired_e(model, optimizer, batches, scaler):
    for inputs, targets in batches:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)
        scaler.update()


LOOPS = {"A": loop_a, "B": loop_b, "C": loop_c, "D": loop_d, "E": loop_e}
REPAIRED = {"A": repaired_a, "B": repaired_b, "C": repaired_c, "D": repaired_d, "E": repaired_e}
CALLS = {
    "A": "loop_a(model, optimizer, batches)",
    "B": "loop_b(model, optimizer, batches, scheduler)",
    "C": "loop_c(model, optimizer, batches)",
    "D": "loop_d(model, optimizer, batches)",
    "E": "loop_e(model, optimizer, batches, scaler)",
}
N_BATCHES, K = 10, 4
WINDOWS = {  # the backward passes each step of the correct loop uses
    "A": [1] * N_BATCHES,
    "B": [4, 4, 2],
    "C": [1] * N_BATCHES,
    "D": [4, 4, 2],
    "E": [1] * N_BATCHES,
}
MAX_NORM = {"B": 5.0, "E": 1.0}


def _options(name: str) -> dict:
    """What audited_run gets for loop ``name``: fresh each run (a scheduler and a scaler
    keep state)."""
    if name == "B":
        return {
            "accumulation_steps": K,
            "make_scheduler": lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, 0.9),
        }
    if name == "D":
        return {"accumulation_steps": K}
    if name == "E":
        return {"scaler": torch.amp.GradScaler("cpu", init_scale=2.0**10)}
    return {}


# ---------------------------------------------------------------- running and recording


def record_steps(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[dict]:
    """Before every ``optimizer.step()``, keep what it is about to use: for each parameter
    its gradient, its weight and its param group's settings (None when in no group)."""
    steps = []

    def before_step(optimizer, args, kwargs):
        groups = {id(p): group for group in optimizer.param_groups for p in group["params"]}
        steps.append(
            {
                name: (
                    None if p.grad is None else p.grad.detach().clone(),
                    p.detach().clone(),
                    _settings(groups.get(id(p))),
                )
                for name, p in model.named_parameters()
            }
        )

    optimizer.register_step_pre_hook(before_step)
    return steps


def _settings(group: dict | None) -> dict | None:
    if group is None:
        return None
    return {key: group[key] for key in ("lr", "momentum", "dampening", "weight_decay")}


@dataclass
class Trace:
    """A loop run by the repair checker: the audited run, what every step used, the final
    weights by parameter name."""

    run: AuditedRun
    steps: list[dict]
    final: dict[str, torch.Tensor]


def trace(name: str, loop: Callable) -> Trace:
    """Run ``loop`` the way the checker of loop ``name`` does: under the auditor, on 10
    micro-batches, from the same seeded model and random state, recording every step."""
    name = _name(name)
    model = make_mlp((8, 16, 1), seed=0)
    recorded: list[list[dict]] = []

    def make_optimizer(params):
        optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9)
        recorded.append(record_steps(model, optimizer))
        return optimizer

    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a scheduler stepped too early warns; hints explain
        torch.manual_seed(0)
        run = audited_run(
            loop,
            make_teacher_batches(n_batches=N_BATCHES),
            model=model,
            make_optimizer=make_optimizer,
            **_options(name),
        )
    final = {n: p.detach().clone() for n, p in model.named_parameters()}
    return Trace(run, recorded[0], final)


@cache
def _reference(name: str) -> Trace:
    return trace(name, REPAIRED[name])


def _name(name: str) -> str:
    if not isinstance(name, str) or name.upper() not in LOOPS:
        raise ValueError(f"name must be one of {', '.join(LOOPS)}, got {name!r}")
    return name.upper()


def _as_learner(loop: Callable) -> Callable:
    """The learner's loop as audited_run calls it; the scheduler or scaler goes in by
    position, so the learner may name that parameter as they like."""

    def learner_loop(model, optimizer, batches, **extras):
        return call_learner(loop, model, optimizer, batches, *extras.values())

    return learner_loop


def _unchanged(answer: Callable, loop: Callable) -> bool:
    """Whether ``answer`` is ``loop`` as given (a copy, comments and name aside)."""
    return _body(answer) is not None and _body(answer) == _body(loop)


def _body(function: Callable) -> str | None:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef):
        return None
    return ast.dump(node.args) + ast.dump(ast.Module(node.body, []))


# ---------------------------------------------------------------- what is still wrong

# For each finding the auditor can still report, the mistake and its fix (a loop's own
# wording first, else the general one).
FIXES = {
    "missing-zero-grad": "a step used gradients that an earlier step had already used: "
    "zero them once per window, after step() (or before the window's first backward())",
    "zero-grad-before-step": "zero_grad() runs between a backward() and the step() that "
    "needs its gradients: zero after step(), or before the next backward()",
    "step-without-grad": "a step() ran with no backward() since the step before it: step "
    "once per window, after the window's backward() calls",
    "window-length": "the steps do not use windows of k=4 backward() calls: one backward() "
    "per micro-batch, a step after every 4th one (counting from 1), and one more step on "
    "the short tail",
    "cross-network-leak": "another network's loss wrote into these gradients: zero them "
    "right before this network's own backward(), or detach what the other network made",
    "scheduler-per-micro-batch": "scheduler.step() runs more often than optimizer.step(): "
    "call it once per window, right after optimizer.step()",
    "clip-per-micro-batch": "clip_grad_norm_ still runs after a backward() that no step() "
    "follows, so it shrinks a window's partial sum: clip once per window, after its last "
    "backward(), right before step()",
    "unscale-after-clip": "clip_grad_norm_ ran on gradients still multiplied by the "
    "GradScaler's scale, so max_norm=1.0 capped the wrong numbers: call "
    "scaler.unscale_(optimizer) first, then clip",
    "graph-kept-alive": "a loss tensor outlives its iteration (`running_loss += loss`, or a "
    "list of losses), and with it that iteration's whole graph: keep loss.item() (or "
    "loss.detach()) instead",
    "params-not-in-optimizer": "parameters get gradients but are in no param group of the "
    "optimizer, so step() never moves them: build the optimizer after the model is "
    "complete, or add_param_group() for new layers",
    "leftover-gradients": "the loop ends with backward() calls that no step() used: step "
    "once more on the short last window",
}
LOOP_FIXES = {
    "B": {
        "leftover-gradients": "the last 2 of the 10 micro-batches (4 + 4 + 2) are never "
        "stepped: step once more on that short window, its losses divided by its real "
        "length, 2",
    },
    "D": {
        "leftover-gradients": "the last 2 of the 10 micro-batches (4 + 4 + 2) are never "
        "stepped: step once more on that short window, its losses divided by its real "
        "length, 2",
    },
    "C": {
        "params-not-in-optimizer": "the new head gets gradients but is in no param group "
        "of `optimizer`, so it never moves: add it, optimizer.add_param_group({'params': "
        "model[-1].parameters()}), or keep the head the optimizer already holds and "
        "re-initialize it in place, model[-1].reset_parameters()",
    },
}


def _fix(name: str, code: str) -> str:
    return LOOP_FIXES.get(name, {}).get(code) or FIXES.get(code) or CODES.get(code, code)


def _which(code: str, mine: Trace) -> str:
    """For params-not-in-optimizer, the parameters in no param group."""
    if code != "params-not-in-optimizer":
        return ""
    outside = {
        param
        for step in mine.steps
        for param, (grad, _, settings) in step.items()
        if grad is not None and settings is None
    }
    return f" (in no group: {', '.join(sorted(outside))})" if outside else ""


def _close(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def _norm(step: dict) -> float:
    grads = [grad.flatten() for grad, _, _ in step.values() if grad is not None]
    return torch.cat(grads).norm().item() if grads else 0.0


def _ratio(mine: dict, ref: dict) -> float | None:
    """c when every gradient of ``mine`` is c times the reference's, else None (both have
    gradients for the same parameters: the caller checked)."""
    names = [name for name, (grad, _, _) in ref.items() if grad is not None]
    a = torch.cat([mine[name][0].flatten() for name in names])
    b = torch.cat([ref[name][0].flatten() for name in names])
    if (b @ b).item() == 0:
        return None
    c = (a @ b / (b @ b)).item()
    return c if torch.allclose(a, c * b, rtol=1e-4, atol=1e-6) else None


def _window_hint(name: str, step: int, mine: dict, ref: dict) -> str:
    """Why step ``step`` (counted from 1) used another gradient than the correct loop's."""
    n = WINDOWS[name][step - 1]
    what = f"step {step} (a window of {n} micro-batches)" if name in ("B", "D") else f"step {step}"
    used = f"{what} used a gradient of norm {_norm(mine):.4g}, the correct loop's {_norm(ref):.4g}"
    ratio = _ratio(mine, ref)
    if name == "B" and n < K:
        return (
            f"{used}: the short last window's losses must be divided by its real length, "
            f"{n}, not by k={K}, and clipped once, after its last backward()"
        )
    if name in ("B", "D"):
        if ratio is not None and math.isclose(n / ratio, K, rel_tol=1e-3) and n < K:
            return (
                f"{used}, {ratio:.2g} times it: the short last window is divided by k={K}, "
                f"not by its real length {n}, so it gets {ratio:.2g} of its gradient. The "
                "auditor cannot see what a loss was divided by; the gradients show it"
            )
        if ratio is not None and math.isclose(n / ratio, 1, rel_tol=1e-3):
            return (
                f"{used}, {ratio:.3g} times it: its losses are not divided at all, so the "
                f"step uses their sum: divide each by {n}, the window's length"
            )
        if ratio is not None:
            return (
                f"{used}: its losses were divided by {n / ratio:.3g} instead of {n}, the "
                "number of micro-batches in that window"
            )
        return f"{used}: divide each loss by its window's length, one backward() each"
    if name == "E":
        norm, limit = _norm(mine), MAX_NORM["E"]
        if norm > limit * (1 + 1e-3):
            return (
                f"{used}: more than max_norm={limit:g}, so it was never clipped. Clip after "
                "scaler.unscale_(optimizer) and before scaler.step(optimizer)"
            )
        if norm < limit * (1 - 1e-3):
            return (
                f"{used}: unscale_ divided by the scale gradients that were never "
                "multiplied by it. backward() must run on scaler.scale(loss)"
            )
    return used


def _describe(settings: dict | None, other: dict | None) -> str:
    """A param group's settings, those that differ from ``other`` first."""
    if settings is None:
        return "no param group"
    keys = [key for key in settings if other is None or settings[key] != other[key]]
    return ", ".join(f"{key}={settings[key]:g}" for key in keys or settings)


START_HINTS = {
    "C": "make the new head as loop C does, model[-1] = nn.Linear(16, 1) (or reset the "
    "old one with model[-1].reset_parameters()), and nothing else random before it",
}
SETTINGS_HINTS = {
    "B": "Call scheduler.step() once per window, right after optimizer.step(): a scheduler "
    "stepped before the optimizer lowers the rate one step too early",
    "C": "The new head must train with the optimizer's settings (lr=0.01, momentum=0.9): "
    "add_param_group fills them in when you leave them out",
}


def _difference(name: str, mine: Trace, ref: Trace) -> str | None:
    """The first thing ``mine`` did differently from the correct loop, or None."""
    if len(mine.steps) != len(ref.steps):
        sizes = ", ".join(map(str, WINDOWS[name]))
        return (
            f"your loop made {len(mine.steps)} optimizer step(s); the correct one makes "
            f"{len(ref.steps)}, on windows of {sizes} micro-batch(es)"
        )
    for step, (m, r) in enumerate(zip(mine.steps, ref.steps, strict=True), 1):
        missing = [p for p in r if m[p][0] is None and r[p][0] is not None]
        extra = [p for p in r if m[p][0] is not None and r[p][0] is None]
        if missing or extra:
            return (
                f"at step {step}, {', '.join(missing)} had no gradient: they never train"
                if missing
                else f"at step {step}, {', '.join(extra)} had a gradient the correct loop's do not"
            )
        for param, (_, weight, settings) in m.items():
            if settings != r[param][2]:
                return (
                    f"at step {step}, {param} trained with {_describe(settings, r[param][2])}"
                    f" where the correct loop uses {_describe(r[param][2], settings)}. "
                    + SETTINGS_HINTS.get(name, "Keep the optimizer's settings as given")
                )
            if not _close(weight, r[param][1]) and step == 1:
                return (
                    f"{param} already differs from the correct loop's at the first step: "
                    + START_HINTS.get(name, "your loop changed the weights before it")
                )
            if not _close(weight, r[param][1]):
                return (
                    f"step {step - 1} used the correct gradients and settings, yet moved "
                    "the weights differently: does anything else change the weights, or "
                    "step twice?"
                )
        if not all(_close(m[p][0], r[p][0]) for p in r):
            return _window_hint(name, step, m, r)
    if not all(_close(mine.final[p], ref.final[p]) for p in ref.final):
        return "the last step moved the weights differently from the correct loop's"
    return None


def _result_hint(name: str, mine: object, ref: object) -> str | None:
    """Loop A returns the epoch's mean loss: the repaired loop must too."""
    if ref is None:
        return None
    if isinstance(mine, torch.Tensor) and mine.numel() == 1:
        mine = mine.item()
    if isinstance(mine, bool) or not isinstance(mine, (int, float)):
        kind = "None" if mine is None else type(mine).__name__
        return f"loop {name} returns the epoch's mean loss, a number; yours returned {kind}"
    if math.isclose(mine, ref * N_BATCHES, rel_tol=1e-5):
        return f"your loop returns the sum of the losses, {mine:.4f}: divide by len(batches)"
    if not math.isclose(mine, ref, rel_tol=1e-5):
        return f"your loop returns {mine:.4f}; the epoch's mean loss is {ref:.4f}"
    return None


PASSED = {
    "A": "the auditor reports nothing, every step used the correct loop's gradients, and "
    "the loop returns the mean loss, {result:.4f}: a number, not a tensor holding every "
    "iteration's graph.",
    "B": "3 steps on windows of 4, 4 and 2, each the mean of its micro-batches, clipped "
    "once and followed by one scheduler.step(): the correct loop's weights.",
    "C": "the new head is in the optimizer and trains: the correct loop's weights.",
    "D": "every window is divided by its own length, so the tail gets its whole gradient: "
    "the correct loop's weights. The auditor was silent on loop D; only the gradients "
    "showed what was wrong.",
    "E": "unscale_ before clipping: every step used a gradient clipped to norm 1 in true "
    "units, the correct loop's weights.",
}


def check_repair(name: str, answer) -> CheckResult:
    """Exercises 05.2 to 05.6: ``answer`` is loop ``name`` ("A" to "E"), repaired."""
    name = _name(name)
    return _check_repair(name, answer)


@checker
def _check_repair(name: str, answer) -> CheckResult:
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    if isinstance(answer, str):
        raise AnswerKindError(
            f"pass your repaired loop itself, the function, not a string: the check calls "
            f"it as {CALLS[name]}"
        )
    loop = as_function(answer, CALLS[name])
    mine, ref = trace(name, _as_learner(loop)), _reference(name)
    given = f"This is still loop {name} as given. " if _unchanged(loop, LOOPS[name]) else ""
    if not mine.steps:
        moved = mine.run.weight_change() > 0
        return wrong(
            given
            + (
                "The optimizer your loop was given never stepped, yet the weights moved: it "
                "trained another optimizer, built inside it. The caller keeps (and the "
                "check audits) the one it passed in: train with that one."
                if moved
                else "No optimizer.step() ran: the loop trained nothing."
            )
        )
    if mine.run.codes:
        findings = [f"{code}: {_fix(name, code)}{_which(code, mine)}." for code in mine.run.codes]
        count = f"{len(findings)} findings. " if len(findings) > 1 else ""
        return wrong(given + "The auditor still reports " + count + " ".join(findings))
    difference = _difference(name, mine, ref) or _result_hint(name, mine.run.result, ref.run.result)
    if difference:
        return wrong(given + "The auditor reports nothing, but " + difference + ".")
    return correct(f"Loop {name}: " + PASSED[name].format(result=ref.run.result))


def check_repair_a(answer) -> CheckResult:
    """Exercise 05.2: loop A, repaired."""
    return check_repair("A", answer)


def check_repair_b(answer) -> CheckResult:
    """Exercise 05.3: loop B, repaired."""
    return check_repair("B", answer)


def check_repair_c(answer) -> CheckResult:
    """Exercise 05.4: loop C, repaired."""
    return check_repair("C", answer)


def check_repair_d(answer) -> CheckResult:
    """Exercise 05.5: loop D, repaired."""
    return check_repair("D", answer)


def check_repair_e(answer) -> CheckResult:
    """Exercise 05.6: loop E, repaired."""
    return check_repair("E", answer)


# ---------------------------------------------------------------- a prediction

CLIP_MAX_NORM, CLIP_K = 0.5, 4
check_clipped_norm = number_checker(
    CLIP_MAX_NORM,
    {
        CLIP_K * CLIP_MAX_NORM: "That is 4 x 0.5, as if four clipped micro-batch gradients "
        "added up. clip_grad_norm_ rescales the whole of .grad, the running sum, in place: "
        "the clip after the 4th backward() caps the sum itself.",
        math.sqrt(CLIP_K) * CLIP_MAX_NORM: "That is the norm of four clipped pieces at right "
        "angles (2 x 0.5). But the last clip_grad_norm_ runs on the whole sum in .grad, "
        "after the 4th backward().",
        CLIP_MAX_NORM / CLIP_K: "That is 0.5 / 4, as if the clipped gradient were divided "
        "by k afterwards. The losses were divided by 4 before backward(); the clip after "
        "the 4th backward() then caps the summed .grad at max_norm.",
    },
    "clip_grad_norm_ scales the whole of .grad in place whenever its norm is above "
    "max_norm. What does .grad hold after the 4th backward(), and what does the clip right "
    "after it do?",
    doc="Exercise 05.1: the norm of the gradient that step() uses when clip_grad_norm_("
    "max_norm=0.5) runs after every one of 4 micro-batch backward() calls.",
)
