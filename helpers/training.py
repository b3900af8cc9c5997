"""Training loops small enough to read, with the switches the notebooks turn."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from helpers.arguments import check_batches, positive_int
from helpers.data import Batch
from helpers.translation import _


@dataclass
class History:
    """What one run recorded after each optimizer step (all on the CPU, detached)."""

    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    weights: list[torch.Tensor] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.losses)


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters of ``model`` that require grad; a clear error when there are none."""
    if not isinstance(model, nn.Module):
        raise TypeError(
            _("model must be a torch.nn.Module, got {kind}").format(kind=type(model).__name__)
        )
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(
            _(
                "the model has no parameters that require grad: nothing would be "
                "trained (did you freeze every layer, or pass a model without layers?)"
            )
        )
    return params


def train_steps(
    model: nn.Module,
    batches: Sequence[Batch],
    *,
    steps: int,
    lr: float,
    zero_grad: bool = True,
    momentum: float = 0.0,
    dampening: float = 0.0,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.mse_loss,
) -> History:
    """Train ``model`` in place with SGD for ``steps`` steps, cycling through ``batches``.

    ``zero_grad=False`` reproduces the classic bug: ``optimizer.zero_grad()`` is never called,
    so every ``backward()`` adds to what ``.grad`` already holds. Each step records the batch
    loss, the norm of all gradients the step used, and a copy of the weights after the step.
    """
    params = trainable_parameters(model)
    batches = check_batches(
        batches,
        argument="batches",
        item=_("batch"),
        empty=_("batches is empty: give at least one (inputs, targets) pair"),
    )
    positive_int(steps, "steps")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or lr <= 0:
        raise ValueError(_("lr must be a positive number, got {lr!r}").format(lr=lr))
    if momentum < 0 or dampening < 0:
        raise ValueError(_("momentum and dampening must not be negative"))
    optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum, dampening=dampening)
    device = params[0].device
    batches = [(inputs.to(device), targets.to(device)) for inputs, targets in batches]
    history = History()

    def record(loss: torch.Tensor) -> None:
        grads = [p.grad for p in params if p.grad is not None]
        history.losses.append(loss.item())
        history.grad_norms.append(torch.stack([g.norm() for g in grads]).norm().item())
        history.weights.append(torch.cat([p.detach().flatten() for p in params]).cpu())

    sgd_loop(model, optimizer, batches, steps, zero_grad, loss_fn, record)
    return history


def sgd_loop(model, optimizer, batches, steps, zero_grad, loss_fn, record) -> None:
    """The training loop of notebook 01: one step per batch; ``record(loss)`` after each."""
    for step in range(steps):
        inputs, targets = batches[step % len(batches)]  # batch after batch, epoch after epoch
        if zero_grad:
            optimizer.zero_grad()  # without it, .grad keeps the sum of all earlier gradients
        loss = loss_fn(model(inputs), targets)
        loss.backward()  # adds this batch's gradient to what .grad holds
        optimizer.step()
        record(loss)


def compare_zero_grad(
    model: nn.Module, batches: Sequence[Batch], *, steps: int, lr: float
) -> dict[str, History]:
    """Train two copies of ``model`` from the same start, with and without ``zero_grad``."""
    trainable_parameters(model)  # a clear error if nothing would train
    return {
        label: train_steps(copy.deepcopy(model), batches, steps=steps, lr=lr, zero_grad=flag)
        for label, flag in (("with zero_grad", True), ("without zero_grad", False))
    }
