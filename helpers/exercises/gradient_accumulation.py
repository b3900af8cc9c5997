"""Checkers for notebook 03, gradient accumulation on purpose."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from helpers.accumulation import full_batch_gradients, windows
from helpers.checks import (
    NOT_ANSWERED,
    CheckResult,
    as_names,
    as_number,
    correct,
    diagnose_number,
    is_unanswered,
    wrong,
)
from helpers.data import make_padded_tokens
from helpers.grads import StepGradients
from helpers.models import NORMS, TokenModel

K = 4
MICRO_BATCHES = 10  # windows of 4, 4 and a tail of 2


def _micro_batches(padded: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
    tokens, targets, _ = make_padded_tokens(2 * MICRO_BATCHES, 6, seed=3)
    if not padded:
        generator = torch.Generator().manual_seed(4)
        targets = torch.randint(0, 11, targets.shape, generator=generator)
    return list(zip(tokens.split(2), targets.split(2), strict=True))


def _window_references(model: nn.Module, micro_batches: list) -> list[torch.Tensor]:
    references = []
    for window in windows(micro_batches, K):
        inputs = torch.cat([x for x, _ in window])
        targets = torch.cat([y for _, y in window])
        grads = full_batch_gradients(model, nn.CrossEntropyLoss(), inputs, targets)
        references.append(torch.cat([g.flatten() for g in grads]))
    return references


def _diagnose(got: list[torch.Tensor], references: list[torch.Tensor], case: str) -> str | None:
    """None when every step used its window's gradient, else the likely mistake."""
    expected = len(references)
    if len(got) == expected - 1:
        return (
            f"step() ran {len(got)} times, but {MICRO_BATCHES} micro-batches with k={K} make "
            f"{expected} windows: the last window of {MICRO_BATCHES % K} was never stepped."
        )
    if len(got) != expected:
        return (
            f"step() ran {len(got)} times; {MICRO_BATCHES} micro-batches with k={K} make "
            f"{expected} windows: one step per window."
        )
    for index, (g, r) in enumerate(zip(got, references, strict=True)):
        if torch.allclose(g, r, rtol=1e-4, atol=1e-6):
            continue
        if not g.any():
            return (
                f"step() {index + 1} saw no gradient: did zero_grad() run between backward() "
                "and step()?"
            )
        if index > 0 and torch.allclose(g - got[index - 1], r, rtol=1e-3, atol=1e-5):
            return (
                f"window {index + 1} still held window {index}'s gradient: zero the grads "
                "before each window."
            )
        ratio = (g @ r / (r @ r)).item()
        aligned = torch.allclose(g, ratio * r, rtol=1e-3, atol=1e-6)
        if aligned and index == expected - 1 and abs(ratio - (MICRO_BATCHES % K) / K) < 1e-3:
            return (
                f"your last window is divided by k={K} but holds only {MICRO_BATCHES % K} "
                f"micro-batches: its gradient is {ratio:.2g} of what it should be. Divide by "
                "what the window really holds."
            )
        if aligned:
            return (
                f"window {index + 1}'s gradient is {ratio:.3g}x the mean over its tokens: divide "
                "the summed loss by the number of non-padding tokens (targets != -100) in "
                "that window."
            )
        return (
            f"window {index + 1}'s gradient points in another direction than the {case} "
            "window's mean: the micro-batches are weighted unequally. Sum the per-token losses "
            "over the window and divide by the window's token count, not by each micro-batch's."
        )
    return None


def check_accumulation_loop(train_epoch: Callable) -> CheckResult:
    """Exercise 03.1: ``train_epoch(model, optimizer, loss_fn, micro_batches, k)``, with a
    sum-reduced ``loss_fn``, must step once per window of ``k`` micro-batches (the last
    one shorter) with the gradient of the window's mean loss per non-padding token."""
    if is_unanswered(train_epoch):
        return wrong(NOT_ANSWERED)
    if not callable(train_epoch):
        raise TypeError("pass your function itself: check_accumulation_loop(train_epoch)")
    for case, padded in (("unpadded", False), ("padded", True)):
        model = TokenModel(seed=1)
        micro_batches = _micro_batches(padded)
        references = _window_references(model, micro_batches)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # weights stay: easy to compare
        loss_fn = nn.CrossEntropyLoss(reduction="sum")
        try:
            with StepGradients(optimizer) as record:
                train_epoch(model, optimizer, loss_fn, micro_batches, K)
        except Exception as error:  # the learner's code: report, do not crash the check
            return wrong(f"your function raised {type(error).__name__}: {error}")
        mistake = _diagnose(record.at_steps, references, case)
        if mistake is not None:
            return wrong(f"with {case} sequences, {mistake}")
    return correct("every window, the short tail included, stepped with its exact mean gradient.")


def check_tail_fraction(answer: object) -> CheckResult:
    """Exercise 03.2: the article's loop with k = 4 and a tail window of 3 micro-batches
    (equal sizes): the tail step gets 3/4 of the correct gradient."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    return diagnose_number(
        as_number(answer, "answer"),
        0.75,
        {
            1.0: "The article divides every micro-batch's loss by k = 4, the tail's too, but "
            "the tail's correct mean divides by 3.",
            0.25: "Three micro-batches are summed, each divided by 4: 3/4, not 1/4.",
            4 / 3: "Upside down: the tail gets less than it should (3 terms of 1/4 each, "
            "where the mean needs 3 terms of 1/3).",
            0.5: "0.5 is the tail of 2 in the notebook; here the tail holds 3.",
        },
        "The tail sums 3 micro-batch losses, each divided by 4; its correct mean divides by 3.",
    )


def check_exact_norms(answer: object) -> CheckResult:
    """Exercise 03.3: which normalization layers keep accumulation exactly equal to one
    big batch? GroupNorm and LayerNorm (per-sample statistics), not BatchNorm."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    given = as_names(answer, "{'LayerNorm'}") - {"none"}
    if not given <= set(NORMS):
        return wrong("use the names 'BatchNorm', 'GroupNorm' and 'LayerNorm'.")
    if given == {"GroupNorm", "LayerNorm"}:
        return correct(
            "both normalize each sample on its own, so a sample's output does not "
            "depend on which micro-batch it is in."
        )
    hints = []
    if "BatchNorm" in given:
        hints.append(
            "BatchNorm normalizes with the mean and variance of the whole (micro-)"
            "batch: smaller micro-batches give other statistics, other outputs."
        )
    for name in ("GroupNorm", "LayerNorm"):
        if name not in given:
            hints.append(
                f"{name} computes its statistics within each sample: it keeps accumulation exact."
            )
    return wrong(" ".join(hints))
