"""Checkers for notebook 07, accumulation at scale (its hints on GradScaler and loop-auditor
findings are shared with notebook 09's capstone, :mod:`helpers.capstone.checkers_09`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch
from torch.nn import functional as F

from helpers import learner_code
from helpers.at_scale.amp_and_clipping import train_accumulating
from helpers.at_scale.amp_parsons import check_amp_order as check_amp_order
from helpers.audit import LoopAuditor
from helpers.checks import (
    NONE_IN_AN_AMP_WINDOW,
    NOT_ANSWERED,
    CheckResult,
    LearnerCodeError,
    as_function,
    ask_first,
    call_learner,
    checker,
    correct,
    is_unanswered,
    number_checker,
    wrong,
)
from helpers.models import flat_weights
from helpers.predictions import choice_checker
from helpers.spies import ClipSpy, ScalerSpy
from helpers.trace_tables import Call, trace_checker
from helpers.translation import N_, _, translate

# Exercise 07.1: the run's 2 buckets, k = 8, every forward outside no_sync() and the first 7
# backward passes inside it. tests/at_scale/test_at_scale.py runs it: 16 all-reduces per step.
ALLREDUCE_BUCKETS, ALLREDUCE_K = 2, 8
check_allreduces = number_checker(
    ALLREDUCE_BUCKETS * ALLREDUCE_K,
    {
        2: N_(
            "2 is one all-reduce per bucket, what no_sync() gives when the forward runs "
            "inside it too. Here every forward runs outside no_sync(): DDP prepares the "
            "all-reduce in forward(), so every backward synchronizes."
        ),
        8: N_(
            "8 is one all-reduce per micro-batch (or section 1's count for k = 4): each "
            "synchronized backward all-reduces each of the 2 buckets, and there are 8 of them."
        ),
        14: N_(
            "14 counts only the 7 backward passes inside no_sync() (7 x 2 buckets): the "
            "last one synchronizes too, as it would anyway."
        ),
        7: N_(
            "7 counts one all-reduce for each backward inside no_sync(): all 8 backward passes "
            "synchronize, each bucket by bucket (2 buckets)."
        ),
        32: N_(
            "32 counts the forward passes as all-reduces too: the forward only prepares the "
            "all-reduce, which runs during backward, once per bucket."
        ),
        1: N_(
            "1 would be one synchronized backward with one bucket: DDP all-reduces bucket by "
            "bucket (2 here), and a forward outside no_sync() makes every backward synchronize."
        ),
    },
    N_(
        "A forward pass outside no_sync() makes its backward synchronize, even inside "
        "no_sync(): 8 synchronized backward passes, each all-reducing each of the 2 buckets."
    ),
    questions={
        2: N_("Does no_sync() skip the all-reduce when the forward ran outside it?"),
        8: N_("How many buckets does each synchronized backward all-reduce?"),
        14: N_("Does the last backward synchronize too?"),
        7: N_("How many backward passes synchronize, and how many buckets each?"),
        32: N_("Does a forward pass all-reduce anything?"),
        1: N_("How many buckets, and how many synchronized backward passes?"),
        None: N_("Which backward passes synchronize when every forward runs outside no_sync()?"),
    },
    why=N_(
        "a forward outside no_sync() makes its backward synchronize: 8 backward passes × 2 buckets."
    ),
    doc="Exercise 07.1: the run's 2 buckets, k = 8, every forward outside no_sync() and the "
    "first 7 backward passes inside it: 16 all-reduces per optimizer step.",
)

check_trainer_window_loss = number_checker(
    2.5,
    {
        3.0: N_(
            "3.0 is the mean of the two means, the Trainer's loss before the fix: every "
            "micro-batch weighs the same, whatever its number of tokens."
        ),
        6.0: N_("6.0 adds the two means: the window's loss is divided by its 40 tokens."),
        100.0: N_("100 is the sum of the token losses; divide it by num_items_in_batch = 40."),
        50.0: N_(
            "50 divides the window's summed token loss (100) by its 2 micro-batches: "
            "num_items_in_batch counts tokens, 40 of them."
        ),
        1.5: N_(
            "1.5 is only the first micro-batch's share (2.0 x 30 / 40): add the second "
            "one's, 4.0 x 10 / 40."
        ),
        3.5: N_(
            "3.5 swaps the weights: the micro-batch with 30 tokens has the mean 2.0, the "
            "one with 10 tokens 4.0."
        ),
    },
    N_(
        "Sum all token losses of the window (2.0 x 30 + 4.0 x 10), then divide by all "
        "its tokens (40)."
    ),
    questions={
        3.0: N_("Does each micro-batch weigh the same, whatever its tokens?"),
        6.0: N_("What is the window's summed loss divided by?"),
        100.0: N_("What is the window's summed loss divided by?"),
        50.0: N_("Does num_items_in_batch count micro-batches or tokens?"),
        1.5: N_("Is that one micro-batch's share, or the window's loss?"),
        3.5: N_("Which micro-batch holds 30 tokens?"),
        None: N_("What are the window's summed token loss and its token count?"),
    },
    why=N_("the window's summed token loss, 2.0 × 30 + 4.0 × 10 = 100, over its 40 tokens."),
    doc="Exercise 07.3 (optional): two micro-batches with 30 and 10 counted tokens and mean token "
    "losses 2.0 and 4.0; with num_items_in_batch the window's loss is (2*30 + 4*10) / 40.",
)


AMP_CALL = "amp_window(model, optimizer, scaler, window)"


FULL_WINDOW_SAMPLES = 24  # exercise 07.2's full windows hold 24 samples; its last one 12


def amp_setup():
    """A model, its optimizer and scaler, and four windows: three of 3 micro-batches (24
    samples each), then a short last one of 2 (12 samples). The first has large gradients
    (clipping acts); the second a micro-batch whose targets are infinite (its gradients
    overflow: the scaler skips the step and halves the scale); the third small gradients and
    micro-batches of 12, 8 and 4 samples (the weighting by samples shows); the last, micro-
    batches of 8 and 4 (a window divided by a full window's 24 samples shows)."""
    from helpers.data import make_teacher_batches
    from helpers.models import make_mlp

    model = make_mlp((8, 32, 1), seed=4)
    batches = make_teacher_batches(n_batches=9, batch_size=8, seed=4)
    overflow = [batches[3], (batches[4][0], torch.full_like(batches[4][1], float("inf")))]
    inputs, targets = (torch.cat(part) for part in zip(*batches[6:], strict=True))
    uneven = list(zip(inputs.split([12, 8, 4]), (0.02 * targets).split([12, 8, 4]), strict=True))
    (x, y), (x2, y2) = make_teacher_batches(n_batches=2, batch_size=8, seed=5)
    tail = [(x, 0.02 * y), (x2[:4], 0.02 * y2[:4])]
    windows = [batches[:3], [*overflow, batches[5]], uneven, tail]
    samples = [sum(len(y) for _, y in w) for w in windows]
    assert samples == [FULL_WINDOW_SAMPLES] * 3 + [12], samples
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    return model, optimizer, torch.amp.GradScaler("cpu", init_scale=2.0**12), windows


# The loop auditor's findings, as the hint each exercise gives (any other code: its message).
FINDING_HINTS = {
    "unscale-after-clip": N_(
        "is the gradient still scaled when you clip it? The gradients were clipped while "
        "still scaled: call "
        "scaler.unscale_(optimizer) before clip_grad_norm_."
    ),
    "clip-per-micro-batch": N_(
        "how many times per window do you clip? Clip once, after the window's last "
        "backward(), not after each."
    ),
    "step-without-grad": N_("no backward() reached the model before the step."),
    "zero-grad-before-step": N_(
        "what does .grad hold when the step runs? zero_grad() is misplaced: the gradients "
        "were reset between the window's backward() and its step(). Call it at the start of "
        "the window (or after the step)."
    ),
    "leftover-gradients": N_(
        "the window's gradients were never stepped: call scaler.step(optimizer)."
    ),
    "missing-zero-grad": N_(
        "does each window start from empty grads? zero_grad() is missing or misplaced: the "
        "next window added to the last one's gradients. Call optimizer.zero_grad() at the "
        "start of each window (or after the step)."
    ),
    "scheduler-per-micro-batch": N_(
        "does the schedule count micro-batches or optimizer steps? scheduler.step() ran in the "
        "micro-batch loop: step it once "
        "per window, after the optimizer's step."
    ),
    "window-length": N_(
        "the backward passes and the steps do not line up: call "
        "scaler.scale(loss).backward() once per micro-batch, and step once per window, after its "
        "last backward()."
    ),
}
CLIP_PER_MICRO_BATCH = N_(
    "how many times per window do you clip? The gradients were clipped after each "
    "micro-batch: clip once per window, after its last "
    "backward() and scaler.unscale_(optimizer)."
)
MISSING_STEP = N_(
    "scaler.step(optimizer) never ran: the window's gradients were never stepped (the "
    "weights did not move). Once per window: scaler.unscale_(optimizer), clip, "
    "scaler.step(optimizer), then scaler.update()."
)
DOUBLE_UNSCALE = N_(
    "scaler.unscale_(optimizer) ran twice in one window (torch: 'unscale_() has already been "
    "called on this optimizer since the last update()'): unscale once per window, after its "
    "last backward(), then clip, step and update."
)

OPTIMIZER_STEP = N_(
    "which step skips a window that overflowed? optimizer.step() was called instead of "
    "scaler.step(optimizer): scaler.step skips a "
    "window whose gradients overflowed (inf/NaN), optimizer.step() writes them into the weights."
)


def scaler_error_hint(text: str, calls: list[str]) -> str:
    """A hint for an exception (its message ``text``) raised by the GradScaler, from the
    scaler calls that led to it (:class:`helpers.spies.ScalerSpy`, the failing call
    last); else ``text`` itself."""
    failing = calls[-1] if calls else ""
    before = calls[:-1]
    last_update = max((i for i, call in enumerate(before) if call == "update"), default=-1)
    since = before[last_update + 1 :]  # this window's calls before the failing one
    update_then_step = any(pair == ("update", "step") for pair in itertools.pairwise(before))
    unscaled_twice = (
        "unscale_() has already been called",
        "unscale_() is being called after",
    )
    if any(fragment in text for fragment in unscaled_twice):
        if failing == "unscale_" and "unscale_" in since and "step" not in since:
            # the scaler was never stepped in between: unscaled twice
            return translate(DOUBLE_UNSCALE)
        if "update" not in calls:
            return _(
                "scaler.update() is missing: call it once per window, "
                "after scaler.step(optimizer). Without it the scale "
                "never changes, and the next window's unscale_ fails "
                "({split})."
            ).format(split=text.split(": ", 1)[-1].split(".")[0])
        if update_then_step:
            return _(
                "scaler.update() ran before scaler.step(optimizer): step first, then update, "
                "once per window (else the next window's unscale_ fails)."
            )
        return text
    if "step() has already been called since the last update()" in text and "update" not in calls:
        return _(
            "scaler.update() is missing: call it once per window, after scaler.step(optimizer) "
            "(without it the next window's step fails)."
        )
    if "No inf checks were recorded" in text:
        if failing == "update" and before and not since:
            return _(
                "scaler.update() ran twice in a row ('No inf checks were recorded' for the "
                "second): update once per window, right after scaler.step(optimizer)."
            )
        if "optimizer.step" in since:
            return translate(OPTIMIZER_STEP) + _(" (update() then finds no inf check to use.)")
        if failing == "step":
            return _(
                "scaler.step found no gradients to check: zero_grad() is misplaced, it reset "
                "the window's gradients before the step. Call it at the start of the window "
                "(or after the step)."
            )
        if "unscale_" in since:
            return _(
                "scaler.update() ran before scaler.step(optimizer) ('No inf checks were "
                "recorded'): step first, then update, once per window."
            )
        return _(
            "scaler.update() ran after a micro-batch, with no scaler.step(optimizer) before "
            "it ('No inf checks were recorded'): update once per window, after the step."
        )
    return text


def calls_hint(calls: list[str], windows: int) -> str | None:
    """A root cause seen in the scaler calls (:class:`helpers.spies.ScalerSpy`) over
    ``windows`` windows, which the loop auditor's findings would only show as symptoms (no
    step: gradients clipped and never stepped; a step per micro-batch: a missing zero_grad
    and windows of 1); or None."""
    steps = calls.count("step") + calls.count("optimizer.step")
    if "scale" in calls and steps == 0:
        return translate(MISSING_STEP)
    if steps > windows:
        every = (
            _("every micro-batch")
            if steps >= calls.count("scale")
            else _("more than once a window")
        )
        return _(
            "the optimizer stepped {steps} times for {windows} "
            "windows, {every}. In the micro-batch loop only scale "
            "the loss and call backward(); after it, once per window: "
            "unscale_, clip, scaler.step(optimizer), scaler.update()."
        ).format(steps=steps, windows=windows, every=every)
    return None


def finding_hint(
    findings, calls: list[str] | None = None, windows: int = 0, hints=None, scaler: bool = True
):
    """The hint for the loop auditor's ``findings`` (:class:`Finding` objects or
    ``(code, message)`` pairs), ordered by root cause: first what the scaler ``calls`` over
    ``windows`` windows show (:func:`calls_hint`), then a window never stepped when some
    step was missing (its pending clip also reads as clipping per micro-batch), then clipping
    per micro-batch (with a scaler it is also clipping before unscale_), then the first
    finding, from ``hints`` (default :data:`FINDING_HINTS`). None when there are none.
    Without a ``scaler`` in the loop, clipping per micro-batch gets the hint that does not
    name one."""
    pairs = [(f.code, f.message) if hasattr(f, "code") else tuple(f) for f in findings]
    if not pairs:
        return None
    hints = {**FINDING_HINTS, **(hints or {})}
    codes = [code for code, _ in pairs]
    if calls is not None:
        root = calls_hint(calls, windows)
        if root is not None:
            return root
        steps = calls.count("step") + calls.count("optimizer.step")
        if "leftover-gradients" in codes and steps < windows:
            return translate(hints["leftover-gradients"])
    if "clip-per-micro-batch" in codes:
        return translate(CLIP_PER_MICRO_BATCH if scaler else hints["clip-per-micro-batch"])
    code, message = pairs[0]
    return translate(hints[code]) if code in hints else f"{code}: {message}"


def _placeholder_left(function: Callable) -> bool:
    try:
        return learner_code.has_placeholder(learner_code.function_source(function))
    except ValueError:
        return False


AMP_RTOL, AMP_ATOL = 1e-5, 1e-6  # measured: correct variants differ by < 1e-7 (README)
AMP_MAX_NORM = 1.0
AMP_MISTAKES = {
    "micro-batch count": N_(
        "do the window's micro-batches hold the same number of samples? Each micro-batch's "
        "mean loss was divided by the number of "
        "micro-batches (len(window)): the third window's micro-batches hold 12, 8 and 4 samples, "
        "and that gives the 4 samples of the last as much weight as the 12 of the first. Weight "
        "each by its share of the window's samples: F.mse_loss(...) * len(targets) / samples, "
        "with samples the window's total."
    ),
    "full-window samples": N_(
        "does every window hold 24 samples? Each micro-batch's loss was divided by a full "
        "window's 24 samples: the last window "
        "holds 12. Weight each micro-batch by its share of its own window's samples, "
        "len(targets) / samples, with samples = sum(len(targets) for _, targets in window)."
    ),
    "no division": N_(
        "is the window's gradient the sum or the mean of its micro-batches'? Each "
        "micro-batch's loss must be weighted by its share of the window's "
        "samples (len(targets) / samples, the window's total): without it the window's gradient "
        "is the sum, not the mean, of its micro-batches' gradients."
    ),
    "float16": N_(
        "which 16-bit type does the CPU's autocast use? The weights are close to the course's, "
        "but rounded otherwise: your autocast ran in float16. On the CPU the exercise asks for "
        "bfloat16, the CPU's autocast type: "
        'torch.autocast("cpu", dtype=torch.bfloat16).'
    ),
    "no clip": N_(
        "where is the window's gradient clipped? The accumulated gradient was not clipped: "
        "after scaler.unscale_(optimizer), nn.utils.clip_grad_norm_(model.parameters(), 1.0), "
        "once per window."
    ),
}


def _amp_reference(windows, mistake: str | None = None):
    """The course's windows (``train_accumulating``) on a fresh copy of the setting: the
    weights (and the scaler, without ``mistake``), or the weights with one of
    :data:`AMP_MISTAKES`."""
    model, optimizer, scaler, _ = amp_setup()
    k = len(windows[0])
    window_of = iter([w for w in windows for _ in w])  # loss_fn runs once per micro-batch

    def loss_fn(outputs, targets):  # train_accumulating weights it by len(targets) / samples
        mean = F.mse_loss(outputs, targets)
        window = next(window_of)
        weights = {
            "micro-batch count": 1 / len(window),
            "full-window samples": len(targets) / FULL_WINDOW_SAMPLES,
            "no division": 1.0,
        }
        if mistake not in weights:
            return mean
        samples = sum(len(y) for _, y in window)
        return mean * weights[mistake] * samples / len(targets)

    train_accumulating(
        model, optimizer, [b for w in windows for b in w], k, loss_fn=loss_fn,
        amp_dtype=torch.float16 if mistake == "float16" else torch.bfloat16, scaler=scaler,
        max_norm=None if mistake == "no clip" else 1.0,
    )  # fmt: skip
    return flat_weights(model) if mistake else (flat_weights(model), scaler)


@checker
def check_amp_window(amp_window: object) -> CheckResult:
    """Exercise 07.2: ``amp_window(model, optimizer, scaler, window)`` runs one accumulation
    window with a GradScaler (bfloat16 autocast on the CPU, MSE loss, clipping to norm 1.0).
    Over four windows (the second one overflows, the last one is short) it must match the course's
    ``train_accumulating``, with no finding from the loop auditor (but for one backward per
    window, on the summed loss: judged by its weights alone). Hints name the root cause
    (from the scaler's calls) before the auditor's findings."""
    if is_unanswered(amp_window):
        return wrong(NOT_ANSWERED)
    amp_window = as_function(amp_window, AMP_CALL)
    if _placeholder_left(amp_window):
        return wrong(_("your function still has `...` in it: replace each one with code."))
    model, optimizer, scaler, windows = amp_setup()
    reference, ref_scaler = _amp_reference(windows)
    start = flat_weights(model)
    spy = ScalerSpy(scaler, optimizer)
    backwards = []  # the backward passes that reached the model, in each window

    def count_backward(_parameter):
        backwards[-1] += 1

    next(model.parameters()).register_post_accumulate_grad_hook(count_backward)
    try:
        with (
            ClipSpy() as clips,
            LoopAuditor(model, optimizer, accumulation_steps=3, scaler=scaler) as audit,
        ):
            for window in windows:
                backwards.append(0)
                call_learner(
                    amp_window, model, optimizer, scaler, window, meanings=NONE_IN_AN_AMP_WINDOW
                )
    except LearnerCodeError as error:
        return wrong(scaler_error_hint(str(error), spy.calls))
    got, expected = flat_weights(model), reference
    summed = (  # one backward on the window's summed loss: the auditor sees windows of 1
        {finding.code for finding in audit.findings} == {"window-length"}
        and backwards == [1] * len(windows)
        and spy.calls.count("step") == spy.calls.count("update") == len(windows)
    )
    if summed:
        return _judge_summed(got, expected, start)
    hint = finding_hint(audit.findings, spy.calls, len(windows))
    if hint is not None:
        return wrong(ask_first(hint))
    if "optimizer.step" in spy.calls or not torch.isfinite(got).all():
        return wrong(ask_first(translate(OPTIMIZER_STEP)))
    if torch.equal(got, start):
        return wrong(_("the weights did not move: did scaler.step(optimizer) run?"))
    if spy.calls.count("update") != len(windows):
        return wrong(
            _(
                "scaler.update() ran {count} times over {n_windows} "
                "windows: once per window, after scaler.step(optimizer)."
            ).format(count=spy.calls.count("update"), n_windows=len(windows))
        )
    if not torch.allclose(got, expected, rtol=AMP_RTOL, atol=AMP_ATOL):
        norms = sorted({n for n in clips.norms if n != AMP_MAX_NORM and not math.isinf(n)})
        if norms:
            return wrong(
                _(
                    "the gradient was clipped at max_norm={norms}: clip "
                    "the unscaled gradient to max_norm={AMP_MAX_NORM}, "
                    "once per window."
                ).format(norms=norms[0], AMP_MAX_NORM=AMP_MAX_NORM)
            )
        for mistake, hint in AMP_MISTAKES.items():
            if torch.allclose(got, _amp_reference(windows, mistake), rtol=1e-4, atol=1e-5):
                if mistake == "no clip" and clips.norms:
                    hint = _(
                        "where does the clip sit? clip_grad_norm_ ran, but its clipping did not "
                        "reach the step: clip after scaler.unscale_(optimizer) and before "
                        "scaler.step(optimizer)."
                    )
                return wrong(ask_first(translate(hint)))
        moved, should = (got - start).norm().item(), (expected - start).norm().item()
        return wrong(
            _(
                "the weights moved by {moved:.4g}, the course's windows "
                "by {should:.4g}: scale each micro-batch loss (weighted "
                "by its share of the window's samples), unscale_ once, "
                "clip to 1.0, step and update once."
            ).format(moved=moved, should=should)
        )
    if scaler.get_scale() != ref_scaler.get_scale():
        return wrong(_("the scale changed differently: call scaler.update() exactly once."))
    return correct(
        _(
            "one scale per window, unscaled once, clipped once, one step and update; the "
            "overflowing window was skipped and the scale halved."
        )
    )


def _judge_summed(got: torch.Tensor, expected: torch.Tensor, start: torch.Tensor) -> CheckResult:
    """The verdict on a window with one backward() (on the window's summed loss, or only on
    its last micro-batch's)."""
    if torch.allclose(got, expected, rtol=AMP_RTOL, atol=AMP_ATOL):
        return correct(
            _(
                "one backward() of the window's summed loss: its gradient is right (each forward "
                "in its own autocast block), and the overflowing window was skipped. But it holds "
                "every micro-batch's graph in memory until that backward, which is not "
                "accumulation: a backward per micro-batch frees each graph as it goes."
            )
        )
    off = ((got - expected).norm() / (expected - start).norm()).item()
    return wrong(
        _(
            "one backward() per window, and the weights are {off:.2%} "
            "(of the distance they moved) away from the course's: "
            "backward once per micro-batch, scaler.scale(loss).backward() "
            "inside the loop, so that each micro-batch's gradient "
            "adds up in the float32 .grad. A backward after the "
            "loop sees only the last micro-batch's loss; on the "
            "window's summed loss, forwards that share one autocast "
            "block add their gradients in bfloat16 (autocast's cached "
            "bfloat16 copies of the weights)."
        ).format(off=off)
    )


check_no_sync_prediction = choice_checker(
    {
        "a": "2, one per bucket",
        "b": "4, one per micro-batch",
        "c": "8, one per bucket and micro-batch",
    },
    "a",
    why=N_(
        "inside no_sync() the first 3 backward passes only add up locally; the last one "
        "all-reduces each of the 2 buckets once."
    ),
    misconceptions={
        "b": N_(
            "Does DDP all-reduce the whole model at once? It all-reduces bucket by bucket, and "
            "with no_sync() only in the window's last backward: 2 buckets, 2 all-reduces."
        ),
        "c": N_(
            "Does no_sync() still synchronize every micro-batch? It skips the all-reduce on "
            "the first 3; only the last backward all-reduces each of the 2 buckets."
        ),
    },
    reveal="no_sync                    2 all-reduces",
    doc="Section 1's prediction: the all-reduces of one optimizer step with no_sync().",
)


check_unscale_count = choice_checker(
    {
        "a": "4, once per micro-batch",
        "b": "1, after the last backward",
        "c": "0: scaler.step() unscales",
    },
    "b",
    why=N_(
        "the micro-batches' scaled gradients add up in .grad at one scale, so one unscale_() "
        "of the sum, before the clip, is enough."
    ),
    misconceptions={
        "a": N_(
            "Does each micro-batch's gradient need unscaling on its own? They add up in .grad "
            "at the same scale: one unscale_() of the sum is enough, and a second one before "
            "update() raises an error."
        ),
        "c": N_(
            "Could clip_grad_norm_() then run on scaled gradients? It would clip numbers "
            "65,536 times too large: the window calls unscale_() itself, once, before the clip."
        ),
    },
    reveal="once per window: unscale_, clip, step, update, scheduler",
    doc="Section 2's prediction: how often an AMP window calls scaler.unscale_().",
)

check_overflow_window = choice_checker(
    {
        "a": "it steps on the other three micro-batches' gradients",
        "b": "it skips the whole window's step",
        "c": "it steps with the inf gradient",
    },
    "b",
    why=N_(
        "by the step the window's gradients are one sum in .grad: an inf in it makes the sum "
        "inf, so scaler.step skips the step, and update() halves the scale."
    ),
    misconceptions={
        "a": N_(
            "Can the scaler take one micro-batch back out of .grad? By the step the four "
            "gradients are one sum, and an inf makes the whole sum inf: the step is skipped."
        ),
        "c": N_(
            "Does the scaler let an inf reach the weights? It checks the gradients for inf "
            "and NaN when it unscales, and skips the step when it finds one."
        ),
    },
    reveal="weights unchanged: the overflow skipped the whole window",
    doc="Section 2's prediction: what an overflow in one micro-batch does to the window.",
)


check_amp_trace = trace_checker(
    1.0,
    torch.optim.SGD,
    [
        Call("backward", lambda w: 3 * w / 2),
        Call("backward", lambda w: w / 2),
        Call("unscale_"),
        Call("clip", max_norm=1.0),
        Call("step"),
        Call("zero_grad"),
    ],
    lr=0.5,
    scale=1024.0,
    doc="""Section 3's trace: an AMP window of 2 micro-batches (losses 3w and w, each divided
    by 2) through a GradScaler of scale 1024, then unscale_, a clip to 1.0, the step (with
    update) and zero_grad, plain SGD at lr = 0.5 from w = 1; a row (w, w.grad) per call.""",
)
