"""Checkers for notebook 06, accumulation at scale."""

from __future__ import annotations

from helpers.checks import (
    NOT_ANSWERED,
    CheckResult,
    as_number,
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
            1.5: "1.5 divides each micro-batch's mean by k = 2 but weights them the other way "
            "round: the micro-batch with 30 tokens has the loss 2.0.",
        },
        "Sum all token losses of the window (2.0 x 30 + 4.0 x 10), then divide by all its "
        "tokens (40).",
    )
