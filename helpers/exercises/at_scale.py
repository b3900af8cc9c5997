"""Checkers for notebook 06, accumulation at scale."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable

import torch
from torch.nn import functional as F

from helpers import capstone
from helpers.at_scale import train_accumulating
from helpers.audit import LoopAuditor
from helpers.checks import (
    NOT_ANSWERED,
    CheckResult,
    LearnerCodeError,
    as_function,
    call_learner,
    checker,
    correct,
    is_unanswered,
    number_checker,
    wrong,
)
from helpers.models import flat_weights
from helpers.spies import ClipSpy, ScalerSpy

check_effective_batch = number_checker(
    8 * 16 * 4,
    {
        64: "64 is 16 x 4: one process's window, or the belief that DDP splits each "
        "micro-batch of 16 across the 8 processes. It does not: each process draws its own "
        "micro-batches of 16, and all 8 processes' windows go into each step.",
        128: "128 is 16 x 8, one micro-batch from every process: each of them also "
        "accumulates k = 4 micro-batches before the step.",
        32: "32 is 8 x 4, processes x k: the micro-batch size matters too, each micro-batch "
        "holds 16 samples.",
        16: "16 is one micro-batch on one process; a step sees every process's window.",
        2: "2 is 16 / 8, the micro-batch split across the processes: DDP does not split a "
        "micro-batch, each process has 16 samples per micro-batch.",
        8: "8 is 16 x 4 / 8, one window shared by the 8 processes: they do not share it, "
        "each process accumulates its own 4 micro-batches of 16, and the step averages all "
        "8 windows.",
    },
    "Multiply the three: processes x micro-batch size x accumulation steps.",
    doc="Exercise 06.1: 8 processes, micro-batches of 16, k = 4: effective batch 512.",
)

check_allreduces = number_checker(
    3,
    {
        24: "24 is every micro-batch synchronizing (8 x 3 buckets): no_sync() skips the "
        "all-reduce for the first 7.",
        1: "one synchronized backward, yes, but DDP all-reduces bucket by bucket: 3 "
        "buckets, 3 all-reduces.",
        8: "no_sync() removes the synchronization of the first 7 micro-batches; only the "
        "last backward all-reduces.",
        21: "21 would be the 7 micro-batches inside no_sync() synchronizing: they do not.",
        6: "6 counts the last micro-batch's forward and backward as two synchronizations: "
        "forward only prepares the buckets, the all-reduces run during backward, once per "
        "bucket.",
        48: "48 has every micro-batch's forward and backward synchronizing: the forward "
        "never all-reduces gradients, and no_sync() skips the first 7 backward passes.",
        2: "2 counts the last micro-batch's forward and backward, one all-reduce each: the "
        "forward all-reduces nothing, and the backward all-reduces each of the 3 buckets once.",
    },
    "Only the window's last backward synchronizes, and it all-reduces each bucket once.",
    doc="Exercise 06.2: k = 8, 3 buckets, forward and backward of the first 7 micro-batches "
    "inside no_sync(): 3 all-reduces per optimizer step.",
)

check_trainer_window_loss = number_checker(
    2.5,
    {
        3.0: "3.0 is the mean of the two means, the Trainer's loss before the fix: every "
        "micro-batch weighs the same, whatever its number of tokens.",
        6.0: "6.0 adds the two means: the window's loss is divided by its 40 tokens.",
        100.0: "100 is the sum of the token losses; divide it by num_items_in_batch = 40.",
        50.0: "50 divides the window's summed token loss (100) by its 2 micro-batches: "
        "num_items_in_batch counts tokens, 40 of them.",
        1.5: "1.5 is only the first micro-batch's share (2.0 x 30 / 40): add the second "
        "one's, 4.0 x 10 / 40.",
        3.5: "3.5 swaps the weights: the micro-batch with 30 tokens has the mean 2.0, the "
        "one with 10 tokens 4.0.",
    },
    "Sum all token losses of the window (2.0 x 30 + 4.0 x 10), then divide by all its tokens (40).",
    doc="Exercise 06.3: two micro-batches with 30 and 10 counted tokens and mean token "
    "losses 2.0 and 4.0; with num_items_in_batch the window's loss is (2*30 + 4*10) / 40.",
)


AMP_CALL = "amp_window(model, optimizer, scaler, window)"


def _amp_setup():
    """A model, its optimizer and scaler, and three windows of 3 micro-batches: the first with
    large gradients (clipping acts), the second with a micro-batch whose targets are infinite
    (its gradients overflow: the scaler skips the step and halves the scale), the third with
    small gradients (the division by the window's size shows)."""
    from helpers.models import make_mlp
    from helpers.pitfalls import make_teacher_batches

    model = make_mlp((8, 32, 1), seed=4)
    batches = make_teacher_batches(n_batches=9, batch_size=8, seed=4)
    overflow = [batches[3], (batches[4][0], torch.full_like(batches[4][1], float("inf")))]
    windows = [batches[:3], [*overflow, batches[5]], [(x, 0.02 * y) for x, y in batches[6:]]]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    return model, optimizer, torch.amp.GradScaler("cpu", init_scale=2.0**12), windows


# The loop auditor's findings, as the hint each exercise gives (any other code: its message).
FINDING_HINTS = {
    "unscale-after-clip": "the gradients were clipped while still scaled: call "
    "scaler.unscale_(optimizer) before clip_grad_norm_.",
    "clip-per-micro-batch": "clip once, after the window's last backward(), not after each.",
    "step-without-grad": "no backward() reached the model before the step.",
    "zero-grad-before-step": "zero_grad() is misplaced: the gradients were reset between the "
    "window's backward() and its step(). Call it at the start of the window (or after the "
    "step).",
    "leftover-gradients": "the window's gradients were never stepped: call scaler.step(optimizer).",
    "missing-zero-grad": "zero_grad() is missing or misplaced: the next window added to the "
    "last one's gradients. Call optimizer.zero_grad() at the start of each window (or after "
    "the step).",
    "scheduler-per-micro-batch": "scheduler.step() ran in the micro-batch loop: step it once "
    "per window, after the optimizer's step.",
    "window-length": "the backward passes and the steps do not line up: call "
    "scaler.scale(loss).backward() once per micro-batch, and step once per window, after its "
    "last backward().",
}
CLIP_PER_MICRO_BATCH = (
    "the gradients were clipped after each micro-batch: clip once per window, after its last "
    "backward() and scaler.unscale_(optimizer)."
)
MISSING_STEP = (
    "scaler.step(optimizer) never ran: the window's gradients were never stepped (the "
    "weights did not move). Once per window: scaler.unscale_(optimizer), clip, "
    "scaler.step(optimizer), then scaler.update()."
)
DOUBLE_UNSCALE = (
    "scaler.unscale_(optimizer) ran twice in one window (torch: 'unscale_() has already been "
    "called on this optimizer since the last update()'): unscale once per window, after its "
    "last backward(), then clip, step and update."
)

OPTIMIZER_STEP = (
    "optimizer.step() was called instead of scaler.step(optimizer): scaler.step skips a "
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
    unscaled_twice = ("unscale_() has already been called", "unscale_() is being called after")
    if any(fragment in text for fragment in unscaled_twice):
        if failing == "unscale_" and "unscale_" in since and "step" not in since:
            return DOUBLE_UNSCALE  # the scaler was never stepped in between: unscaled twice
        if "update" not in calls:
            return (
                "scaler.update() is missing: call it once per window, after "
                "scaler.step(optimizer). Without it the scale never changes, and the next "
                f"window's unscale_ fails ({text.split(': ', 1)[-1].split('.')[0]})."
            )
        if update_then_step:
            return (
                "scaler.update() ran before scaler.step(optimizer): step first, then update, "
                "once per window (else the next window's unscale_ fails)."
            )
        return text
    if "step() has already been called since the last update()" in text and "update" not in calls:
        return (
            "scaler.update() is missing: call it once per window, after scaler.step(optimizer) "
            "(without it the next window's step fails)."
        )
    if "No inf checks were recorded" in text:
        if failing == "update" and before and not since:
            return (
                "scaler.update() ran twice in a row ('No inf checks were recorded' for the "
                "second): update once per window, right after scaler.step(optimizer)."
            )
        if "optimizer.step" in since:
            return OPTIMIZER_STEP + " (update() then finds no inf check to use.)"
        if failing == "step":
            return (
                "scaler.step found no gradients to check: zero_grad() is misplaced, it reset "
                "the window's gradients before the step. Call it at the start of the window "
                "(or after the step)."
            )
        if "unscale_" in since:
            return (
                "scaler.update() ran before scaler.step(optimizer) ('No inf checks were "
                "recorded'): step first, then update, once per window."
            )
        return (
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
        return MISSING_STEP
    if steps > windows:
        every = "every micro-batch" if steps >= calls.count("scale") else "more than once a window"
        return (
            f"the optimizer stepped {steps} times for {windows} windows, {every}. In the "
            "micro-batch loop only scale the loss and call backward(); after it, once per "
            "window: unscale_, clip, scaler.step(optimizer), scaler.update()."
        )
    return None


def finding_hint(findings, calls: list[str] | None = None, windows: int = 0, hints=None):
    """The hint for the loop auditor's ``findings`` (:class:`Finding` objects or
    ``(code, message)`` pairs), ordered by root cause: first what the scaler ``calls`` over
    ``windows`` windows show (:func:`calls_hint`), then a window never stepped when some
    step was missing (its pending clip also reads as clipping per micro-batch), then clipping
    per micro-batch (with a scaler it is also clipping before unscale_), then the first
    finding, from ``hints`` (default :data:`FINDING_HINTS`). None when there are none."""
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
            return hints["leftover-gradients"]
    if "clip-per-micro-batch" in codes:
        return CLIP_PER_MICRO_BATCH
    code, message = pairs[0]
    return hints.get(code, f"{code}: {message}")


def _placeholder_left(function: Callable) -> bool:
    try:
        return capstone.has_placeholder(capstone.function_source(function))
    except ValueError:
        return False


AMP_RTOL, AMP_ATOL = 1e-5, 1e-6  # measured: correct variants differ by < 1e-7 (README)
AMP_MAX_NORM = 1.0
AMP_MISTAKES = {
    "no division": "each micro-batch's loss must be divided by the window's size "
    "(len(window)): without it the window's gradient is the sum, not the mean, of its "
    "micro-batches' gradients.",
    "no clip": "the accumulated gradient was not clipped: after scaler.unscale_(optimizer), "
    "nn.utils.clip_grad_norm_(model.parameters(), 1.0), once per window.",
}


def _amp_reference(windows, mistake: str | None = None):
    """The course's windows (``train_accumulating``) on a fresh copy of the setting: the
    weights (and the scaler, without ``mistake``), or the weights with one of
    :data:`AMP_MISTAKES`."""
    model, optimizer, scaler, _ = _amp_setup()
    k = len(windows[0])

    def loss_fn(outputs, targets):  # "no division": k times the window's mean
        return F.mse_loss(outputs, targets) * (k if mistake == "no division" else 1)

    train_accumulating(
        model, optimizer, [b for w in windows for b in w], k, loss_fn=loss_fn,
        amp_dtype=torch.bfloat16, scaler=scaler, max_norm=None if mistake == "no clip" else 1.0,
    )  # fmt: skip
    return flat_weights(model) if mistake else (flat_weights(model), scaler)


@checker
def check_amp_window(amp_window: object) -> CheckResult:
    """Exercise 06.4: ``amp_window(model, optimizer, scaler, window)`` runs one accumulation
    window with a GradScaler (bfloat16 autocast on the CPU, MSE loss, clipping to norm 1.0).
    Over three windows (the second one overflows) it must match the course's
    ``train_accumulating``, with no finding from the loop auditor (but for one backward per
    window, on the summed loss: judged by its weights alone). Hints name the root cause
    (from the scaler's calls) before the auditor's findings."""
    if is_unanswered(amp_window):
        return wrong(NOT_ANSWERED)
    amp_window = as_function(amp_window, AMP_CALL)
    if _placeholder_left(amp_window):
        return wrong("your function still has `...` in it: replace each one with code.")
    model, optimizer, scaler, windows = _amp_setup()
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
                call_learner(amp_window, model, optimizer, scaler, window)
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
        return wrong(hint)
    if "optimizer.step" in spy.calls or not torch.isfinite(got).all():
        return wrong(OPTIMIZER_STEP)
    if torch.equal(got, start):
        return wrong("the weights did not move: did scaler.step(optimizer) run?")
    if spy.calls.count("update") != len(windows):
        return wrong(
            f"scaler.update() ran {spy.calls.count('update')} times over {len(windows)} "
            "windows: once per window, after scaler.step(optimizer)."
        )
    if not torch.allclose(got, expected, rtol=AMP_RTOL, atol=AMP_ATOL):
        norms = sorted({n for n in clips.norms if n != AMP_MAX_NORM and not math.isinf(n)})
        if norms:
            return wrong(
                f"the gradient was clipped at max_norm={norms[0]}: clip the unscaled "
                f"gradient to max_norm={AMP_MAX_NORM}, once per window."
            )
        for mistake, hint in AMP_MISTAKES.items():
            if torch.allclose(got, _amp_reference(windows, mistake), rtol=1e-4, atol=1e-5):
                if mistake == "no clip" and clips.norms:
                    hint = (
                        "clip_grad_norm_ ran, but its clipping did not reach the step: clip "
                        "after scaler.unscale_(optimizer) and before scaler.step(optimizer)."
                    )
                return wrong(hint)
        moved, should = (got - start).norm().item(), (expected - start).norm().item()
        return wrong(
            f"the weights moved by {moved:.4g}, the course's windows by {should:.4g}: scale "
            "each micro-batch loss (divided by the window's size), unscale_ once, clip to "
            "1.0, step and update once."
        )
    if scaler.get_scale() != ref_scaler.get_scale():
        return wrong("the scale changed differently: call scaler.update() exactly once.")
    return correct(
        "one scale per window, unscaled once, clipped once, one step and update; the "
        "overflowing window was skipped and the scale halved."
    )


def _judge_summed(got: torch.Tensor, expected: torch.Tensor, start: torch.Tensor) -> CheckResult:
    """The verdict on a window with one backward() (on the window's summed loss, or only on
    its last micro-batch's)."""
    if torch.allclose(got, expected, rtol=AMP_RTOL, atol=AMP_ATOL):
        return correct(
            "one backward() on the window's summed loss gives the course's weights here (each "
            "forward in its own autocast block), and the overflowing window was skipped. Note "
            "the cost: the summed loss keeps every micro-batch's graph in memory until its "
            "backward, what accumulation's backward per micro-batch avoids."
        )
    off = ((got - expected).norm() / (expected - start).norm()).item()
    return wrong(
        f"one backward() per window, and the weights are {off:.2%} (of the distance they "
        "moved) away from the course's: backward once per micro-batch, "
        "scaler.scale(loss).backward() inside the loop, so that each micro-batch's gradient "
        "adds up in the float32 .grad. A backward after the loop sees only the last "
        "micro-batch's loss; on the window's summed loss, forwards that share one autocast "
        "block add their gradients in bfloat16 (its cached bfloat16 copies of the weights)."
    )


CAPSTONE_CALL = "train_ddp(model, optimizer, scheduler, scaler, micro_batches, accumulation_steps)"
CAPSTONE_RTOL, CAPSTONE_ATOL = 1e-5, 1e-6  # measured: correct variants differ by < 1e-7
CAPSTONE_FINDING_HINTS = {
    "leftover-gradients": "the short last window was never stepped: after the full windows, "
    "the remaining micro-batches (1 here) make a window of their own, stepped like the others.",
    "window-length": "the windows do not hold accumulation_steps micro-batches each (only "
    "the last may be short): take micro_batches[start:start + accumulation_steps] for start "
    "in range(0, len(micro_batches), accumulation_steps).",
}


def _capstone_error_hint(error: capstone.CapstoneRunError, timeout: float) -> str:
    if error.kind == "timeout":
        return (
            f"the 2 processes did not finish within {timeout:g} s and were stopped: one rank "
            "waits in a collective that the other never reaches. Every rank must call "
            "dist.all_reduce the same number of times, and run the DDP model's forward and "
            "backward on each of its micro-batches."
        )
    if error.kind == "failed":
        return f"the 2-process run failed: {error.message}"
    if any(word in error.message for word in ("gloo", "Connection reset", "Connection closed")):
        return (
            "the 2 processes' collective calls did not match (gloo reported: "
            f"{_short(error.message)}): every rank must call dist.all_reduce "
            "the same number of times, on tensors of the same shape, and run the DDP model's "
            "forward and backward on each of its micro-batches."
        )
    hint = scaler_error_hint(error.message, error.calls)
    if hint != error.message:
        return hint
    if "is not defined" in error.message:
        return (
            f"{error.message} The check runs your function's source alone, in 2 fresh "
            f"processes: only {capstone.PREAMBLE_NAMES} are there, nothing from other cells."
        )
    return f"{error.message} (in one of the 2 processes)"


def _short(message: str) -> str:
    """A gloo error without its source paths and addresses, its first sentence."""
    text = re.sub(r"\[[^\]]*\]:?\d*:?\s*", "", message.split("raised ", 1)[-1])
    return text.split(". ")[0][:160]


@checker
def check_capstone(train_ddp: object, timeout: float = 60) -> CheckResult:
    """Exercise 06.5 (the capstone): ``train_ddp(model, optimizer, scheduler, scaler,
    micro_batches, accumulation_steps)`` trains on 2 DDP processes (gloo): windows of
    ``accumulation_steps`` uneven micro-batches of padded tokens, the last window short; the
    window's summed token loss divided by its token count over both ranks; a GradScaler;
    clipping of the unscaled gradient; one scheduler step per window. Its final weights must
    equal one process trained on both ranks' data (``helpers.capstone.reference_run``), and
    the loop auditor must find nothing. ``timeout`` bounds the run (a hang is a ❌)."""
    if is_unanswered(train_ddp):
        return wrong(NOT_ANSWERED)
    function = as_function(train_ddp, CAPSTONE_CALL)
    try:
        source = capstone.function_source(function)
    except ValueError as error:
        return wrong(str(error))
    if capstone.has_placeholder(source):
        return wrong("your function still has `...` in it: replace each one with code.")
    try:
        results = capstone.run_capstone(function, timeout=timeout)
    except capstone.CapstoneRunError as error:
        return wrong(_capstone_error_hint(error, timeout))
    return _judge_capstone(results)


def _judge_capstone(results: dict) -> CheckResult:
    """The verdict on rank 0's results of :func:`helpers.capstone.run_capstone`."""
    got = torch.tensor(results["weights"])
    calls, windows = results["calls"], len(capstone.window_slices(capstone.MICRO_BATCHES))
    if results["across_ranks"] > 0:
        return wrong(
            f"the 2 processes ended with different weights (largest difference "
            f"{results['across_ranks']:.3g}): run the DDP model itself (model(inputs), not "
            "model.module), so that its backward all-reduces the gradients."
        )
    hint = finding_hint(results["findings"], calls, windows, CAPSTONE_FINDING_HINTS)
    if hint is not None:
        return wrong(hint)
    if "optimizer.step" in calls or "step" not in calls or not torch.isfinite(got).all():
        return wrong(OPTIMIZER_STEP)
    steps = calls.count("step")
    if steps == calls.count("update") == windows - 1:
        return wrong(CAPSTONE_FINDING_HINTS["leftover-gradients"])
    if calls.count("update") != windows:
        return wrong(
            f"scaler.update() ran {calls.count('update')} times for {windows} windows: once "
            "per window, after scaler.step(optimizer)."
        )
    reference = capstone.reference_run()
    if results["lrs"] != reference["lrs"]:
        never = len(set(results["lrs"])) == 1
        return wrong(
            f"the steps used the learning rates {results['lrs']}, the course's "
            f"{reference['lrs']}: "
            + (
                "scheduler.step() never ran. "
                if never
                else "the scheduler stepped more or less often than once per window. "
            )
            + "Call scheduler.step() once per window, after scaler.step(optimizer), the "
            "skipped window included."
        )
    if results["scale"] != reference["scales"][-1]:
        return wrong(
            f"the scale ended at {results['scale']:g}, the course's at "
            f"{reference['scales'][-1]:g}: scale every micro-batch's loss with "
            "scaler.scale(loss) and call scaler.update() once per window."
        )
    if results["allreduces"] != windows * results["buckets"]:
        return wrong(
            f"DDP all-reduced the gradients {results['allreduces']} times in {windows} "
            f"windows, instead of once per bucket ({results['buckets']}) on each window's last "
            "backward: run the forward and backward of the window's other micro-batches "
            "inside `with model.no_sync():` (a test of the exercise: it saves communication, "
            "the weights would be the same)."
        )
    if not torch.allclose(got, reference["weights"], rtol=CAPSTONE_RTOL, atol=CAPSTONE_ATOL):
        norms = {n for n in results["max_norms"] if n != capstone.MAX_NORM and not math.isinf(n)}
        if norms:
            return wrong(
                f"the gradient was clipped at max_norm={min(norms)}: clip the unscaled "
                f"gradient to max_norm={capstone.MAX_NORM:g}, once per window, after "
                "scaler.unscale_(optimizer)."
            )
        start = capstone.flat_weights(capstone.make_model())
        should = (reference["weights"] - start).norm()
        for variant, hint in capstone.VARIANTS.items():
            if hint and (got - capstone.reference_run(variant)["weights"]).norm() < 0.01 * should:
                return wrong(hint + ".")
        return wrong(
            f"the weights are {((got - reference['weights']).norm() / should).item():.1%} "
            "(of the distance they moved) away from one process on the whole batch: divide "
            "each window's summed token loss by its token count over both ranks "
            "(dist.all_reduce) and multiply by the world size; scale, unscale_, clip to "
            f"{capstone.MAX_NORM:g}, step and update once per window."
        )
    return correct(
        "on 2 processes, the same weights as one process on the whole batch: token counts "
        "all-reduced, one all-reduce of the gradients per window, the overflowing window "
        "skipped, the short last window stepped, clipped and scheduled once per window."
    )
