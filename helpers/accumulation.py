"""Gradient accumulation done exactly: after one window of micro-batches, ``.grad`` equals
the gradient of the whole window's loss, as if the window had been one batch."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable

import torch
from torch import nn

from helpers.arguments import check_batches, positive_int
from helpers.data import Batch
from helpers.training import trainable_parameters
from helpers.translation import _

NORMALIZATIONS = ("samples", "tokens")
REDUCTIONS = ("mean", "sum")


def _loss_reduction(loss_fn, loss_reduction: str | None) -> str:
    if loss_reduction is None:
        loss_reduction = getattr(loss_fn, "reduction", None)
        if loss_reduction is None:
            raise TypeError(
                _(
                    "cannot tell how loss_fn reduces: pass loss_reduction='mean' or 'sum' "
                    "(or use a loss module such as nn.CrossEntropyLoss, which has "
                    ".reduction)"
                )
            )
    if loss_reduction not in REDUCTIONS:
        raise ValueError(
            _(
                "loss_reduction must be 'mean' or 'sum', got {loss_reduction!r} "
                "(reduction='none' gives one loss per element: reduce it first)"
            ).format(loss_reduction=loss_reduction)
        )
    return loss_reduction


def count_items(targets: torch.Tensor, normalize: str, ignore_index: int = -100) -> int:
    """What one micro-batch contributes to the window's denominator: its number of samples
    (``normalize="samples"``) or of targets that are not ``ignore_index`` (``"tokens"``)."""
    if not isinstance(targets, torch.Tensor):
        raise TypeError(
            _("targets must be a tensor, got {kind}").format(kind=type(targets).__name__)
        )
    if normalize == "samples":
        return len(targets)
    if normalize == "tokens":
        return int((targets != ignore_index).sum().item())
    raise ValueError(
        _("normalize must be 'samples' or 'tokens', got {normalize!r}").format(normalize=normalize)
    )


def accumulate_gradients(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    micro_batches: Iterable[Batch],
    normalize: str = "samples",
    *,
    loss_reduction: str | None = None,
    ignore_index: int | None = None,
) -> float:
    """Forward and backward over one accumulation window; return the window's loss.

    Afterwards each parameter's ``.grad`` holds (added to what it held before: zero the
    grads before the window) the gradient of the loss of the whole window as one batch:
    the mean over all its samples (``normalize="samples"``) or over all its targets that
    are not ``ignore_index`` (``normalize="tokens"``, the per-token mean of language
    models). Micro-batches may differ in size, and a window may be shorter than usual.

    ``loss_fn(outputs, targets)`` may reduce by ``"mean"`` (over the micro-batch's samples
    or non-ignored tokens, as PyTorch's unweighted losses do) or by ``"sum"``; it is read
    from ``loss_fn.reduction`` unless ``loss_reduction`` says it. Each micro-batch's loss is
    rescaled by its share of the window's count, so no micro-batch is over- or under-weighted.
    With ``"sum"`` the result is the window's sum divided by its count: for targets with
    several elements per sample (MSE over 3 outputs) that is the mean per *sample*, which is
    the mean-reduced result times the elements per sample. ``ignore_index`` defaults to the
    loss's own (``nn.CrossEntropyLoss.ignore_index``), else -100. Losses with class weights
    are refused: their mean divides by the targets' total weight, not by a count.
    Returns the window's loss as a float (no graph is kept).
    """
    params = trainable_parameters(model)
    if normalize not in NORMALIZATIONS:
        raise ValueError(
            _("normalize must be 'samples' or 'tokens', got {normalize!r}").format(
                normalize=normalize
            )
        )
    reduction = _loss_reduction(loss_fn, loss_reduction)
    if getattr(loss_fn, "weight", None) is not None:
        raise ValueError(
            _(
                "loss_fn has class weights: its mean divides by the targets' total "
                "weight, which accumulate_gradients does not count; use a loss without "
                "weight="
            )
        )
    own_index = getattr(loss_fn, "ignore_index", None)
    if ignore_index is None:
        ignore_index = -100 if own_index is None else own_index
    elif own_index is not None and own_index != ignore_index:
        raise ValueError(
            _(
                "ignore_index={ignore_index} but loss_fn ignores {own_index}: they must agree"
            ).format(ignore_index=ignore_index, own_index=own_index)
        )
    window = check_batches(
        micro_batches,
        argument="micro_batches",
        item=_("micro-batch"),
        empty=_("the window is empty: give at least one (inputs, targets) micro-batch"),
    )
    if normalize == "samples" and own_index is not None:
        if any(bool((targets == ignore_index).any()) for _, targets in window):
            raise ValueError(
                _(
                    "the targets contain ignore_index ({ignore_index}), so each "
                    "micro-batch's mean is over its tokens, not its samples: use "
                    "normalize='tokens'"
                ).format(ignore_index=ignore_index)
            )
    counts = [count_items(targets, normalize, ignore_index) for _, targets in window]
    total = sum(counts)
    if total == 0:
        raise ValueError(_("the window has no targets to learn from (every token is ignore_index)"))
    return backward_window(model, loss_fn, window, counts, reduction, params[0].device)


def backward_window(model, loss_fn, window, counts, reduction, device) -> float:
    """The core of :func:`accumulate_gradients`: one ``backward()`` per micro-batch, its loss
    scaled by the micro-batch's share of the window's ``counts`` (samples or tokens)."""
    total = sum(counts)
    window_loss = 0.0
    for (inputs, targets), count in zip(window, counts, strict=True):
        if count == 0:
            continue  # nothing to learn here, and a mean over zero tokens would be NaN
        loss = loss_fn(model(inputs.to(device)), targets.to(device))
        if loss.dim() != 0:
            raise ValueError("loss_fn must return a scalar (reduction 'mean' or 'sum')")
        share = count / total if reduction == "mean" else 1 / total  # a sum is count x mean
        (loss * share).backward()  # .grad adds up to the gradient of the window's loss
        window_loss += loss.item() * share  # the window's loss: what to log
    return window_loss


def windows(loader: Iterable[Batch], accumulation_steps: int) -> Iterable[list[Batch]]:
    """Group consecutive micro-batches into windows of ``accumulation_steps``; the last
    window keeps whatever is left (it is not dropped)."""
    positive_int(accumulation_steps, "accumulation_steps")
    window: list[Batch] = []
    for batch in loader:
        window.append(batch)
        if len(window) == accumulation_steps:
            yield window
            window = []
    if window:
        yield window


def train_with_accumulation(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    loader: Iterable[Batch],
    optimizer: torch.optim.Optimizer,
    accumulation_steps: int,
    normalize: str = "samples",
    *,
    loss_reduction: str | None = None,
    ignore_index: int | None = None,
) -> list[float]:
    """One epoch: one optimizer step per window of ``accumulation_steps`` micro-batches,
    including the short last window; returns each window's loss."""
    trainable_parameters(model)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            _("optimizer must be a torch.optim.Optimizer, got {optimizer!r}").format(
                optimizer=optimizer
            )
        )
    losses = []
    for window in windows(loader, accumulation_steps):
        optimizer.zero_grad()
        losses.append(
            accumulate_gradients(
                model,
                loss_fn,
                window,
                normalize,
                loss_reduction=loss_reduction,
                ignore_index=ignore_index,
            )
        )
        optimizer.step()
    if not losses:
        raise ValueError(_("the loader yielded no micro-batches: nothing to train on"))
    return losses


def full_batch_gradients(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> list[torch.Tensor]:
    """The reference: gradients of ``loss_fn`` over one batch, without touching ``.grad``."""
    params = trainable_parameters(model)
    device = params[0].device
    loss = loss_fn(model(inputs.to(device)), targets.to(device))
    return list(torch.autograd.grad(loss, params))


def current_gradients(model: nn.Module) -> list[torch.Tensor]:
    """Copies of the model's ``.grad`` tensors (zeros where a grad is None)."""
    return [
        p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
        for p in trainable_parameters(model)
    ]


def relative_error(got: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    """``||got - reference|| / ||reference||`` over all tensors together."""
    if len(got) != len(reference) or not got:
        raise ValueError(_("got and reference must be equally long, non-empty lists of tensors"))
    for a, b in zip(got, reference, strict=True):
        if a.shape != b.shape:
            raise ValueError(
                _("shapes differ: {shape} and {shape2}").format(
                    shape=tuple(a.shape), shape2=tuple(b.shape)
                )
            )
    diff = torch.cat([(a - b).flatten() for a, b in zip(got, reference, strict=True)])
    return (diff.norm() / torch.cat([b.flatten() for b in reference]).norm()).item()


SCALINGS = ("exact", "divide by k")
"""How the explorer scales micro-batch losses: ``accumulate_gradients``, or the article's
``loss / accumulation_steps`` for every micro-batch."""


def tail_window_error(
    model: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    micro_batch_size: int,
    accumulation_steps: int,
    scaling: str = "exact",
) -> dict[str, float]:
    """Split a data set into micro-batches and windows as a loader would, accumulate the last
    (possibly short) window with ``scaling``, and compare with that window as one batch
    (mean cross-entropy). Returns the sizes involved and the relative gradient error."""
    positive_int(micro_batch_size, "micro_batch_size")
    positive_int(accumulation_steps, "accumulation_steps")
    if scaling not in SCALINGS:
        raise ValueError(
            _("scaling must be one of {names}, got {scaling!r}").format(
                names=", ".join(SCALINGS), scaling=scaling
            )
        )
    micro = list(zip(inputs.split(micro_batch_size), labels.split(micro_batch_size), strict=True))
    all_windows = list(windows(micro, accumulation_steps))
    tail = all_windows[-1]
    loss_fn = nn.CrossEntropyLoss()
    reference = full_batch_gradients(
        model, loss_fn, torch.cat([x for x, _ in tail]), torch.cat([y for _, y in tail])
    )
    model = copy.deepcopy(model)
    model.zero_grad()
    if scaling == "exact":
        accumulate_gradients(model, loss_fn, tail)
    else:
        for x, y in tail:
            (loss_fn(model(x), y) / accumulation_steps).backward()
    return {
        "effective batch": micro_batch_size * accumulation_steps,
        "windows": len(all_windows),
        "micro-batches in the last window": len(tail),
        "samples in the last window": sum(len(y) for _, y in tail),
        "gradient error": relative_error(current_gradients(model), reference),
    }
