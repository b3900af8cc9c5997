"""Checkers for notebook 07, accumulation in today's training stacks: the two predictions
here, the write exercise in ``scale_after_exercise``, the repair in
``backward_step_exercise`` (imported here, the notebook's one import place)."""

from __future__ import annotations

from helpers.checks import (
    number_checker,
)
from helpers.exercises.backward_step_exercise import check_repaired_window
from helpers.exercises.scale_after_exercise import check_scale_after_window

check_scale_factor = number_checker(
    2 / 80,
    {
        1 / 80: "1/80 forgets that DDP averages the two ranks' gradients (it divides their "
        "sum by 2): multiply by the world size too, 2 / 80.",
        1 / 30: "1/30 is rank 0's own count: the step needs the window's tokens on both "
        "ranks, all-reduced: 30 + 50 = 80.",
        1 / 50: "1/50 is rank 1's own count: all-reduce the count, 30 + 50 = 80 tokens.",
        2 / 30: "2/30 uses rank 0's own count: all-reduce it first, 30 + 50 = 80.",
        80.0: "80 multiplies by the count: the gradients are of summed losses, divide them "
        "by the tokens (and undo DDP's average with the world size): 2 / 80.",
        40.0: "40 is count / world, the inverse of the factor: the gradients are of summed "
        "losses, divide them by the 80 tokens and undo DDP's average: world / count = 2 / 80.",
        0.5: "0.5 only divides by the world size, which DDP has already done: the sums "
        "still need dividing by the 80 tokens, and the average undone: 2 / 80.",
        1 / 160: "1/160 divides by the world size a second time: DDP has already divided the "
        "sum by 2, so multiply by 2 to undo it, then divide by the 80 tokens: 2 / 80.",
    },
    "The ranks backwarded sums; DDP averaged them (sum / 2); the mean over tokens is the sum "
    "divided by all 80 tokens.",
    doc="Exercise 07.1: 2 ranks counted 30 and 50 tokens and backwarded their token-loss "
    "sums; DDP averaged the gradients: multiply by world / tokens = 2 / 80.",
)

check_reduce_scatters = number_checker(
    4,
    {
        32: "32 is every micro-batch reduce-scattering every group (8 x 4): "
        "set_requires_gradient_sync(False) skips it for the first 7.",
        1: "one synchronized backward, yes, but FSDP2 reduce-scatters group by group: 4 "
        "groups, 4 reduce-scatters.",
        8: "8 is one per micro-batch: with the sync off, only the last backward "
        "reduce-scatters, once per group.",
        28: "28 counts the 7 micro-batches with the sync off (7 x 4): they reduce-scatter "
        "nothing, the gradients stay unsharded and add up.",
        7: "7 counts the micro-batches with the sync off: those are the ones that do not "
        "reduce-scatter.",
        12: "12 is section 4's count of all-gathers, which gather the parameters in every "
        "forward and backward: reduce-scatters move the gradients, only in the backward with "
        "the sync on, once per group.",
    },
    "Only the backward with the sync on reduce-scatters, and it does so once per group.",
    doc="Exercise 07.3: 4 fully_shard groups, k = 8, set_requires_gradient_sync(False) on "
    "the first 7 micro-batches: 4 reduce-scatters per optimizer step.",
)

__all__ = [
    "check_reduce_scatters",
    "check_repaired_window",
    "check_scale_after_window",
    "check_scale_factor",
]
