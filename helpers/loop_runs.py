"""Running a training loop as the notebooks do, plainly or under the loop auditor, and what
a run leaves behind (losses, gradients, weights, the auditor's findings): notebook 05 runs
its buggy loops with it, notebook 06 audits them, and the exercise checkers of 06 and 07
judge a learner's loop by it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from helpers.arguments import check_batches
from helpers.data import Batch
from helpers.models import make_mlp
from helpers.training import trainable_parameters
from helpers.translation import _

if TYPE_CHECKING:  # the auditor is imported only where a run uses it: notebook 05 needs none
    from helpers.audit import LoopAuditor


@dataclass
class LoopRun:
    """One loop run by :func:`run_loop`: the trained ``model``, its ``optimizer``, what the
    loop returned (``result``) and the weights it started from (``start``)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    result: object
    start: list[torch.Tensor]

    def weight_change(self) -> float:
        """The largest absolute change of any weight since the start."""
        return max(
            (p.detach() - s).abs().max().item()
            for p, s in zip(self.model.parameters(), self.start, strict=True)
        )


@dataclass
class AuditedRun(LoopRun):
    """One loop run by :func:`audited_run`: a :class:`LoopRun` and its ``auditor``."""

    auditor: LoopAuditor | None = None

    @property
    def codes(self) -> list[str]:
        return self.auditor.codes


def _prepare(loop, batches, model, make_optimizer, make_scheduler, scaler):
    """The fresh model, optimizer and extras (scheduler, scaler) a run starts from."""
    if not callable(loop):
        raise TypeError(_("loop must be a function loop(model, optimizer, batches, ...)"))
    batches = check_batches(
        batches, argument="batches", item=_("batch"), empty=_("batches is empty: give at least one")
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
    return batches, model, optimizer, extras, start


def run_loop(
    loop: Callable,
    batches: Sequence[Batch],
    *,
    model: nn.Module | None = None,
    make_optimizer: Callable[[list], torch.optim.Optimizer] | None = None,
    make_scheduler: Callable[[torch.optim.Optimizer], object] | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> LoopRun:
    """Run ``loop(model, optimizer, batches, **extras)`` once, on a fresh model.

    Defaults: a fresh seeded ``make_mlp((features, 16, 1))`` and ``SGD(lr=0.01,
    momentum=0.9)`` over all its parameters. ``extras`` holds ``scheduler`` and ``scaler``
    when given, so the loop can use them."""
    batches, model, optimizer, extras, start = _prepare(
        loop, batches, model, make_optimizer, make_scheduler, scaler
    )
    result = loop(model, optimizer, batches, **extras)
    return LoopRun(model, optimizer, result, start)


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
    """:func:`run_loop` under a :class:`LoopAuditor`: ``accumulation_steps`` and ``allow``
    (codes the loop does on purpose) go to the auditor."""
    batches, model, optimizer, extras, start = _prepare(
        loop, batches, model, make_optimizer, make_scheduler, scaler
    )
    auditor, result = run_under_auditor(
        loop, model, optimizer, batches, extras, accumulation_steps, allow
    )
    return AuditedRun(model, optimizer, result, start, auditor)


def run_under_auditor(loop, model, optimizer, batches, extras, accumulation_steps, allow):
    """The core of :func:`audited_run`: the loop runs, unchanged, inside a LoopAuditor."""
    from helpers.audit import LoopAuditor  # here, not at import: notebook 05 needs no auditor

    with LoopAuditor(model, optimizer, accumulation_steps, allow=allow, **extras) as auditor:
        result = loop(model, optimizer, batches, **extras)
    return auditor, result
