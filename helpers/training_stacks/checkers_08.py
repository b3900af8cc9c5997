"""Checkers for notebook 08, accumulation in today's training stacks: the two predictions
here (08.1, its answer computed by a run, and 08.3), the write exercise in
``scale_after_exercise``, the repair in ``backward_step_exercise`` (imported here, the
notebook's one import place)."""

from __future__ import annotations

import torch

from helpers.checks import number_checker
from helpers.predictions import choice_checker
from helpers.training_stacks.backward_step_exercise import check_repaired_window
from helpers.training_stacks.scale_after_exercise import check_scale_after_window
from helpers.translation import N_


def naive_token_weight() -> float:
    """Exercise 08.1's answer, computed by a run: one value per token (``token_losses``), so
    that the gradient of a loss with respect to it is that token's weight in the loss. Each
    rank takes the mean of its own tokens (30 and 50); DDP averages the two ranks. Returns
    the weight of one of rank 0's tokens divided by the exact weight, 1 / 80."""
    token_losses = torch.ones(30 + 50, dtype=torch.float64, requires_grad=True)
    rank_means = [token_losses[:30].mean(), token_losses[30:].mean()]  # each rank's own mean
    (sum(rank_means) / 2).backward()  # what DDP's average leaves on both ranks
    return token_losses.grad[0].item() / (1 / 80)


check_naive_token_weight = number_checker(
    naive_token_weight,
    {
        1.0: N_(
            "1 would mean the per-rank mean is exact, but rank 0's 30 tokens share one mean, "
            "so each gets 1/30 of it, more than each of rank 1's 50 tokens gets of theirs."
        ),
        3 / 4: N_(
            "3/4 is the inverse: rank 0 holds fewer tokens, so each of its tokens weighs "
            "more than 1/80, not less: (1/30 x 1/2) / (1/80) = 80/60."
        ),
        1 / 60: N_("1/60 is the token's weight itself: divide it by the exact weight 1/80."),
        8 / 3: N_(
            "80/30 forgets that DDP averages the two ranks (it divides their sum by 2): "
            "the weight is 1/30 x 1/2 = 1/60, and (1/60) / (1/80) = 80/60."
        ),
        1 / 30: N_(
            "1/30 is the weight within rank 0's own mean: DDP then halves it (the "
            "average of 2 ranks), and the question asks for that divided by 1/80."
        ),
        4 / 5: N_(
            "0.8 is the factor of a token of rank 1 (50 tokens): (1/50 x 1/2) / (1/80). The "
            "question asks about rank 0's 30 tokens."
        ),
        5 / 3: N_(
            "50/30 compares a token of rank 0 with a token of rank 1: the question "
            "compares it with the exact weight, 1/80 for every token."
        ),
        3 / 5: N_(
            "30/50 compares the two ranks' counts: the question compares a token of rank "
            "0's weight, 1/30 x 1/2, with the exact 1/80."
        ),
    },
    N_(
        "A token of rank 0 gets 1/30 of rank 0's mean; DDP averages the 2 ranks, halving it; "
        "divide that by the exact 1/80. If you rounded, write the fraction instead."
    ),
    questions={
        1.0: N_("Does each rank's own mean give every token the same weight?"),
        3 / 4: N_("Does a token of the rank with fewer tokens weigh more or less?"),
        1 / 60: N_("Is the question the weight, or the weight as a multiple of 1/80?"),
        80 / 30: N_("What does DDP do with the two ranks' gradients?"),
        1 / 30: N_("What does DDP do to rank 0's weight, and what is it compared with?"),
        4 / 5: N_("Which rank's token does the question ask about?"),
        50 / 30: N_("What is the weight compared with: a token of rank 1, or the exact 1/80?"),
        30 / 50: N_("What is compared: the ranks' counts, or a token's weight with 1/80?"),
        None: N_("What weight does rank 0's own mean give one token, and what does DDP do then?"),
    },
    why=N_(
        "rank 0's own mean gives a token 1/30, DDP's average halves it to 1/60, and "
        "(1/60) / (1/80) = 80/60."
    ),
    doc="Exercise 08.1: with each rank's own token mean (30 and 50 tokens) averaged by DDP, "
    "a token of rank 0 weighs (1/30 x 1/2) / (1/80) = 80/60 times the exact 1/80.",
)

check_fewer_micro_batches = number_checker(
    2 / 80,
    {
        1 / 80: N_(
            "1/80 forgets that DDP averages the two ranks' gradients (it divides their "
            "sum by 2): multiply by the world size too, 2 / 80."
        ),
        2 / 35: N_(
            "2/35 uses rank 1's own count: all-reduce the count first, so that every "
            "rank divides by the window's tokens, 45 + 35 = 80."
        ),
        1 / 35: N_(
            "1/35 is rank 1's own token mean: all-reduce the count (45 + 35 = 80 tokens) "
            "and multiply by the world size to undo DDP's average: 2 / 80."
        ),
        2 / 45: N_("2/45 uses rank 0's count: the window's count is both ranks', 45 + 35 = 80."),
        3 / 80: N_(
            "3/80 gives rank 1 more weight for running fewer micro-batches: every token "
            "counts once, whichever rank holds it, so the micro-batch counts do not enter: 2 / 80."
        ),
        2 / 120: N_(
            "2/120 gives rank 1 less weight for running fewer micro-batches: every token "
            "counts once, whichever rank holds it, so the micro-batch counts do not enter: 2 / 80."
        ),
        1 / 2: N_(
            "1/2 divides by rank 1's 2 micro-batches: the losses are sums over tokens, so "
            "divide by the window's 80 tokens (and undo DDP's average): 2 / 80."
        ),
        1 / 5: N_(
            "1/5 divides by the window's 5 micro-batches: the losses are sums over tokens, "
            "so divide by its 80 tokens (and undo DDP's average): 2 / 80."
        ),
        2 / 5: N_(
            "2/5 divides by the window's 5 micro-batches: the losses are sums over tokens, "
            "so divide by its 80 tokens: 2 / 80."
        ),
        1 / 160: N_(
            "1/160 divides by the world size a second time: DDP has already divided the "
            "sum by 2, so multiply by 2 to undo it, then divide by the 80 tokens: 2 / 80."
        ),
        40.0: N_(
            "40 is count / world, the inverse of the factor: divide by the 80 tokens and "
            "multiply by the world size, 2 / 80."
        ),
        80.0: N_(
            "80 multiplies by the count: the gradients are of summed losses, divide them "
            "by the tokens (and undo DDP's average with the world size): 2 / 80."
        ),
    },
    N_(
        "Each rank synchronizes once, at its own last micro-batch, and DDP averages the two sums; "
        "the mean over tokens divides the sum by all 80 tokens. Which rank ran how many "
        "micro-batches does not enter."
    ),
    questions={
        1 / 80: N_("What does DDP do to the sum of the two ranks' gradients?"),
        2 / 35: N_("Whose token count does every rank divide by?"),
        1 / 35: N_("Whose token count does every rank divide by, and what undoes DDP's average?"),
        2 / 45: N_("Whose token count does every rank divide by?"),
        3 / 80: N_("Do the micro-batch counts change a token's weight?"),
        2 / 120: N_("Do the micro-batch counts change a token's weight?"),
        1 / 2: N_("Are the losses divided by micro-batches or by tokens?"),
        1 / 5: N_("Are the losses divided by micro-batches or by tokens?"),
        2 / 5: N_("Are the losses divided by micro-batches or by tokens?"),
        1 / 160: N_("Has DDP already divided by the world size?"),
        40.0: N_("Is the factor count / world, or its inverse?"),
        80.0: N_("Do the summed losses need multiplying by the count, or dividing?"),
        None: N_("What is the window's token count, and what undoes DDP's average?"),
    },
    why=N_(
        "DDP leaves the mean of the two ranks' sums, so multiply by the world size and divide "
        "by all 80 tokens: 2 / 80."
    ),
    doc="Exercise 08.3: rank 0 ran 3 micro-batches (45 tokens), rank 1 ran 2 (35 tokens), "
    "each synchronized at its own last one: rank 1 multiplies by world / tokens = 2 / 80.",
)

__all__ = [
    "check_fewer_micro_batches",
    "check_naive_token_weight",
    "check_repaired_window",
    "check_scale_after_window",
    "naive_token_weight",
]


check_token_weights_prediction = choice_checker(
    {
        "a": "the micro-batches with the fewest tokens",
        "b": "the micro-batches with the most tokens",
        "c": "every token weighs the same",
    },
    "a",
    why=N_(
        "each micro-batch's own mean divides by its own count, so a micro-batch of few tokens "
        "gives each of them a larger share."
    ),
    misconceptions={
        "b": N_(
            "Does a mean give a large micro-batch's tokens more weight? It divides by the "
            "micro-batch's count: the more tokens, the less each one weighs."
        ),
        "c": N_(
            "Would the mean of means equal the mean over all tokens? Only if every "
            "micro-batch held as many tokens; naive_window was 24% off one process."
        ),
    },
    reveal="Figure: each token's weight in the naive mean",
    doc="Section 1's prediction: whose tokens the naive mean weighs most.",
)

check_uneven_fix_prediction = choice_checker(
    {
        "a": "it hangs the same way",
        "b": "it runs, and each rank's gradient equals one process on all 5 micro-batches",
        "c": "it runs, but rank 1's gradient lacks a micro-batch",
    },
    "b",
    why=N_(
        "with no_sync() until each rank's own last micro-batch, every rank all-reduces once, "
        "and the all-reduced count weighs every token alike."
    ),
    misconceptions={
        "a": N_(
            "How many all-reduces does each rank run with no_sync() until its own last "
            "micro-batch? One each, whatever its number of micro-batches: they all meet."
        ),
        "c": N_(
            "What does rank 1 hold after the all-reduce? The sum over both ranks, scaled by "
            "the window's count: the same gradient as rank 0, over all 5 micro-batches."
        ),
    },
    reveal="both ranks' gradients = one process on all 5",
    doc="Section 2's prediction: section 1's loop on ranks with 3 and 2 micro-batches.",
)
