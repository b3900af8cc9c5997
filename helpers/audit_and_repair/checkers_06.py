"""Checkers for notebook 06: predict what the loop auditor reports for a loop (exercise 06.1,
at the end of this module), and repair five short training loops (exercises 06.2 to 06.6:
loops A, B and C on the main path, D and E optional).

A repair is run the way the buggy loop was: under the loop auditor, on 10 micro-batches,
and beside a correct loop on the same data. The checker names each finding the auditor
still reports, then compares what every optimizer step used (each parameter's gradient,
weight and param-group settings, with ``torch.allclose``) and the final weights: a loop the
auditor is silent on can still be wrong. It also records the clip_grad_norm_ calls, the
scheduler's steps and the GradScaler's calls, so that a hint names the mistake itself (a
clip after the step, a scheduler stepped once per epoch, optimizer.step() in place of
scaler.step) rather than what it did to a gradient; loop B's division mistakes are told by
running the correct loop with each of them. Whatever the learner's loop does, the answer is
a ❌ with a hint, never a traceback.

Loop C (exercise 06.4) also accepts one ``backward()`` per window, on the window's mean loss:
its gradient is right, and the auditor's ``window-length`` finding (windows of 1 backward
pass) is then expected. The verdict notes its cost: it holds every micro-batch's graph in
memory until that backward, which is not accumulation (notebook 07's AMP-window exercise
agrees).

The loops and their correct versions are in :mod:`helpers.audit_and_repair.loops_to_repair`; running
and recording a loop is :mod:`helpers.audit_and_repair.repair_trace`; here, the diagnosis and the
checkers.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from functools import cache

import torch
from torch import nn
from torch.nn import functional as F

from helpers.accumulation import windows
from helpers.audit import CODES
from helpers.audit_and_repair.loops_to_repair import CALLS, LOOPS, MAX_NORM, WINDOWS, K
from helpers.audit_and_repair.repair_trace import (
    Trace,
    as_learner_loop,
    loop_name,
    reference_trace,
    trace,
    unchanged_loop,
)
from helpers.audit_and_repair.script_review import check_script_review as check_script_review
from helpers.checks import (
    NOT_ANSWERED,
    AnswerKindError,
    CheckResult,
    LearnerCodeError,
    as_function,
    as_names,
    as_number,
    ask_first,
    checker,
    correct,
    is_unanswered,
    wrong,
)
from helpers.data import make_teacher_batches
from helpers.loop_runs import audited_run
from helpers.pitfalls.buggy_loops import accumulate_clipping, train
from helpers.predictions import choice_checker
from helpers.translation import N_, _, translate

# ---------------------------------------------------------------- what is still wrong

# For each finding the auditor can still report, the mistake and its fix (a loop's own
# wording first, else the general one).
FIXES = {
    "missing-zero-grad": N_(
        "a step used gradients that an earlier step had already used: "
        "zero them once per window, after step() (or before the window's first backward())"
    ),
    "zero-grad-before-step": N_(
        "zero_grad() runs between a backward() and the step() that "
        "needs its gradients: zero after step(), or before the next backward()"
    ),
    "step-without-grad": N_(
        "a step() ran with no backward() since the step before it: step "
        "once per window, after the window's backward() calls"
    ),
    "window-length": N_(
        "the steps do not use windows of k=4 backward() calls: one backward() "
        "per micro-batch, a step after every 4th one (counting from 1), and one more step on "
        "the short tail"
    ),
    "cross-network-leak": N_(
        "another network's loss wrote into these gradients: zero them "
        "right before this network's own backward(), or detach what the other network made"
    ),
    "scheduler-per-micro-batch": N_(
        "scheduler.step() runs more often than optimizer.step(): "
        "call it once per window, right after optimizer.step()"
    ),
    "clip-per-micro-batch": N_(
        "clip_grad_norm_ still runs after a backward() that no step() "
        "follows, so it shrinks a window's partial sum: clip once per window, after its last "
        "backward(), right before step()"
    ),
    "unscale-after-clip": N_(
        "clip_grad_norm_ ran on gradients still multiplied by the "
        "GradScaler's scale, so max_norm=1.0 capped the wrong numbers: call "
        "scaler.unscale_(optimizer) first, then clip"
    ),
    "graph-kept-alive": N_(
        "a loss tensor outlives its iteration (`running_loss += loss`, or a "
        "list of losses), and with it that iteration's whole graph: keep loss.item() (or "
        "loss.detach()) instead"
    ),
    "params-not-in-optimizer": N_(
        "parameters get gradients but are in no param group of the "
        "optimizer, so step() never moves them: build the optimizer after the model is "
        "complete, or add_param_group() for new layers"
    ),
    "leftover-gradients": N_(
        "the loop ends with backward() calls that no step() used: step "
        "once more on the short last window"
    ),
}
LOOP_FIXES = {
    "B": {
        "leftover-gradients": N_(
            "the last 2 of the 10 micro-batches (4 + 4 + 2) are never "
            "stepped: step once more on that short window, its losses divided by its real "
            "length, 2"
        ),
    },
    "C": {
        "leftover-gradients": N_(
            "the last 2 of the 10 micro-batches (4 + 4 + 2) are never "
            "stepped: step once more on that short window, its losses divided by its real "
            "length, 2"
        ),
    },
    "D": {
        "params-not-in-optimizer": N_(
            "the new head gets gradients but is in no param group "
            "of `optimizer`, so it never moves: add it, optimizer.add_param_group({'params': "
            "model[-1].parameters()}), or keep the head the optimizer already holds and "
            "re-initialize it in place, model[-1].reset_parameters()"
        ),
    },
}


def _fix(name: str, code: str) -> str:
    fix = LOOP_FIXES.get(name, {}).get(code) or FIXES.get(code)
    return translate(fix) if fix else CODES.get(code, code)


def _which(code: str, mine: Trace) -> str:
    """For params-not-in-optimizer, the parameters in no param group."""
    if code != "params-not-in-optimizer":
        return ""
    outside = {
        param
        for step in mine.steps
        for param, (grad, _weight, settings) in step.items()
        if grad is not None and settings is None
    }
    return (
        _(" (in no group: {outside})").format(outside=", ".join(sorted(outside))) if outside else ""
    )


def _close(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def _equal(a: object, b: object) -> bool:
    """Two settings (an lr, a max_norm) as numbers, equal to 1e-6; else ``a is b``."""
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    except (TypeError, ValueError, RuntimeError):
        return a is b


def _fmt(value: object) -> str:
    try:
        return format(float(value), ".4g")
    except (TypeError, ValueError, RuntimeError):
        return repr(value)


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


def _same_run(mine: Trace, other: Trace) -> bool:
    """Whether ``mine`` stepped exactly as ``other`` did: the same gradients at every step
    and the same final weights."""
    if len(mine.steps) != len(other.steps) or set(mine.final) != set(other.final):
        return False
    for m, o in zip(mine.steps, other.steps, strict=True):
        if set(m) != set(o) or not all(_close(m[p][0], o[p][0]) for p in o):
            return False
    return all(_close(mine.final[p], other.final[p]) for p in other.final)


def _repaired_b_with(divide_by: str) -> Callable:
    """The correct loop B with one mistake in its division: ``"nothing"`` (losses not
    divided) or ``"k"`` (the short last window divided by k too)."""

    def loop(model, optimizer, micro_batches, scheduler, accumulation_steps=K):
        for window in windows(micro_batches, accumulation_steps):
            optimizer.zero_grad()
            for inputs, targets in window:
                loss = F.mse_loss(model(inputs), targets)
                (loss if divide_by == "nothing" else loss / accumulation_steps).backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=MAX_NORM["B"])
            optimizer.step()
            scheduler.step()

    return loop


# Loop B's division mistakes, each told by running the correct loop with it: clipping cuts
# a window's gradient down to norm 5, so a ratio of gradients cannot show the division.
B_DIVISION_MISTAKES = {
    "nothing": N_(
        "its losses are not divided at all, so each step used the sum of its "
        "window's gradients, 4 times their mean on a full window (the clip then cut it down "
        "to norm 5, which hides how large it was): divide each loss by its window's length, "
        "4, 4 and 2"
    ),
    "k": N_(
        "the short last window's losses must be divided by its real length, 2, not by "
        "k=4: divided by 4 it got half its gradient"
    ),
}


@cache
def _division_mistake(divide_by: str) -> Trace:
    return trace("B", _repaired_b_with(divide_by))


CLIP_PLACE = {
    "B": N_("once per window, after its last backward() and before optimizer.step()"),
    "E": N_("after scaler.unscale_(optimizer) and before scaler.step(optimizer)"),
}


def _clip_hint(name: str, step: int, m: dict, r: dict, mine: Trace) -> str | None:
    """For the loops that clip (B, E): a clip with another max_norm or norm, or a step that
    used an unclipped gradient (no clip ran, or it ran after the step)."""
    if name not in MAX_NORM:
        return None
    limit = MAX_NORM[name]
    used = _("step {step} used a gradient of norm {m:.4g}, the correct loop's {r:.4g}").format(
        step=step, m=_norm(m), r=_norm(r)
    )
    for call in mine.clips:
        if not _equal(call["max_norm"], limit):
            return _(
                "clip_grad_norm_ ran with max_norm={value} where loop "
                "{name} clips at max_norm={limit:g}, so {used}: keep "
                "max_norm={limit:g}"
            ).format(value=_fmt(call["max_norm"]), name=name, limit=limit, used=used)
        if not _equal(call["norm_type"], 2.0):
            return _(
                "clip_grad_norm_ ran with norm_type={value} where loop "
                "{name} clips the 2-norm (norm_type=2, the default), "
                "so {used}"
            ).format(value=_fmt(call["norm_type"]), name=name, used=used)
    if _norm(m) <= limit * (1 + 1e-3):
        return None
    over = _("step {step} used a gradient of norm {m:.4g}, more than max_norm={limit:g}").format(
        step=step, m=_norm(m), limit=limit
    )
    step_call = "optimizer.step()" if name == "B" else "scaler.step(optimizer)"
    if mine.clips:
        return _(
            "{over}: clip_grad_norm_ ran, but only after {step_call} "
            "had used the gradients, so it clipped nothing that "
            "mattered. Clip {CLIP_PLACE}"
        ).format(over=over, step_call=step_call, CLIP_PLACE=translate(CLIP_PLACE[name]))
    return _(
        "{over}: nothing clipped it, no clip_grad_norm_ ran. "
        "Call nn.utils.clip_grad_norm_(model.parameters(), "
        "max_norm={limit:g}) {CLIP_PLACE}"
    ).format(over=over, limit=limit, CLIP_PLACE=translate(CLIP_PLACE[name]))


def _window_hint(name: str, step: int, mine: Trace, m: dict, r: dict) -> str:
    """Why step ``step`` (counted from 1) used another gradient than the correct loop's."""
    clip = _clip_hint(name, step, m, r, mine)
    if clip is not None:
        return clip
    n = WINDOWS[name][step - 1]
    what = (
        _("step {step} (a window of {n} micro-batches)").format(step=step, n=n)
        if name in ("B", "C")
        else _("step {step}").format(step=step)
    )
    used = _("{what} used a gradient of norm {m:.4g}, the correct loop's {r:.4g}").format(
        what=what, m=_norm(m), r=_norm(r)
    )
    if name == "B":
        for divide_by, hint in B_DIVISION_MISTAKES.items():
            if _same_run(mine, _division_mistake(divide_by)):
                return _("{used}: {hint}").format(used=used, hint=translate(hint))
        if max(_norm(m), _norm(r)) >= MAX_NORM["B"] * (1 - 1e-3):  # clipped: no ratio
            return _(
                "{used}: divide each loss by its window's length (4, "
                "4 and 2), one backward() per micro-batch, then clip "
                "once and step"
            ).format(used=used)
    ratio = _ratio(m, r)
    if name in ("B", "C"):
        if ratio is not None and math.isclose(n / ratio, K, rel_tol=1e-3) and n < K:
            return _(
                "{used}, {ratio:.2g} times it: the short last window "
                "is divided by k={K}, not by its real length {n}, so "
                "it gets {ratio:.2g} of its gradient. The auditor cannot "
                "see what a loss was divided by; the gradients show "
                "it"
            ).format(used=used, ratio=ratio, K=K, n=n)
        if ratio is not None and math.isclose(n / ratio, 1, rel_tol=1e-3):
            return _(
                "{used}, {ratio:.3g} times it: its losses are not divided "
                "at all, so the step uses their sum: divide each by "
                "{n}, the window's length"
            ).format(used=used, ratio=ratio, n=n)
        if ratio is not None:
            return _(
                "{used}: its losses were divided by {value:.3g} instead "
                "of {n}, the number of micro-batches in that window"
            ).format(used=used, value=n / ratio, n=n)
        return _("{used}: divide each loss by its window's length, one backward() each").format(
            used=used
        )
    if name == "E" and _norm(m) < MAX_NORM["E"] * (1 - 1e-3):
        return _(
            "{used}: unscale_ divided by the scale gradients that "
            "were never multiplied by it. backward() must run on "
            "scaler.scale(loss)"
        ).format(used=used)
    return used


def _describe(settings: dict | None, other: dict | None) -> str:
    """A param group's settings, those that differ from ``other`` first."""
    if settings is None:
        return _("no param group")
    keys = [key for key in settings if other is None or not _equal(settings[key], other[key])]
    return ", ".join(f"{key}={_fmt(settings[key])}" for key in keys or settings)


def _same_settings(a: dict | None, b: dict | None) -> bool:
    if a is None or b is None:
        return a is b
    return all(_equal(a[key], b[key]) for key in b)


START_HINTS = {
    "D": N_(
        "make the new head as loop D does, model[-1] = nn.Linear(16, 1) (or reset the "
        "old one with model[-1].reset_parameters()), and nothing else random before it"
    ),
}
SETTINGS_HINTS = {
    "D": N_(
        "The new head must train with the optimizer's settings (lr=0.01, momentum=0.9): "
        "add_param_group fills them in when you leave them out"
    ),
}
LAYOUT_HINTS = {
    "D": N_(
        "Keep the new head as loop D makes it, model[-1] = nn.Linear(16, 1), with its "
        "weight and its bias, and change no other layer"
    ),
}
FROZEN_HINTS = {
    "D": {
        "trunk": N_(
            "Loop D fine-tunes the whole model on the new task: the trunk keeps "
            "training beside the new head. Leave requires_grad as it is, and only add the new "
            "head to the optimizer"
        ),
        "head": N_(
            "The new head must train: leave requires_grad as it is, and add the head "
            "to the optimizer"
        ),
    },
}
REPLACED_HINTS = {
    "D": N_(
        "the head is replaced in every iteration, so each step trains a fresh random head "
        "that the next iteration throws away (the optimizer keeps stepping the old ones): make "
        "the new head once, before the loop"
    ),
}


def _layout(weights: dict) -> dict[str, tuple]:
    return {
        name: (tuple(w.shape), w.dtype)
        for name, w in (
            (name, value[1] if isinstance(value, tuple) else value)
            for name, value in weights.items()
        )
    }


def _layout_hint(name: str, mine: dict, ref: dict) -> str:
    """What differs between two models' parameters (names, shapes, dtypes)."""
    parts = []
    missing = [p for p in ref if p not in mine]
    extra = [p for p in mine if p not in ref]
    if missing:
        parts.append(_("yours lacks {missing}").format(missing=", ".join(missing)))
    if extra:
        parts.append(
            _("yours has {extra}, which the correct loop's model does not").format(
                extra=", ".join(extra)
            )
        )
    for p in ref:
        if p in mine and mine[p] != ref[p]:
            (shape, dtype), (want_shape, want_dtype) = mine[p], ref[p]
            parts.append(
                _("{p} is {dtype}, not {want_dtype}").format(
                    p=p, dtype=dtype, want_dtype=want_dtype
                )
                if dtype != want_dtype
                else _("{p} has shape {list}, not {list2}").format(
                    p=p, list=list(shape), list2=list(want_shape)
                )
            )
    dtypes = set(mine) == set(ref) and all(mine[p][0] == ref[p][0] for p in ref)
    fix = (
        _("Keep the model's dtype, float32, the batches' dtype")
        if dtypes
        else translate(
            LAYOUT_HINTS.get(name, N_("Train the model as given: add, remove or replace no layer"))
        )
    )
    return _("the model's parameters differ from the correct loop's: {parts}. {fix}").format(
        parts=_("; ").join(parts), fix=fix
    )


def _frozen_hint(name: str, mine: Trace, ref: Trace) -> str | None:
    """Parameters the correct loop trains that the learner froze (requires_grad False)."""
    frozen = [
        p
        for p, param in mine.run.model.named_parameters()
        if not param.requires_grad and p in ref.final
    ]
    if not frozen:
        return None
    hints = FROZEN_HINTS.get(name, {})
    head = all(p.startswith("2.") for p in frozen)
    fix = hints.get("head" if head else "trunk")
    fix = (
        translate(fix)
        if fix
        else _("Every layer trains in loop {name}: leave requires_grad as it is").format(name=name)
    )
    return _(
        "{frozen} had no gradient: requires_grad_(False) froze them, so they never train. {fix}"
    ).format(frozen=", ".join(frozen), fix=fix)


def _lrs(run: Trace) -> list:
    return [
        next((settings["lr"] for _, _, settings in step.values() if settings is not None), None)
        for step in run.steps
    ]


def _schedule_hint(mine: Trace, ref: Trace) -> str | None:
    """Loop B: the learning rate of each step against the correct loop's."""
    got, want = _lrs(mine), _lrs(ref)
    if all(_equal(a, b) for a, b in zip(got, want, strict=True)):
        return None
    n, steps = mine.scheduler_steps, len(mine.steps)
    rates = _("the {steps} steps trained with lr={got}, the correct loop's with {want}").format(
        steps=steps, got=", ".join(map(_fmt, got)), want=", ".join(map(_fmt, want))
    )
    if n is not None and n < steps:
        ran = {0: _("never stepped"), 1: _("stepped once (as if once per epoch)")}.get(
            n, _("stepped {n} times").format(n=n)
        )
        return _(
            "the scheduler your loop was given {ran} in {steps} "
            "optimizer steps, so {rates}: call scheduler.step() "
            "once per window, right after optimizer.step()"
        ).format(ran=ran, steps=steps, rates=rates)
    if all(_equal(a, b) for a, b in zip(got[:-1], want[1:], strict=True)):
        return _(
            "{rates}. Call scheduler.step() once per window, right "
            "after optimizer.step(): a scheduler stepped before "
            "the optimizer lowers the rate one step too early"
        ).format(rates=rates)
    return _("{rates}: call scheduler.step() once per window, right after optimizer.step()").format(
        rates=rates
    )


def _difference(name: str, mine: Trace, ref: Trace) -> str | None:
    """The first thing ``mine`` did differently from the correct loop, or None."""
    if len(mine.steps) != len(ref.steps):
        sizes = ", ".join(map(str, WINDOWS[name]))
        return _(
            "your loop made {n_steps} optimizer step(s); the correct "
            "one makes {n_steps2}, on windows of {sizes} micro-batch(es)"
        ).format(n_steps=len(mine.steps), n_steps2=len(ref.steps), sizes=sizes)
    for m, r in [*zip(mine.steps, ref.steps, strict=True), (mine.final, ref.final)]:
        if _layout(m) != _layout(r):
            return _layout_hint(name, _layout(m), _layout(r))
    if name == "B" and (hint := _schedule_hint(mine, ref)) is not None:
        return hint
    for step, (m, r) in enumerate(zip(mine.steps, ref.steps, strict=True), 1):
        if 1 < step <= len(mine.params):
            now, before = mine.params[step - 1], mine.params[step - 2]
            replaced = [p for p in now if p in before and now[p] is not before[p]]
            if replaced:
                hint = REPLACED_HINTS.get(name, N_("make each layer once, before the loop"))
                return _("{replaced} are new tensors at step {step}: {hint}").format(
                    replaced=", ".join(replaced), step=step, hint=translate(hint)
                )
        missing = [p for p in r if m[p][0] is None and r[p][0] is not None]
        extra = [p for p in r if m[p][0] is not None and r[p][0] is None]
        if missing or extra:
            return (
                _("at step {step}, {missing} had no gradient: they never train").format(
                    step=step, missing=", ".join(missing)
                )
                if missing
                else _("at step {step}, {extra} had a gradient the correct loop's do not").format(
                    step=step, extra=", ".join(extra)
                )
            )
        for param, (_grad, weight, settings) in m.items():
            if not _same_settings(settings, r[param][2]):
                hint = SETTINGS_HINTS.get(name, N_("Keep the optimizer's settings as given"))
                return _(
                    "at step {step}, {param} trained with {settings} where "
                    "the correct loop uses {value}. {hint}"
                ).format(
                    step=step,
                    param=param,
                    settings=_describe(settings, r[param][2]),
                    value=_describe(r[param][2], settings),
                    hint=translate(hint),
                )
            if not _close(weight, r[param][1]) and step == 1:
                hint = START_HINTS.get(name, N_("your loop changed the weights before it"))
                return _(
                    "{param} already differs from the correct loop's at the first step: {hint}"
                ).format(param=param, hint=translate(hint))
            if not _close(weight, r[param][1]):
                return _(
                    "step {value} used the correct gradients and settings, "
                    "yet moved the weights differently: does anything else "
                    "change the weights, or step twice?"
                ).format(value=step - 1)
        if not all(_close(m[p][0], r[p][0]) for p in r):
            return _window_hint(name, step, mine, m, r)
    if not all(_close(mine.final[p], ref.final[p]) for p in ref.final):
        return _("the last step moved the weights differently from the correct loop's")
    return None


def _loop_a_losses(model, optimizer, batches):
    """Loop A as it should be: notebook 05's correct loop, one epoch, its losses as numbers."""
    return train(model, optimizer, batches, epochs=1)


@cache
def _reference_losses() -> tuple[float, ...]:
    """Each micro-batch's loss in the correct loop A (the loop the checker ran: when its
    steps match, so do its losses)."""
    return tuple(trace("A", _loop_a_losses).run.result)


def _result_hint(name: str, mine: object, ref: object) -> str | None:
    """Loop A returns the epoch's mean loss: the repaired loop must too."""
    if ref is None:
        return None
    try:
        value = as_number(mine, _("the result"))
    except AnswerKindError:
        kind = "None" if mine is None else type(mine).__name__
        return _(
            "loop {name} returns the epoch's mean loss, a number; yours returned {kind}"
        ).format(name=name, kind=kind)
    if math.isclose(value, ref, rel_tol=1e-5):
        return None
    losses = _reference_losses()
    n, total = len(losses), sum(losses)
    if math.isclose(value, total, rel_tol=1e-5):
        return _(
            "your loop returns the sum of the losses, {value:.4f}: divide by len(batches)"
        ).format(value=value)
    replaced = _(
        "running_loss = ... replaces the running total in every iteration: add each batch's "
        "loss to it (running_loss += loss.item()), then divide by len(batches)"
    )
    if math.isclose(value, losses[-1], rel_tol=1e-5):
        return _(
            "your loop returns {value:.4f}, the last batch's loss, "
            "not the mean of all {n}, {ref:.4f}: {replaced}"
        ).format(value=value, n=n, ref=ref, replaced=replaced)
    if math.isclose(value, losses[-1] / n, rel_tol=1e-5):
        return _(
            "your loop returns {value:.4f}, the last batch's loss "
            "divided by {n}, not the mean of all {n}, {ref:.4f}: "
            "{replaced}"
        ).format(value=value, n=n, ref=ref, replaced=replaced)
    if value == total // n:
        return _(
            "your loop returns {value:g}, the mean rounded down: "
            "// is floor division, divide with / instead"
        ).format(value=value)
    return _("your loop returns {value:.4f}; the epoch's mean loss is {ref:.4f}").format(
        value=value, ref=ref
    )


def _moved(mine: Trace) -> bool:
    """Whether any parameter the model started with changed."""
    return any(
        param.shape != start.shape or not torch.equal(param.detach(), start)
        for param, start in mine.start
    )


NO_SCALE = N_(
    "your loop never called scaler.scale(loss): backward() must run on the scaled loss, "
    "scaler.scale(loss).backward(), then scaler.unscale_(optimizer), clip, "
    "scaler.step(optimizer) and scaler.update(), once per batch"
)
OPTIMIZER_STEP = N_(
    "optimizer.step() was called instead of scaler.step(optimizer): scaler.step checks the "
    "unscaled gradients for inf/NaN and skips the step when they overflowed, optimizer.step() "
    "writes them into the weights. These batches never overflow, so the weights came out "
    "right here; the first overflow would ruin them"
)


PASSED = {
    "A": N_(
        "the auditor reports nothing, every step used the correct loop's gradients, and "
        "the loop returns the mean loss, {result:.4f}, without keeping any iteration's graph."
    ),
    "B": N_(
        "3 steps on windows of 4, 4 and 2, each the mean of its micro-batches, clipped "
        "once and followed by one scheduler.step(): the correct loop's weights."
    ),
    "D": N_("the new head is in the optimizer and trains: the correct loop's weights."),
    "C": N_(
        "every window is divided by its own length, so the tail gets its whole gradient: "
        "the correct loop's weights. The auditor was silent on loop C; only the gradients "
        "showed what was wrong."
    ),
    "C, one backward": N_(
        "one backward() of each window's mean loss, divided by the window's "
        "own length: every step used the correct loop's gradient, the tail included, and the "
        "auditor's window-length finding only says that each step used 1 backward pass. Note the "
        "cost: the mean loss holds every micro-batch's graph in memory until that backward, so "
        "this is not accumulation, which frees each micro-batch's graph by its own backward()."
    ),
    "E": N_(
        "unscale_ before clipping: every step used a gradient clipped to norm 1 in true "
        "units, the correct loop's weights."
    ),
}


def check_repair(name: str, answer) -> CheckResult:
    """Exercises 06.2 to 06.6: ``answer`` is loop ``name`` ("A" to "E"), repaired."""
    name = loop_name(name)
    return _check_repair(name, answer)


@checker
def _check_repair(name: str, answer) -> CheckResult:
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    if isinstance(answer, str):
        raise AnswerKindError(
            _(
                "pass your repaired loop itself, the function, not "
                "a string: the check calls it as {CALLS}"
            ).format(CALLS=CALLS[name])
        )
    loop = as_function(answer, CALLS[name])
    dropped = _extra_lands_in_a_number(name, loop)
    if dropped is not None:
        return wrong(dropped)
    try:
        problem = _problem(name, loop)
    except LearnerCodeError as error:
        if "optimizer.step" in getattr(error, "scaler_calls", ()):
            return wrong(translate(OPTIMIZER_STEP) + _(" (and then: {error}).").format(error=error))
        raise
    except Exception as error:  # what the loop did to the model or optimizer broke the check
        return wrong(
            _(
                "the check could not follow your loop to the end ({name}: "
                "{error}). Start again from loop {name2} as given, "
                "and change only what is wrong."
            ).format(name=type(error).__name__, error=error, name2=name)
        )
    if problem is ONE_BACKWARD:
        return correct(
            _("Loop {name}: ").format(name=name) + translate(PASSED[f"{name}, one backward"])
        )
    if problem is not None:
        return wrong(problem)
    return correct(
        _("Loop {name}: ").format(name=name)
        + translate(PASSED[name]).format(result=reference_trace(name).run.result)
    )


def _extra_lands_in_a_number(name: str, loop: Callable) -> str | None:
    """A def line that left out the scheduler or scaler, ``loop_b(model, optimizer,
    micro_batches, accumulation_steps=4)``: the check passes it fourth, so it lands in
    ``accumulation_steps`` and the loop fails far from
    the cause (``%`` between an int and a StepLR). Named here instead; None otherwise."""
    extra = CALLS[name].rstrip(")").split(", ")[3:]
    try:
        parameters = list(inspect.signature(loop).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not extra or len(positional) < 4:
        return None
    fourth = positional[3]
    if isinstance(fourth.default, bool) or not isinstance(fourth.default, int | float):
        return None
    given = inspect.signature(LOOPS[name])
    return _(
        "your def line takes {signature}, without the {extra}: "
        "the check passes the {extra} fourth, so it lands in "
        "{name}. Keep the def line as given, {name2}{given}."
    ).format(
        signature=inspect.signature(loop),
        extra=extra[0],
        name=fourth.name,
        name2=LOOPS[name].__name__,
        given=given,
    )


# _problem's verdict on a correct loop C with one backward() per window (not an error).
ONE_BACKWARD = N_("one backward() per window")


def _one_backward_per_window(name: str, mine: Trace, ref: Trace) -> bool:
    """Loop C run with one backward() per step, as many steps as the correct loop: the
    window's loss backpropagated once (the auditor then reports window-length only)."""
    audit = mine.run.auditor
    return (
        name == "C"
        and mine.run.codes == ["window-length"]
        and audit.steps == audit.backward_passes == len(ref.steps)
    )


def _problem(name: str, loop: Callable) -> str | None:
    """What is still wrong with the learner's ``loop`` (a repair of loop ``name``), None, or
    ONE_BACKWARD (loop C right, with one backward() per window)."""
    mine, ref = trace(name, as_learner_loop(loop)), reference_trace(name)
    if unchanged_loop(loop, LOOPS[name]):
        return _as_given(name, mine, ref)
    given = ""
    if not mine.steps:
        return given + (
            _(
                "The optimizer your loop was given never stepped, yet the weights moved: it "
                "trained another optimizer, built inside it. The caller keeps (and the check "
                "audits) the one it passed in: train with that one."
            )
            if _moved(mine)
            else _("No optimizer.step() ran: the loop trained nothing.")
        )
    frozen = _frozen_hint(name, mine, ref)
    if frozen is not None:
        return given + _("{hint}.").format(hint=frozen)
    if name == "E" and "scale" not in mine.scaler_calls:
        return given + _("{hint}.").format(hint=translate(NO_SCALE))
    if _one_backward_per_window(name, mine, ref):
        difference = _difference(name, mine, ref)
        if difference is None:
            return ONE_BACKWARD  # compared by identity: never translated
        return given + _(
            "One backward() per window, on the window's loss, is allowed here (the auditor's "
            "window-length finding then says only that), but {difference}."
        ).format(difference=difference)
    if mine.run.codes:
        findings = [
            _("{code}: {fix}{which}.").format(
                code=code, fix=_fix(name, code), which=_which(code, mine)
            )
            for code in mine.run.codes
        ]
        count = _("{count} findings. ").format(count=len(findings)) if len(findings) > 1 else ""
        return given + _("The auditor still reports {count}{findings}").format(
            count=count, findings=" ".join(findings)
        )
    if "optimizer.step" in mine.scaler_calls:
        return given + _("The auditor reports nothing, but {difference}.").format(
            difference=translate(OPTIMIZER_STEP)
        )
    difference = _difference(name, mine, ref) or _result_hint(name, mine.run.result, ref.run.result)
    if difference:
        return given + _("The auditor reports nothing, but {difference}.").format(
            difference=difference
        )
    return None


def _as_given(name: str, mine: Trace, ref: Trace) -> str:
    """The verdict on loop ``name`` as given: how many problems the auditor finds, never
    which or their fix (finding them is the exercise; :func:`audit_loop` shows the report).
    A loop the auditor is silent on gets the first step whose gradient differs."""
    codes = mine.run.codes
    if len(codes) == 1:
        return _(
            "This is loop {name} as given: the auditor finds 1 problem in it. Find it: "
            "`print(audit_loop({name2}))` prints the auditor's report (after `from "
            "helpers.audit_and_repair.checkers_06 import audit_loop`). Fix it, and check again."
        ).format(name=name, name2=LOOPS[name].__name__)
    if codes:
        return _(
            "This is loop {name} as given: the auditor finds {n} problems in it. Find them: "
            "`print(audit_loop({name2}))` prints the auditor's report (after `from "
            "helpers.audit_and_repair.checkers_06 import audit_loop`). Fix them, and check "
            "again."
        ).format(name=name, n=len(codes), name2=LOOPS[name].__name__)
    for step, (m, r) in enumerate(zip(mine.steps, ref.steps, strict=False), 1):
        if not all(_close(m[p][0], r[p][0]) for p in r):
            return _(
                "This is loop {name} as given: the auditor finds nothing "
                "in it, yet step {step} used a gradient of norm {m:.4g}, "
                "the correct loop's {r:.4g}. Find why, fix it, and "
                "check again."
            ).format(name=name, step=step, m=_norm(m), r=_norm(r))
    return _("This is loop {name} as given: it differs from the correct loop. Repair it.").format(
        name=name
    )


def audit_loop(loop: Callable, name: str | None = None):
    """Run ``loop`` (one of notebook 06's loops to repair, as given or changed) the way its
    checker does, under the loop auditor, and return the auditor: ``print(audit_loop(loop_b))``
    shows its findings. ``name`` ("A" to "E") defaults to the letter in ``loop_b``."""
    if not callable(loop):
        raise TypeError(_("pass the loop itself, the function: audit_loop(loop_b)"))
    if name is None:
        letter = getattr(loop, "__name__", "").removeprefix("loop_")
        if letter.upper() not in LOOPS:
            raise ValueError(
                _("say which loop this is: audit_loop(my_loop, 'B') for a repair of loop B")
            )
        name = letter
    name = loop_name(name)
    return trace(name, as_learner_loop(loop)).run.auditor


def check_repair_a(answer) -> CheckResult:
    """Exercise 06.2: loop A, repaired."""
    return check_repair("A", answer)


def check_repair_b(answer) -> CheckResult:
    """Exercise 06.3: loop B, repaired."""
    return check_repair("B", answer)


def check_repair_c(answer) -> CheckResult:
    """Exercise 06.4: loop C, repaired."""
    return check_repair("C", answer)


def check_repair_d(answer) -> CheckResult:
    """Exercise 06.5 (optional): loop D, repaired."""
    return check_repair("D", answer)


def check_repair_e(answer) -> CheckResult:
    """Exercise 06.6 (optional): loop E, repaired."""
    return check_repair("E", answer)


# ---------------------------------------------------------------- exercise 06.1, a prediction
# Which rule ids does the loop auditor report for a loop the notebook has not run? The answer
# is not typed: reported_codes() runs the auditor on notebook 05's accumulate_clipping, the loop
# the exercise cell shows (tests/pitfalls/test_pitfalls.py checks that the cell defines it as kept
# here).

PREDICTION_LOOP = accumulate_clipping
# the exercise text says: 10 micro-batches, accumulation_steps=4
PREDICTION_BATCHES, PREDICTION_K = 10, 4


@cache
def reported_codes() -> tuple[str, ...]:
    """The rule ids the auditor reports when it watches the exercise's loop, in its order."""
    batches = make_teacher_batches(n_batches=12, batch_size=8, features=8)[:PREDICTION_BATCHES]
    return tuple(audited_run(PREDICTION_LOOP, batches, accumulation_steps=PREDICTION_K).codes)


# The numbers the texts below name, filled in where they are shown (in the learner's language).
PREDICTION_VALUES = {
    "batches": PREDICTION_BATCHES,
    "k": PREDICTION_K,
    "tail": PREDICTION_BATCHES % PREDICTION_K,
}

# A rule id the answer leaves out: what in the loop breaks it (the id itself is not named,
# so that the learner reads the table of rules again). English templates: see PREDICTION_MISSING.
PREDICTION_MISSING_TEMPLATES = {
    "clip-per-micro-batch": N_(
        "clip_grad_norm_ sits in the loop over micro-batches, so it runs "
        "after every backward(), also after those that no step() follows: the auditor sees each "
        "clip and whether a step() comes right after it."
    ),
    "leftover-gradients": N_(
        "{batches} micro-batches in windows of {k} leave a tail of {tail} whose backward passes "
        "no step() follows: the auditor checks what .grad holds when the loop ends."
    ),
}

# The question each missing rule opens with, on the first wrong answer alone.
MISSING_QUESTIONS = {
    "clip-per-micro-batch": N_(
        "When does clip_grad_norm_ run: once per window, or after every backward()?"
    ),
    "leftover-gradients": N_(
        "What happens to the gradients of the micro-batches after the last step()?"
    ),
}

# A real rule id the auditor does not report for this loop: why.
NOT_REPORTED_TEMPLATES = {
    "window-length": N_(
        "every step() uses exactly {k} backward passes: the tail never reaches a step, so no "
        "step has the wrong count. And a loss not divided by k changes the gradients' size, not "
        "the count; the auditor cannot see how a loss was scaled (section 2)."
    ),
    "missing-zero-grad": N_(
        "zero_grad() runs right after every step(), so no step reuses the "
        "gradients an earlier step used."
    ),
    "zero-grad-before-step": N_(
        "zero_grad() runs only right after step(), never between a "
        "backward() and the step() that uses it."
    ),
    "step-without-grad": N_("every step() comes after {k} backward() calls, so it has gradients."),
    "cross-network-leak": N_(
        "there is one network and one optimizer: no other network's loss reaches these parameters."
    ),
    "scheduler-per-micro-batch": N_("this loop has no scheduler."),
    "unscale-after-clip": N_("this loop uses no GradScaler and never clips."),
    "graph-kept-alive": N_("the loop keeps no loss: each one is dropped after its backward()."),
    "params-not-in-optimizer": N_(
        "the loop changes no layer: every parameter that gets a gradient is in the optimizer."
    ),
}


def _prediction_text(templates: dict[str, str], code: str, default: str) -> str:
    """The text of ``code`` in ``templates``, translated, its numbers filled in."""
    return translate(templates.get(code, default)).format(**PREDICTION_VALUES)


# The texts in English, as the checker shows them without GM_LANG.
PREDICTION_MISSING = {
    code: text.format(**PREDICTION_VALUES) for code, text in PREDICTION_MISSING_TEMPLATES.items()
}
NOT_REPORTED = {
    code: text.format(**PREDICTION_VALUES) for code, text in NOT_REPORTED_TEMPLATES.items()
}

UNSEEN = N_(
    "The loop's other bug, losses not divided by k (each step k times too large), has no rule: "
    "the auditor watches the order of the calls and what .grad holds, not how a loss was "
    "scaled (section 2)."
)


EMPTY = ("", "none", "nothing")  # written for the empty set


def _and(names: list[str]) -> str:
    """['a', 'b', 'c'] -> 'a, b and c', in the language of the messages."""
    if len(names) < 2:
        return "".join(names)
    return _("{names} and {last}").format(names=", ".join(names[:-1]), last=names[-1])


def _names(answer: object) -> set[str]:
    """The rule ids in ``answer``, however written: any letter case, with or without
    backticks, quotes or braces, underscores for hyphens; "none" or {} for the empty set."""
    if isinstance(answer, dict) and not answer:
        answer = set()  # {} is an empty dict, meant as the empty set
    if isinstance(answer, str):
        answer = answer.translate(str.maketrans("`'\"{}[]()", " " * 9))
    given = as_names(answer, '{"missing-zero-grad", "window-length"}', names=CODES)
    cleaned = {name.strip("`'\" ").replace("_", "-") for name in given}
    spelled = {code.lower(): code for code in CODES}
    return {spelled.get(name.lower(), name) for name in cleaned if name.lower() not in EMPTY}


@checker
def check_auditor_findings(answer: object) -> CheckResult:
    """Exercise 06.1: the set of rule ids the auditor reports for ``accumulate_clipping`` on
    10 micro-batches with accumulation_steps=4 (computed by running it)."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    given = _names(answer)
    expected = set(reported_codes())
    unknown = sorted(given - set(CODES))
    if unknown:
        return wrong(
            _(
                "{unknown}: not a rule id of the auditor. Its rules "
                "are {CODES}. There is no rule for how a loss was scaled: "
                "the auditor cannot see it (section 2)."
            ).format(unknown=", ".join(unknown), CODES=", ".join(CODES))
        )
    if not given:
        return wrong(
            _(
                "An empty set says the auditor finds nothing. It cannot see that the losses are "
                "not divided by k, but it does see when clip_grad_norm_, step() and zero_grad() "
                "run, and what .grad holds when the loop ends. Look at each against the table of "
                "rules in section 1."
            )
        )
    if given == expected:
        return correct(
            _(
                "the auditor reports {names}. {UNSEEN} Repair the two "
                "it reports and it falls silent on a loop that is still "
                "wrong."
            ).format(names=_and(reported_codes()), UNSEEN=translate(UNSEEN))
        )
    hints = [
        _("Does this loop break {code}? {code} is not reported: {get}").format(
            code=code,
            get=_prediction_text(NOT_REPORTED_TEMPLATES, code, N_("this loop does not break it.")),
        )
        for code in CODES
        if code in given - expected
    ]
    hints += [
        _("{question} A rule is missing: {get}").format(
            question=translate(MISSING_QUESTIONS.get(code, N_("Is a rule missing?"))),
            get=_prediction_text(
                PREDICTION_MISSING_TEMPLATES, code, N_("the auditor reports one more rule.")
            ),
        )
        for code in reported_codes()
        if code in expected - given
    ]
    return wrong(ask_first(" ".join(hints)))


check_undivided_prediction = choice_checker(
    {"a": "a finding for the missing division", "b": "no finding"},
    "b",
    why=N_(
        "the auditor sees which backward passes wrote `.grad` and when step() ran, not what "
        "the losses were divided by: the undivided loop calls them all in the right order."
    ),
    misconceptions={
        "a": N_(
            "Can the auditor see how a loss was scaled? It judges a gradient by which backward "
            "passes wrote it, never by its value: a loss divided by 4 or not looks the same."
        ),
    },
    reveal="the auditor's findings on the undivided loop == []",
    doc="Section 2's prediction: what the auditor reports for a loop that does not divide.",
)
