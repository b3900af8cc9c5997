"""Checkers for notebook 06, accumulation at scale."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F

from helpers.at_scale import train_accumulating
from helpers.audit import LoopAuditor
from helpers.checks import (
    NOT_ANSWERED,
    CheckResult,
    as_number,
    correct,
    diagnose_number,
    is_unanswered,
    wrong,
)


def check_effective_batch(answer: object) -> CheckResult:
    """Exercise 06.1: 8 processes, micro-batches of 16, k = 4: effective batch 512."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    return diagnose_number(
        as_number(answer, "answer"),
        512,
        {
            64: "64 is 4 x 16, one process's window: all 8 processes contribute a window "
            "to each step.",
            128: "16 x 8 is one micro-batch from every process: each of them also "
            "accumulates k = 4 micro-batches before the step.",
            32: "the micro-batch size matters too: each micro-batch holds 16 samples.",
            16: "16 is one micro-batch on one process; a step sees every process's window.",
        },
        "Multiply the three: processes x micro-batch size x accumulation steps.",
    )


def check_allreduces(answer: object) -> CheckResult:
    """Exercise 06.2: k = 8, DDP splits the gradients into 3 buckets, forward and backward
    inside no_sync() for the first 7 micro-batches: 3 all-reduces per optimizer step."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    return diagnose_number(
        as_number(answer, "answer"),
        3,
        {
            24: "24 is every micro-batch synchronizing (8 x 3 buckets): no_sync() skips the "
            "all-reduce for the first 7.",
            1: "one synchronized backward, yes, but DDP all-reduces bucket by bucket: 3 "
            "buckets, 3 all-reduces.",
            8: "no_sync() removes the synchronization of the first 7 micro-batches; only the "
            "last backward all-reduces.",
            21: "21 would be the 7 micro-batches inside no_sync() synchronizing: they do not.",
        },
        "Only the window's last backward synchronizes, and it all-reduces each bucket once.",
    )


def check_trainer_window_loss(answer: object) -> CheckResult:
    """Exercise 06.3: two micro-batches with 30 and 10 counted tokens and mean token losses
    2.0 and 4.0; with num_items_in_batch the window's loss is (2*30 + 4*10) / 40 = 2.5."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    return diagnose_number(
        as_number(answer, "answer"),
        2.5,
        {
            3.0: "3.0 is the mean of the two means, the Trainer's loss before the fix: every "
            "micro-batch weighs the same, whatever its number of tokens.",
            6.0: "6.0 adds the two means: the window's loss is divided by its 40 tokens.",
            100.0: "100 is the sum of the token losses; divide it by num_items_in_batch = 40.",
            1.5: "1.5 is only the first micro-batch's share (2.0 x 30 / 40): add the second "
            "one's, 4.0 x 10 / 40.",
            3.5: "3.5 swaps the weights: the micro-batch with 30 tokens has the mean 2.0, the "
            "one with 10 tokens 4.0.",
        },
        "Sum all token losses of the window (2.0 x 30 + 4.0 x 10), then divide by all its "
        "tokens (40).",
    )


def _amp_setup():
    """A model, its optimizer and scaler, and two windows of 3 micro-batches: the first with
    large gradients (clipping acts), the second with small ones (the division shows)."""
    from helpers.models import make_mlp
    from helpers.pitfalls import make_teacher_batches

    model = make_mlp((8, 32, 1), seed=4)
    batches = make_teacher_batches(n_batches=6, batch_size=8, seed=4)
    windows = [batches[:3], [(x, 0.02 * y) for x, y in batches[3:]]]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    return model, optimizer, torch.amp.GradScaler("cpu", init_scale=2.0**12), windows


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def check_amp_window(amp_window: Callable) -> CheckResult:
    """Exercise 06.4: ``amp_window(model, optimizer, scaler, window)`` runs one accumulation
    window with a GradScaler (bfloat16 autocast on the CPU, MSE loss, clipping to norm 1.0).
    Over two windows it must match the course's ``train_accumulating``, with no finding from
    the loop auditor."""
    if is_unanswered(amp_window):
        return wrong(NOT_ANSWERED)
    if not callable(amp_window):
        raise TypeError("pass your function itself: check_amp_window(amp_window)")
    model, optimizer, scaler, windows = _amp_setup()
    reference, ref_optimizer, ref_scaler, _ = _amp_setup()
    train_accumulating(
        reference, ref_optimizer, [b for w in windows for b in w], 3, loss_fn=F.mse_loss,
        amp_dtype=torch.bfloat16, scaler=ref_scaler, max_norm=1.0,
    )  # fmt: skip
    start = _weights(model)
    try:
        with LoopAuditor(model, optimizer, accumulation_steps=3, scaler=scaler) as audit:
            for window in windows:
                amp_window(model, optimizer, scaler, window)
    except AssertionError as error:
        if "No inf checks" in str(error):
            return wrong(
                "scaler.update() ran before any scaler.step(): update once per window, after "
                "the step."
            )
        raise
    hints = {
        "unscale-after-clip": "the gradients were clipped while still scaled: call "
        "scaler.unscale_(optimizer) before clip_grad_norm_.",
        "clip-per-micro-batch": "clip once, after the window's last backward(), not after each.",
        "step-without-grad": "no backward() reached the model before the step.",
        "zero-grad-before-step": "the gradients were reset between backward() and step().",
        "leftover-gradients": "the window's gradients were never stepped: call "
        "scaler.step(optimizer).",
        "missing-zero-grad": "the second window added to the first one's gradients: call "
        "optimizer.zero_grad() at the start of each window (or after the step).",
    }
    for finding in audit.findings:  # each has a hint; any other code, the auditor's message
        return wrong(hints.get(finding.code, f"{finding.code}: {finding.message}"))
    got, expected = _weights(model), _weights(reference)
    if torch.equal(got, start):
        return wrong("the weights did not move: did scaler.step(optimizer) run?")
    if not torch.allclose(got, expected, rtol=1e-3, atol=1e-5):
        moved, should = (got - start).norm().item(), (expected - start).norm().item()
        if moved > 1.05 * should:
            return wrong(
                f"the weights moved by {moved:.4g}, the course's windows by {should:.4g}: "
                "is each micro-batch's loss divided by the window's size, and is the "
                "accumulated gradient clipped to norm 1.0?"
            )
        return wrong(
            f"the weights moved by {moved:.4g}, the course's windows by {should:.4g}: scale "
            "each micro-batch loss (divided by the window's size), unscale_ once, clip to "
            "1.0, step and update once."
        )
    if scaler.get_scale() != ref_scaler.get_scale():
        return wrong("the scale changed differently: call scaler.update() exactly once.")
    return correct("one scale per window, unscaled once, clipped once, one step and update.")
