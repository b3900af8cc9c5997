"""Accumulation with the tools of larger training runs: mixed precision with a GradScaler,
gradient clipping and a learning-rate scheduler, each used once per optimizer step.

``train_accumulating`` is the correct loop, and ``train_window`` its window; ``mistake=`` runs
``train_window_with_mistake`` instead, the same window with one classic error written in, so
that notebooks can measure what the error costs and show what the loop auditor reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from helpers.accumulation import windows
from helpers.arguments import check_batches, positive_int
from helpers.data import Batch
from helpers.training import trainable_parameters
from helpers.translation import _

MISTAKES = (
    "clip per micro-batch",
    "clip before unscale",
    "scheduler per micro-batch",
    "update per micro-batch",
)


@dataclass
class WindowLog:
    """Per optimizer step: the window's mean loss, the learning rate the step used, and
    the norm of the gradient it used (after unscaling and clipping)."""

    losses: list[float] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)


def _grad_norm(params: list[torch.Tensor]) -> float:
    grads = [p.grad.detach().float().norm() for p in params if p.grad is not None]
    return torch.stack(grads).norm().item() if grads else 0.0


def train_accumulating(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Sequence[Batch],
    accumulation_steps: int,
    *,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
    amp_dtype: torch.dtype | None = None,
    scaler: torch.amp.GradScaler | None = None,
    max_norm: float | None = None,
    scheduler=None,
    mistake: str | None = None,
) -> WindowLog:
    """One pass over ``batches``, one optimizer step per window of ``accumulation_steps``
    micro-batches (the short last window included), each micro-batch's mean loss weighted by
    its share of the window's samples, so every step uses the window's mean gradient.

    With ``amp_dtype`` the forward pass runs under ``torch.autocast`` on the model's device;
    with ``scaler``: scale every micro-batch's loss, ``unscale_`` once, clip, ``step`` and
    ``update`` once per window. ``max_norm`` clips once per window, and ``scheduler`` steps
    once per optimizer step. ``mistake`` (one of :data:`MISTAKES`) breaks exactly one of
    these rules."""
    trainable_parameters(model)  # a clear error for a model with nothing to train
    batches = check_batches(
        batches, argument="batches", item=_("batch"), empty=_("batches is empty: give at least one")
    )
    positive_int(accumulation_steps, "accumulation_steps")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            _("optimizer must be a torch.optim.Optimizer, got {optimizer!r}").format(
                optimizer=optimizer
            )
        )
    if mistake is not None and mistake not in MISTAKES:
        raise ValueError(
            _("mistake must be None or one of {names}, got {mistake!r}").format(
                names=", ".join(MISTAKES), mistake=mistake
            )
        )
    needs = {
        "clip per micro-batch": max_norm,
        "clip before unscale": max_norm is not None and scaler,
        "scheduler per micro-batch": scheduler,
        "update per micro-batch": scaler,
    }
    if mistake is not None and not needs[mistake]:
        raise ValueError(
            _("mistake {mistake!r} needs the tool it misuses (max_norm, scaler, ...)").format(
                mistake=mistake
            )
        )
    log = WindowLog()
    tools = dict(amp_dtype=amp_dtype, scaler=scaler, max_norm=max_norm, scheduler=scheduler)
    for window in windows(batches, accumulation_steps):
        if mistake is None:
            loss, lr, grad_norm = train_window(model, optimizer, window, loss_fn, **tools)
        else:
            loss, lr, grad_norm = train_window_with_mistake(
                model, optimizer, window, loss_fn, mistake, **tools
            )
        log.losses.append(loss)
        log.lrs.append(lr)
        log.grad_norms.append(grad_norm)
    return log


def train_window(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    window: Sequence[Batch],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    amp_dtype: torch.dtype | None = None,
    scaler: torch.amp.GradScaler | None = None,
    max_norm: float | None = None,
    scheduler=None,
) -> tuple[float, float, float]:
    """One optimizer step on ``window``, the core of :func:`train_accumulating`. Returns the
    window's loss, the learning rate of its step and its gradient's norm."""
    params = trainable_parameters(model)
    device = params[0].device
    samples = sum(len(targets) for _, targets in window)
    optimizer.zero_grad()
    total = 0.0
    for inputs, targets in window:
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_fn(model(inputs.to(device)), targets.to(device))
        loss = loss * (len(targets) / samples)  # its share, not 1/k: right for a short window too
        (scaler.scale(loss) if scaler else loss).backward()  # .grad stays scaled until unscale_
        total += loss.item()
    if scaler is not None:
        scaler.unscale_(optimizer)  # once, after the last backward and before clipping
    if max_norm is not None:
        nn.utils.clip_grad_norm_(params, max_norm)  # the whole window's gradient, once
    lr, grad_norm = optimizer.param_groups[0]["lr"], _grad_norm(params)
    if scaler is not None:
        scaler.step(optimizer)  # skips the step if a gradient is inf or NaN
        scaler.update()  # once per window: the scale stays the same within a window
    else:
        optimizer.step()
    if scheduler is not None:
        scheduler.step()  # once per optimizer step
    return total, lr, grad_norm


def train_window_with_mistake(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    window: Sequence[Batch],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    mistake: str,
    *,
    amp_dtype: torch.dtype | None = None,
    scaler: torch.amp.GradScaler | None = None,
    max_norm: float | None = None,
    scheduler=None,
) -> tuple[float, float, float]:
    """:func:`train_window` with one of :data:`MISTAKES` written in: the lines marked
    "the mistake" replace the right ones, the rest is the same."""
    params = trainable_parameters(model)
    device = params[0].device
    samples = sum(len(targets) for _, targets in window)
    optimizer.zero_grad()
    total = 0.0
    for inputs, targets in window:
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_fn(model(inputs.to(device)), targets.to(device))
        loss = loss * (len(targets) / samples)
        (scaler.scale(loss) if scaler else loss).backward()
        total += loss.item()
        if mistake == "clip per micro-batch":
            nn.utils.clip_grad_norm_(params, max_norm)  # the mistake: a partial sum clipped
        elif mistake == "scheduler per micro-batch":
            scheduler.step()  # the mistake: the schedule counts micro-batches
        elif mistake == "update per micro-batch":
            scaler.update()  # the mistake: the scale changes inside the window
    if mistake == "clip before unscale":
        nn.utils.clip_grad_norm_(params, max_norm)  # the mistake: the still scaled gradient
    if scaler is not None:
        scaler.unscale_(optimizer)
    if max_norm is not None and mistake not in ("clip per micro-batch", "clip before unscale"):
        nn.utils.clip_grad_norm_(params, max_norm)
    lr, grad_norm = optimizer.param_groups[0]["lr"], _grad_norm(params)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    if scheduler is not None and mistake != "scheduler per micro-batch":
        scheduler.step()
    return total, lr, grad_norm
