"""The pieces every rank program of notebook 07 shares (``helpers.stacks_ranks``): the token
data and model, gradients compared across ranks, and section 1's token-loss windows on DDP
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
from helpers.stacks import PAD, max_difference, token_count, token_loss_sum

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
    """Each micro-batch's own token mean, divided by the window's length; DDP averages the
    ranks: wrong when the ranks (or micro-batches) count different numbers of tokens."""
    for j, (x, y) in enumerate(window):
        with ddp.no_sync() if j < len(window) - 1 else contextlib.nullcontext():
            loss = nn.functional.cross_entropy(ddp(x), y, ignore_index=PAD)
            (loss / len(window)).backward()


def scale_before_window(ddp: DDP, window) -> int:
    """Scaling before the backward, as torchtitan does since its PR 2206: all-reduce the
    window's token count first; each micro-batch's loss is its token-loss sum times
    ``world / global count`` (the world size cancels DDP's averaging; torchtitan divides by
    the count alone and turns FSDP's averaging off instead)."""
    count = torch.tensor([sum(int(token_count(y)) for _, y in window)])
    dist.all_reduce(count)
    for j, (x, y) in enumerate(window):
        with ddp.no_sync() if j < len(window) - 1 else contextlib.nullcontext():
            loss = token_loss_sum(ddp, x, y)
            (loss * dist.get_world_size() / count.item()).backward()
    return count.item()


def scale_after_window(ddp: DDP, window) -> int:
    """torchtune's way (its PRs 1917 and 2172): backward of each micro-batch's token-loss sum (no
    count needed before the first backward), the count all-reduced once while the last
    backward runs, then the gradients scaled once by ``world / global count``, ready for
    clipping."""
    count = torch.zeros(1, dtype=torch.int64)
    for j, (x, y) in enumerate(window):
        last = j == len(window) - 1
        with contextlib.nullcontext() if last else ddp.no_sync():
            loss = token_loss_sum(ddp, x, y)
            count += token_count(y)
            if last:
                pending = dist.all_reduce(count, async_op=True)
            loss.backward()
    pending.wait()
    for p in ddp.parameters():
        p.grad *= dist.get_world_size() / count.item()
    return count.item()


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
    ddp = DDP(TokenModel(vocab=VOCAB, seed=0))
    scale_after_window(ddp, mine)
    after = grads_of(ddp.module)
    sum_norm = torch.nn.utils.get_total_norm(after).item() * global_count / world
    seen_norm = torch.nn.utils.clip_grad_norm_(ddp.parameters(), MAX_NORM).item()
    true_norm = torch.nn.utils.get_total_norm(reference).item()
    return {
        "tokens_per_rank": counts,
        "global_tokens": global_count,
        "naive_rel_error": worst_over_ranks(relative_error(naive, reference)),
        "scale_before_max_diff": worst_over_ranks(max_difference(before, reference)),
        "scale_after_max_diff": worst_over_ranks(max_difference(after, reference)),
        "scale_after_vs_before_max_diff": worst_over_ranks(max_difference(after, before)),
        "max_norm": MAX_NORM,
        "true_grad_norm": true_norm,
        "norm_clipping_sees": seen_norm,
        "norm_before_scaling": sum_norm,
    }


# ---------------------------------------------------------------- 2. unequal micro-batches
