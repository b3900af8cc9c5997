"""The pieces every rank program of notebook 08 shares (``helpers.training_stacks.stacks_ranks``):
the token data and model, gradients compared across ranks, and section 1's token-loss windows on DDP
(each micro-batch's own mean, scaling before the backward, and scaling after the window)
with the case that compares them with one process."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.accumulation import relative_error
from helpers.data import make_padded_tokens
from helpers.models import TokenModel
from helpers.training_stacks.stacks import PAD, max_difference, token_count, token_loss_sum

VOCAB = 11
MAX_NORM = 0.05  # below the true gradient norm, so that clipping acts


# ---------------------------------------------------------------- shared pieces


def grads_of(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def worst_over_ranks(value: float) -> float:
    """The largest of every rank's ``value`` (a collective: every rank must call it)."""
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.item()


def single_process_grads(batches, model: nn.Module | None = None) -> list[torch.Tensor]:
    """One process on ``batches`` (all the data): the mean over every counted token,
    backwarded into ``model`` (by default a fresh copy of the ranks' starting model)."""
    if model is None:
        model = TokenModel(vocab=VOCAB, seed=0)
    total = sum(int(token_count(y)) for _, y in batches)
    for x, y in batches:
        (token_loss_sum(model, x, y) / total).backward()
    return grads_of(model)


def token_windows(world: int, k: int, micro_batch: int, max_length: int, seed: int = 0):
    """The same data on every rank: ``world * k`` micro-batches of padded sequences;
    rank ``r``'s window is global micro-batches ``j * world + r``."""
    n = world * k * micro_batch
    tokens, targets, _ = make_padded_tokens(n, max_length, vocab=VOCAB, seed=seed)
    batches = [
        (tokens[i : i + micro_batch], targets[i : i + micro_batch])
        for i in range(0, n, micro_batch)
    ]
    return batches, [[batches[j * world + r] for j in range(k)] for r in range(world)]


def sync_unless_last(ddp: DDP, j: int, k: int):
    return ddp.no_sync() if j < k - 1 else contextlib.nullcontext()


# ---------------------------------------------------------------- 1. token-level loss


def naive_window(ddp: DDP, window) -> None:
    """One rank's window with each micro-batch's own token mean, divided by the window's
    length; DDP averages the ranks: wrong when the ranks (or micro-batches) count different
    numbers of tokens."""
    for j, (x, y) in enumerate(window):
        with ddp.no_sync() if j < len(window) - 1 else contextlib.nullcontext():
            loss = nn.functional.cross_entropy(ddp(x), y, ignore_index=PAD)  # its token mean
            (loss / len(window)).backward()  # each micro-batch weighs 1/k, whatever its tokens


def scale_before_window(ddp: DDP, window) -> int:
    """One rank's window, each loss scaled before its backward: all-reduce the window's
    token count first, then backward each micro-batch's token-loss sum times
    ``world / count``. ``no_sync()`` lasts until this rank's own last micro-batch, so every
    rank all-reduces its gradients once, whatever its number of micro-batches."""
    count = torch.tensor([sum(int(token_count(y)) for _, y in window)])  # this rank's tokens
    dist.all_reduce(count)  # now the window's tokens over all ranks
    for j, (x, y) in enumerate(window):
        with ddp.no_sync() if j < len(window) - 1 else contextlib.nullcontext():  # syncs the last
            loss = token_loss_sum(ddp, x, y)  # the sum of its token losses, padding ignored
            # DDP divides the ranks' summed gradients by the world size: multiply it back
            (loss * dist.get_world_size() / count.item()).backward()
    return count.item()


def scale_after_window(ddp: DDP, window, max_norm: float) -> dict:
    """One rank's window, scaled after accumulating, then clipped: backward each micro-batch's
    token-loss sum (no count is needed before the first backward), all-reduce the count,
    multiply the gradients once by ``world / count``, clip. Returns the count and the
    gradient norm before the scaling and after it (the norm clipping sees)."""
    count = torch.zeros(1, dtype=torch.int64)
    for j, (x, y) in enumerate(window):
        with ddp.no_sync() if j < len(window) - 1 else contextlib.nullcontext():
            token_loss_sum(ddp, x, y).backward()  # the last one all-reduces (DDP averages)
            count += token_count(y)
    dist.all_reduce(count)  # now the window's tokens over all ranks
    grads = [p.grad for p in ddp.parameters()]
    norm_before = nn.utils.get_total_norm(grads).item()  # measured, to print
    for g in grads:
        g *= dist.get_world_size() / count.item()  # once, after the window
    seen = nn.utils.clip_grad_norm_(ddp.parameters(), max_norm).item()  # after the scaling
    return {"count": count.item(), "norm_before_scaling": norm_before, "norm_clipping_sees": seen}


def token_loss_case(rank: int, world: int, k: int, micro_batch: int, max_length: int) -> dict:
    everything, windows = token_windows(world, k, micro_batch, max_length)
    mine = windows[rank]
    reference = single_process_grads(everything)
    counts = [sum(int(token_count(y)) for _, y in window) for window in windows]
    ddp = DDP(TokenModel(vocab=VOCAB, seed=0))
    naive_window(ddp, mine)
    naive = grads_of(ddp.module)
    ddp = DDP(TokenModel(vocab=VOCAB, seed=0))
    global_count = scale_before_window(ddp, mine)
    before = grads_of(ddp.module)
    true_norm = torch.nn.utils.get_total_norm(reference).item()
    clipped_reference = [g * min(1.0, MAX_NORM / (true_norm + 1e-6)) for g in reference]
    ddp = DDP(TokenModel(vocab=VOCAB, seed=0))
    after = scale_after_window(ddp, mine, MAX_NORM)
    return {
        "tokens_per_rank": counts,
        "tokens_per_micro_batch": [[int(token_count(y)) for _, y in w] for w in windows],
        "global_tokens": global_count,
        "naive_rel_error": worst_over_ranks(relative_error(naive, reference)),
        "scale_before_max_diff": worst_over_ranks(max_difference(before, reference)),
        "scale_after_count": after["count"],
        "scale_after_clipped_max_diff": worst_over_ranks(
            max_difference(grads_of(ddp.module), clipped_reference)
        ),
        "max_norm": MAX_NORM,
        "true_grad_norm": true_norm,
        "norm_clipping_sees": after["norm_clipping_sees"],
        "norm_before_scaling": after["norm_before_scaling"],
    }


# ---------------------------------------------------------------- 2. unequal micro-batches
