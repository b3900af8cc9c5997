"""Checkers for notebook 05: find the bug in short training loops."""

from __future__ import annotations

import inspect
import warnings

import torch
from torch import nn
from torch.nn import functional as F

from helpers.audit import CODES
from helpers.checks import NOT_ANSWERED, CheckResult, as_names, correct, is_unanswered, wrong
from helpers.pitfalls import AuditedRun, audited_run, make_teacher_batches


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
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
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


LOOPS = {"A": loop_a, "B": loop_b, "C": loop_c, "D": loop_d, "E": loop_e}

# A hint for each code a loop has, for a learner who left it out: it points at the line
# and asks a question, without naming the code or the fix.
MISSING = {
    "A": {
        "graph-kept-alive": "look at the last line of the loop body: after 10 iterations, "
        "is running_loss a number, or a tensor that still points to every loss's graph?",
    },
    "B": {
        "leftover-gradients": "count: 10 micro-batches, a step every k=4. What happens to "
        "the gradients of the last 2?",
        "clip-per-micro-batch": "when does clip_grad_norm_ run: once per window, or after "
        "every backward()?",
        "scheduler-per-micro-batch": "how many times does scheduler.step() run between two "
        "optimizer steps?",
    },
    "C": {
        "params-not-in-optimizer": "the optimizer was built before the loop function ran. "
        "Which parameters does it hold, and which ones get gradients?",
    },
    "D": {},
    "E": {
        "unscale-after-clip": "with a GradScaler, what do the gradients hold when "
        "clip_grad_norm_ runs, and when does unscale_ divide the scale out?",
    },
}
# Why a code a learner added is not reported, per loop (else a general reason).
NOT_THERE = {
    "A": {"missing-zero-grad": "zero_grad() runs at the top of every iteration."},
    "B": {"missing-zero-grad": "zero_grad() follows every step()."},
    "C": {
        "missing-zero-grad": "zero_grad() runs before every backward(), after the forward "
        "pass, which is fine.",
        "zero-grad-before-step": "zero_grad() runs before backward(), not between "
        "backward() and step().",
    },
    "D": {
        "leftover-gradients": "the short last window is stepped after the loop; ask "
        "instead what it was divided by.",
    },
    "E": {
        "clip-per-micro-batch": "without accumulation every backward() is followed by "
        "step(), so clipping each one is right."
    },
}
EMPTY_ANSWERS = {"none", "nothing", "no findings", "empty"}


def show_loop(name: str) -> None:
    """Print the source of find-the-bug loop ``name`` ("A" to "E")."""
    print(inspect.getsource(_loop(name)).rstrip())


def _loop(name: str):
    if not isinstance(name, str) or name.upper() not in LOOPS:
        raise ValueError(f"name must be one of {', '.join(LOOPS)}, got {name!r}")
    return LOOPS[name.upper()]


def audit_loop(name: str) -> AuditedRun:
    """Run find-the-bug loop ``name`` under the auditor on 10 micro-batches."""
    loop = _loop(name)
    options = {}
    if loop is loop_b:
        options = {
            "accumulation_steps": 4,
            "make_scheduler": lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, 0.9),
        }
    elif loop is loop_d:
        options = {"accumulation_steps": 4}
    elif loop is loop_e:
        options = {"scaler": torch.amp.GradScaler("cpu", init_scale=2.0**10)}
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # loop B's scheduler warns; the auditor explains it
        torch.manual_seed(0)
        return audited_run(loop, make_teacher_batches(n_batches=10), **options)


def check_bug_codes(name: str, answer) -> CheckResult:
    """Exercises 05.1 to 05.5: ``answer`` is the set of codes the auditor reports for loop
    ``name`` (an empty set, or "none", when it reports nothing)."""
    _loop(name)
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    if isinstance(answer, str) and answer.strip().lower() in EMPTY_ANSWERS:
        answer = set()
    codes = as_names(answer, '{"missing-zero-grad"} (or set() for none)')
    unknown = sorted(codes - set(CODES))
    if unknown:
        return wrong(f"{unknown[0]!r} is not a finding code; the codes are: {', '.join(CODES)}.")
    expected = set(audit_loop(name).codes)
    name = name.upper()
    missing = sorted(expected - codes)
    if missing:
        return wrong(
            f"the auditor reports {len(missing)} more code(s). {MISSING[name][missing[0]]}"
        )
    for code in sorted(codes - expected):
        reason = NOT_THERE[name].get(code, f"nothing in loop {name} matches it ({CODES[code]}).")
        return wrong(f"the auditor does not report {code} here: {reason}")
    if not expected:
        return correct(
            "the auditor reports nothing, and yet loop D is wrong: its last window of 2 "
            "micro-batches is divided by k=4, so it gets half the gradient (notebook 03). "
            "The auditor sees where backward, step and zero_grad run, not how the loss was "
            "scaled."
        )
    return correct(f"loop {name.upper()}: {', '.join(sorted(expected))}.")
