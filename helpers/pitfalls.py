"""Running a training loop under the loop auditor, and measuring what a pitfall costs."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from helpers.audit import LoopAuditor
from helpers.data import Batch, _positive_int, check_batches
from helpers.models import make_mlp
from helpers.training import trainable_parameters


def make_teacher_batches(
    n_batches: int = 12, batch_size: int = 8, features: int = 8, seed: int = 0
) -> list[Batch]:
    """Regression batches with something to learn: ``y = x @ w + 0.1 * noise`` for a fixed
    random ``w`` (seeded, the global random state untouched)."""
    for value, name in (
        (n_batches, "n_batches"),
        (batch_size, "batch_size"),
        (features, "features"),
    ):
        _positive_int(value, name)
    generator = torch.Generator().manual_seed(seed)
    teacher = torch.randn(features, 1, generator=generator)
    inputs = torch.randn(n_batches * batch_size, features, generator=generator)
    targets = inputs @ teacher + 0.1 * torch.randn(len(inputs), 1, generator=generator)
    return list(zip(inputs.split(batch_size), targets.split(batch_size), strict=True))


@dataclass
class AuditedRun:
    """One loop run under a :class:`LoopAuditor`: the trained ``model``, its ``optimizer``,
    the ``auditor``, what the loop returned (``result``) and the weights it started from."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    auditor: LoopAuditor
    result: object
    start: list[torch.Tensor]

    @property
    def codes(self) -> list[str]:
        return self.auditor.codes

    def weight_change(self) -> float:
        """The largest absolute change of any weight since the start."""
        return max(
            (p.detach() - s).abs().max().item()
            for p, s in zip(self.model.parameters(), self.start, strict=True)
        )


def audited_run(
    loop: Callable,
    batches: Sequence[Batch],
    *,
    accumulation_steps: int | None = None,
    model: nn.Module | None = None,
    make_optimizer: Callable[[list], torch.optim.Optimizer] | None = None,
    make_scheduler: Callable[[torch.optim.Optimizer], object] | None = None,
    scaler: torch.amp.GradScaler | None = None,
    allow=(),
) -> AuditedRun:
    """Run ``loop(model, optimizer, batches, **extras)`` under a :class:`LoopAuditor`.

    Defaults: a fresh seeded ``make_mlp((features, 16, 1))`` and ``SGD(lr=0.01,
    momentum=0.9)`` over all its parameters. ``extras`` holds ``scheduler`` and ``scaler``
    when given, so the loop can use them; ``allow`` goes to the auditor (codes the loop
    does on purpose)."""
    if not callable(loop):
        raise TypeError("loop must be a function loop(model, optimizer, batches, ...)")
    batches = check_batches(
        batches, argument="batches", item="batch", empty="batches is empty: give at least one"
    )
    if model is None:
        model = make_mlp((batches[0][0].shape[-1], 16, 1), seed=0)
    params = trainable_parameters(model)
    optimizer = (
        make_optimizer(params)
        if make_optimizer is not None
        else torch.optim.SGD(params, lr=0.01, momentum=0.9)
    )
    extras = {}
    if make_scheduler is not None:
        extras["scheduler"] = make_scheduler(optimizer)
    if scaler is not None:
        extras["scaler"] = scaler
    start = [p.detach().clone() for p in model.parameters()]
    auditor, result = run_under_auditor(
        loop, model, optimizer, batches, extras, accumulation_steps, allow
    )
    return AuditedRun(model, optimizer, auditor, result, start)


def run_under_auditor(loop, model, optimizer, batches, extras, accumulation_steps, allow):
    """The core of :func:`audited_run`: the loop runs, unchanged, inside a LoopAuditor."""
    with LoopAuditor(model, optimizer, accumulation_steps, allow=allow, **extras) as auditor:
        result = loop(model, optimizer, batches, **extras)
    return auditor, result


def graph_size(tensor: torch.Tensor) -> int:
    """How many operation nodes of autograd's graph ``tensor`` keeps reachable (0 for a
    detached tensor); the parameters' gradient accumulators, shared by every graph, are not
    counted."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a tensor, got {type(tensor).__name__}")
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
