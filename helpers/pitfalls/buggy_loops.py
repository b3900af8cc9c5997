"""Running a training loop (plainly, or under the loop auditor), measuring what a pitfall
costs, and the buggy loops of notebook 05, which notebook 06 runs again under the auditor.

Notebook 05 defines each loop below in a cell of its own (tests/pitfalls/test_pitfalls.py checks
that its cells and these functions are the same code); notebook 06 prints them with
``show_source`` and audits them."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from helpers.accumulation import windows
from helpers.translation import N_, translate

if TYPE_CHECKING:  # the auditor is imported only where a run uses it: notebook 05 needs none
    pass


def graph_size(tensor: torch.Tensor) -> int:
    """How many operation nodes of autograd's graph ``tensor`` keeps reachable (0 for a
    detached tensor); the parameters' gradient accumulators, shared by every graph, are not
    counted."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            translate(N_("expected a tensor, got {kind}")).format(kind=type(tensor).__name__)
        )
    seen, stack = set(), [tensor.grad_fn] if tensor.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(
            child
            for child, _ in node.next_functions
            if child is not None and type(child).__name__ != "AccumulateGrad"
        )
    return len(seen)


class _Saved:
    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


class SavedTensorMeter:
    """Inside a ``with`` block, counts the bytes of activations (tensors that autograd
    computed, not inputs or parameters) that graphs saved for backward and still hold:
    ``held_bytes()``. Backward (without ``retain_graph``) releases them; a graph kept alive
    keeps them. Uses ``torch.autograd.graph.saved_tensors_hooks``; saved tensors are stored
    detached, so double backward (``create_graph``) is not measured."""

    def __init__(self):
        self._saved: list[tuple[weakref.ref, int, int]] = []
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, tensor: torch.Tensor) -> _Saved:
        box = _Saved(tensor.detach())  # detached: a saved output must not point to its graph
        base = tensor if tensor._base is None else tensor._base  # a view of a weight is not
        if base.grad_fn is not None:  # an activation; only what autograd computed counts
            size = tensor.untyped_storage().nbytes()
            self._saved.append((weakref.ref(box), tensor.untyped_storage().data_ptr(), size))
        return box

    @staticmethod
    def _unpack(box: _Saved) -> torch.Tensor:
        return box.tensor

    def held_bytes(self) -> int:
        """Bytes of saved activations that a graph still holds (each storage once)."""
        self._saved = [entry for entry in self._saved if entry[0]() is not None]
        return sum(dict((pointer, size) for _, pointer, size in self._saved).values())

    def __enter__(self) -> SavedTensorMeter:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)


# ---------------------------------------------------------------- notebook 05's loops
# Each is a cell of notebook 05, character for character (tests/pitfalls/test_pitfalls.py).


def train(model, optimizer, batches, epochs=3):
    losses = []
    for _ in range(epochs):
        for inputs, targets in batches:
            optimizer.zero_grad()
            loss = F.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def train_without_zero_grad(model, optimizer, batches, epochs=3):
    losses = []
    for _ in range(epochs):
        for inputs, targets in batches:
            loss = F.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def zero_between(model, optimizer, batches, set_to_none=True):
    for inputs, targets in batches:
        F.mse_loss(model(inputs), targets).backward()
        optimizer.zero_grad(set_to_none=set_to_none)
        optimizer.step()


def forgot_backward(model, optimizer, batches):
    losses = []
    for inputs, targets in batches:
        optimizer.zero_grad()
        losses.append(F.mse_loss(model(inputs), targets).item())  # the bug: no backward()
        optimizer.step()
    return losses


def accumulate_without_dividing(model, optimizer, batches, k=4):
    for start in range(0, len(batches), k):  # one window of k micro-batches per step
        optimizer.zero_grad()
        for inputs, targets in batches[start : start + k]:
            F.mse_loss(model(inputs), targets).backward()  # not divided by k: k times the gradient
        optimizer.step()


def accumulate_dropping_tail(model, optimizer, batches, k=4):
    optimizer.zero_grad()
    for i, (inputs, targets) in enumerate(batches):
        (F.mse_loss(model(inputs), targets) / k).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def accumulate_every_window(model, optimizer, batches, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        optimizer.step()


def clipped_window(model, optimizer, batches, per_micro_batch, k=4, max_norm=0.5):
    optimizer.zero_grad()
    for inputs, targets in batches[:k]:
        (F.mse_loss(model(inputs), targets) / k).backward()
        if per_micro_batch:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if not per_micro_batch:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    used = torch.cat([p.grad.flatten() for p in model.parameters()])
    optimizer.step()
    return used


def train_summing_loss_tensors(model, optimizer, batches):
    total = 0.0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        total += loss  # the bug: loss.item() is what was meant
    return total


def new_head_then_train(model, optimizer, batches):
    model[-1] = nn.Linear(16, 1)  # after the optimizer was built
    start = model[-1].weight.detach().clone()
    train(model, optimizer, batches, epochs=1)
    return (model[-1].weight.detach() - start).abs().max().item()


def accumulate_with_scheduler(model, optimizer, batches, scheduler, per_micro_batch, k=4):
    used = []
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
            if per_micro_batch:
                scheduler.step()
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if not per_micro_batch:
            scheduler.step()
    return used


def amp_window(model, optimizer, batches, scaler, unscale_first, k=4):
    optimizer.zero_grad()
    for inputs, targets in batches[:k]:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets) / k
        scaler.scale(loss).backward()
    if unscale_first:
        scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    if not unscale_first:
        scaler.unscale_(optimizer)
    used = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()
    scaler.step(optimizer)
    scaler.update()
    return used


# ---------------------------------------------------------------- notebook 06's prediction
# Exercise 06.1 shows this loop in its cell, character for character
# (tests/pitfalls/test_pitfalls.py), and its checker runs it under the auditor: the answer is what
# the auditor reports.


def accumulate_clipping(model, optimizer, micro_batches, accumulation_steps=4):
    optimizer.zero_grad()
    for i, (inputs, targets) in enumerate(micro_batches):
        F.mse_loss(model(inputs), targets).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()


# The loops notebook 05 defines in its cells (tests/pitfalls/test_pitfalls.py compares them).
NOTEBOOK_05_LOOPS = (
    train,
    train_without_zero_grad,
    zero_between,
    forgot_backward,
    accumulate_dropping_tail,
    clipped_window,
    train_summing_loss_tensors,
    new_head_then_train,
    accumulate_with_scheduler,
    amp_window,
)
