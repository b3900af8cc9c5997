"""Accumulation in everyday training (notebook 03): a learning-rate schedule stepped once per
optimizer step, and the article's "1 vs 4 accumulation steps" run, counted in updates."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import torch
from matplotlib.figure import Figure
from torch import nn

from helpers.accumulation import accumulate_gradients, windows
from helpers.arguments import positive_int
from helpers.data import Batch
from helpers.plots import FIGSIZE
from helpers.training import trainable_parameters
from helpers.translation import N_, translate


def _check_training(model, optimizer, loader, epochs) -> None:
    trainable_parameters(model)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            translate(N_("optimizer must be a torch.optim.Optimizer, got {optimizer!r}")).format(
                optimizer=optimizer
            )
        )
    if isinstance(loader, (str, bytes)) or not isinstance(loader, Iterable):
        raise TypeError(
            translate(N_("loader must be a list of (inputs, targets) pairs or a DataLoader"))
        )
    if iter(loader) is loader:
        raise TypeError(
            translate(
                N_(
                    "loader is an iterator: it would be empty after the first epoch; pass "
                    "a list of (inputs, targets) pairs or a DataLoader, which can be "
                    "iterated again"
                )
            )
        )
    positive_int(epochs, "epochs")


def train_with_schedule(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    loader: Iterable[Batch],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    accumulation_steps: int,
    epochs: int,
) -> list[float]:
    """Train ``epochs`` epochs, one ``scheduler.step()`` after each optimizer step; return
    the learning rate each optimizer step used."""
    _check_training(model, optimizer, loader, epochs)  # clear errors for wrong arguments
    used = []
    for _ in range(epochs):
        for window in windows(loader, accumulation_steps):  # the short last one kept
            optimizer.zero_grad()
            accumulate_gradients(model, loss_fn, window)  # checks the window, runs backward_window
            used.append(optimizer.param_groups[0]["lr"])  # before scheduler.step() changes it
            optimizer.step()
            scheduler.step()  # once per optimizer step, never per micro-batch
    return used


@dataclass
class UpdateCurve:
    """One training run measured in optimizer updates: the loss over the whole training set
    at each checkpoint, with the number of updates and of epochs done by then."""

    accumulation_steps: int
    updates: list[int] = field(default_factory=list)
    epochs: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    def loss_after(self, updates: int) -> float:
        """The training loss once ``updates`` optimizer updates were made."""
        if updates not in self.updates:
            raise ValueError(
                translate(N_("no checkpoint after {updates} updates; there are {updates2}")).format(
                    updates=updates, updates2=self.updates
                )
            )
        return self.losses[self.updates.index(updates)]

    def at_epoch_ends(self) -> dict[int, float]:
        """{epoch: training loss at its end}."""
        pairs = zip(self.epochs, self.losses, strict=True)
        return {int(epoch): loss for epoch, loss in pairs if epoch.is_integer()}


def _mean_loss(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> float:
    with torch.no_grad():
        return nn.functional.cross_entropy(model(inputs), labels).item()


def train_counting_updates(
    model: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    accumulation_steps: int,
    *,
    epochs: int = 5,
    batch_size: int = 32,
    lr: float = 0.01,
    momentum: float = 0.9,
    checkpoint_every: int = 8,
    seed: int = 0,
) -> tuple[nn.Module, UpdateCurve]:
    """The article's experiment, done exactly: a copy of ``model`` trained with SGD on
    shuffled micro-batches of ``batch_size`` (the same order for every
    ``accumulation_steps``, from ``seed``), one update per window, the short last window
    included. The training-set loss is measured before training, every
    ``checkpoint_every`` updates and at the end of each epoch. Returns the trained copy and
    its :class:`UpdateCurve`."""
    for value, name in [(accumulation_steps, "accumulation_steps"), (batch_size, "batch_size")]:
        positive_int(value, name)
    positive_int(checkpoint_every, "checkpoint_every")
    positive_int(epochs, "epochs")
    if len(inputs) != len(labels) or len(inputs) == 0:
        raise ValueError(
            translate(N_("inputs and labels must be non-empty and of the same length"))
        )
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    generator = torch.Generator().manual_seed(seed)
    micro_per_epoch = math.ceil(len(inputs) / batch_size)
    curve = UpdateCurve(accumulation_steps, [0], [0.0], [_mean_loss(model, inputs, labels)])
    updates = 0
    for epoch in range(epochs):
        order = torch.randperm(len(inputs), generator=generator)
        shuffled = inputs[order].split(batch_size), labels[order].split(batch_size)
        loader = list(zip(*shuffled, strict=True))
        seen = 0
        for window in windows(loader, accumulation_steps):
            optimizer.zero_grad()
            accumulate_gradients(model, nn.CrossEntropyLoss(), window)
            optimizer.step()
            updates, seen = updates + 1, seen + len(window)
            if updates % checkpoint_every == 0 or seen == micro_per_epoch:
                curve.updates.append(updates)
                curve.epochs.append(epoch + seen / micro_per_epoch)
                curve.losses.append(_mean_loss(model, inputs, labels))
    return model, curve


def plot_updates_and_epochs(curves: Mapping[str, UpdateCurve]) -> Figure:
    """Training loss per epoch (left) and per optimizer update (right), one line per run."""
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError(translate(N_("curves must be a non-empty dict of {label: UpdateCurve}")))
    for label, curve in curves.items():
        if not isinstance(curve, UpdateCurve):
            raise TypeError(
                translate(N_("curves[{label!r}] must be an UpdateCurve, got {kind}")).format(
                    label=label, kind=type(curve).__name__
                )
            )
    fig = Figure(figsize=(FIGSIZE[0] * 1.5, FIGSIZE[1]), dpi=80, layout="constrained")
    per_epoch, per_update = fig.subplots(1, 2, sharey=True)
    for label, curve in curves.items():
        per_epoch.plot(curve.epochs, curve.losses, marker=".", label=label)
        per_update.plot(curve.updates, curve.losses, marker=".", label=label)
    per_epoch.set(xlabel="epoch", ylabel="training loss", title="per epoch: k = 1 looks better")
    per_update.set(xlabel="optimizer update", title="per update: about the same")
    for ax in (per_epoch, per_update):
        ax.grid(alpha=0.3)
    per_update.legend()
    return fig
