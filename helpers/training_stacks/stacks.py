"""Notebook 08's single-process parts: the "scale after accumulating" window (with the ranks
of a DDP run simulated one after another in this process) and the course's "scale before"
window to compare it with, and optimizer-in-backward tried with accumulation.

A window here is a list of micro-batches ``(tokens, targets)`` of padded token sequences
(targets ``-100`` past each sequence's end); a "rank window" is one such list per rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from helpers.data import make_padded_tokens
from helpers.models import TokenModel
from helpers.translation import _

PAD = -100
Batch = tuple[torch.Tensor, torch.Tensor]


def token_loss_sum(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The sum (not the mean) of a micro-batch's per-token losses, padding ignored."""
    return F.cross_entropy(model(tokens), targets, ignore_index=PAD, reduction="sum")


def token_count(targets: torch.Tensor) -> torch.Tensor:
    """The micro-batch's tokens that count (targets other than the padding), as a tensor: a
    real loop all-reduces it."""
    return (targets != PAD).sum()


def make_rank_windows(
    world: int = 2, k: int = 3, seed: int = 7, max_length: int = 6
) -> list[list[Batch]]:
    """One window of ``k`` micro-batches per rank, of padded sequences of random lengths and
    of 1 to 3 sequences each, so the ranks count different numbers of tokens."""
    if world < 1 or k < 1:
        raise ValueError(
            _("world and k must be at least 1, got world={world}, k={k}").format(world=world, k=k)
        )
    windows = []
    for rank in range(world):
        window = []
        for j in range(k):
            n = 1 + (rank + 2 * j) % 3
            tokens, targets, _lengths = make_padded_tokens(n, max_length, seed=seed + 10 * rank + j)
            window.append((tokens, targets))
        windows.append(window)
    return windows


def _check_rank_windows(rank_windows) -> list:
    """The ranks' windows, each left as it is (a list, or a loader that is read once)."""
    if not isinstance(rank_windows, Sequence) or not rank_windows:
        raise TypeError(_("rank_windows must be a list with one list of micro-batches per rank"))
    return list(rank_windows)


def backward_token_sums(model: nn.Module, micro_batches: Iterable[Batch]) -> torch.Tensor:
    """What each rank runs in a window: backward the sum of each micro-batch's token losses,
    counting its tokens as it goes. Returns the count (this rank's; the caller all-reduces)."""
    tokens = torch.zeros((), dtype=torch.int64)
    for inputs, targets in micro_batches:  # no count is needed before the first backward
        token_loss_sum(model, inputs, targets).backward()
        tokens += token_count(targets)
    return tokens


def scale_after_accumulating(model: nn.Module, rank_windows) -> torch.Tensor:
    """One window on simulated ranks, scaled after accumulating: each rank backwards its
    token-loss sums; DDP's all-reduce averages the ranks' gradients; the token count is
    all-reduced; the gradients are multiplied once by world / count. Returns the count."""
    windows = _check_rank_windows(rank_windows)
    world, params = len(windows), list(model.parameters())
    rank_grads, tokens = [], torch.zeros((), dtype=torch.int64)
    for window in windows:  # the ranks, one after another (on real ranks: at the same time)
        model.zero_grad()
        tokens += backward_token_sums(model, window)  # the all-reduce of the count
        rank_grads.append([p.grad.clone() for p in params])
    for p, *grads in zip(params, *rank_grads, strict=True):
        p.grad = torch.stack(grads).mean(0)  # what DDP's all-reduce leaves on every rank
    for p in params:
        p.grad.mul_(world / tokens)  # once, before clipping
    return tokens


def scale_before_accumulating(model: nn.Module, rank_windows) -> torch.Tensor:
    """The same window scaled before: the window's count over all ranks first, then every
    micro-batch's token-loss sum times world / count is backwarded (as notebook 09's capstone
    does)."""
    windows = [list(window) for window in _check_rank_windows(rank_windows)]  # read it all
    world, params = len(windows), list(model.parameters())
    tokens = sum(token_count(targets) for window in windows for _, targets in window)
    rank_grads = []
    for window in windows:
        model.zero_grad()
        for inputs, targets in window:
            (token_loss_sum(model, inputs, targets) * world / tokens).backward()
        rank_grads.append([p.grad.clone() for p in params])
    for p, *grads in zip(params, *rank_grads, strict=True):
        p.grad = torch.stack(grads).mean(0)
    return tokens


def one_process_gradients(model: nn.Module, rank_windows) -> list[torch.Tensor]:
    """The reference: one process on every micro-batch of every rank, the summed token
    losses divided by all their tokens."""
    batches = [batch for window in _check_rank_windows(rank_windows) for batch in window]
    if not batches:
        raise ValueError(_("the windows hold no micro-batch"))
    tokens = sum(token_count(targets) for _, targets in batches)
    loss = sum(token_loss_sum(model, inputs, targets) for inputs, targets in batches) / tokens
    return list(torch.autograd.grad(loss, list(model.parameters())))


def max_difference(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """The largest absolute difference between two lists of tensors of the same shapes."""
    if len(a) != len(b):
        raise ValueError(_("{n_a} tensors against {n_b}").format(n_a=len(a), n_b=len(b)))
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


def draw_order(window_function: Callable, model: nn.Module, window: Sequence[Batch]) -> list:
    """Run ``window_function(model, [window])`` on a generator of the micro-batches and record
    the order of events: ``("draw", j)`` when micro-batch j is taken from the loader,
    ``"backward"`` after each backward. Shows when a loop needs its micro-batches."""
    events: list = []

    def loader():
        for j, batch in enumerate(window):
            events.append(("draw", j))
            yield batch

    first = next(iter(model.parameters()))
    handle = first.register_post_accumulate_grad_hook(lambda _p: events.append("backward"))
    try:
        window_function(model, [loader()])
    finally:
        handle.remove()
    return events


def make_token_model(seed: int = 0) -> nn.Module:
    return TokenModel(seed=seed)


# ------------------------------------------------------------ optimizer-in-backward
def step_in_backward(model: nn.Module, lr: float) -> list[int]:
    """Optimizer-in-backward: one SGD per parameter, stepped (and its gradient freed) by a
    post-accumulate-grad hook as soon as backward has produced that parameter's gradient.
    Returns a list that counts the steps taken, one entry per backward that stepped."""
    steps: list[int] = []
    optimizers = {p: torch.optim.SGD([p], lr=lr) for p in model.parameters()}
    first = next(iter(optimizers))  # counts each backward once (the hook runs per parameter)

    def hook(param: torch.Tensor) -> None:
        optimizers[param].step()  # while backward is still running
        optimizers[param].zero_grad()  # the gradient is gone as soon as it is used
        if param is first:
            steps.append(1)

    for p in optimizers:
        p.register_post_accumulate_grad_hook(hook)  # runs once backward has written p.grad
    return steps  # filled in by the hook


def accumulate_in_backward(model: nn.Module, window: Sequence[Batch], lr: float) -> dict:
    """Try to accumulate ``window`` with the optimizer stepping in backward. Returns the
    steps taken and the gradient norm that clipping sees after the window."""
    steps = step_in_backward(model, lr)  # the hook above
    for inputs, targets in window:
        loss = F.cross_entropy(model(inputs), targets, ignore_index=PAD) / len(window)
        loss.backward()  # steps every parameter, then frees its gradient
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # .grad is all None
    return {"steps": len(steps), "clip_norm": float(norm)}


def accumulate_then_step(model: nn.Module, window: Sequence[Batch], lr: float) -> int:
    """The ordinary window: the same losses, one step after the last backward."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    steps: list[int] = []
    optimizer.register_step_post_hook(lambda *_: steps.append(1))  # counts every step()
    optimizer.zero_grad()
    for inputs, targets in window:
        (F.cross_entropy(model(inputs), targets, ignore_index=PAD) / len(window)).backward()
    optimizer.step()
    return len(steps)
