"""A training loop's calls in the order it made them: every ``backward()``, gradient clip,
``optimizer.step()``, ``zero_grad()``, scheduler step and GradScaler call, so that a figure
(:func:`helpers.plots.plot_timeline`) can show a window as it ran: its micro-batches, its
backward passes, its one step, and where clipping, ``unscale_`` and the scheduler went.

Wrap any loop: ``with CallTimeline(optimizer, scheduler=..., scaler=...) as timeline:``. With
``watch={"G": generator, "D": discriminator}`` each backward also records how much it added
to each module's gradients (:attr:`TimelineEvent.added`), which shows which graph a loss
reached.
"""

from __future__ import annotations

import functools
import itertools
import linecache
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from helpers.translation import N_, _

# How a timeline names each call, in the order its lanes are drawn, top to bottom.
TIMELINE_CALLS = {
    "backward": "backward()",
    "unscale_": "scaler.unscale_()",
    "clip": "clip_grad_norm_()",
    "step": "optimizer.step()",
    "update": "scaler.update()",
    "scheduler": "scheduler.step()",
    "zero_grad": "zero_grad()",
}
WINDOW = N_("window {number}")
_TORCH = str(Path(torch.__file__).parent)
_HERE = str(Path(__file__))


@dataclass(frozen=True)
class TimelineEvent:
    """One call: its name (a key of :data:`TIMELINE_CALLS`), the line of the loop that made it
    (``""`` where none is found), and for a backward with ``watch``, the norm of what it added
    to each watched module's gradients."""

    call: str
    line: str = ""
    added: Mapping[str, float] = field(default_factory=dict)


def _calling_line() -> str:
    """The source line of the loop's own call: the first frame outside torch and this file
    (a notebook cell's lines are in ``linecache`` too)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith((_TORCH, _HERE)) and "contextlib" not in name:
            return linecache.getline(name, frame.f_lineno).split("  #")[0].strip()
        frame = frame.f_back
    return ""


def _grads(module: nn.Module) -> list[torch.Tensor | None]:
    return [None if p.grad is None else p.grad.detach().clone() for p in module.parameters()]


def _added(before: list, module: nn.Module) -> float:
    total = 0.0
    for old, param in zip(before, module.parameters(), strict=True):
        if param.grad is not None:
            change = param.grad.detach() - (0 if old is None else old)
            total += change.double().pow(2).sum().item()
    return total**0.5


class CallTimeline:
    """Records the calls of the loop run inside a ``with`` block (see the module's text).

    ``optimizer`` is needed; ``scheduler`` and ``scaler`` are optional, and their calls are
    recorded where given. A backward is seen however it is called (``loss.backward()`` or
    ``torch.autograd.backward``), a clip wherever it is looked up as
    ``torch.nn.utils.clip_grad_norm_``. ``model.zero_grad()`` is not the optimizer's call and
    is not recorded. Everything is put back on exit."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        scaler: torch.amp.GradScaler | None = None,
        watch: Mapping[str, nn.Module] | None = None,
    ):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                _("optimizer must be a torch.optim.Optimizer, got {kind}").format(
                    kind=type(optimizer).__name__
                )
            )
        if scheduler is not None and not hasattr(scheduler, "step"):
            raise TypeError(
                _("scheduler must be a learning-rate scheduler, got {kind}").format(
                    kind=type(scheduler).__name__
                )
            )
        if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
            raise TypeError(
                _("scaler must be a torch.amp.GradScaler, got {kind}").format(
                    kind=type(scaler).__name__
                )
            )
        watch = dict(watch or {})
        for name, module in watch.items():
            if not isinstance(module, nn.Module):
                raise TypeError(
                    _("watch must map names to modules: {name!r} is a {kind}").format(
                        name=name, kind=type(module).__name__
                    )
                )
        self.optimizer, self.scheduler, self.scaler, self.watch = (
            optimizer,
            scheduler,
            scaler,
            watch,
        )
        self.events: list[TimelineEvent] = []
        self._undo: list = []
        self._depth = 0  # calls in progress: a call made inside another is not the loop's

    def _record(self, call: str, original):
        @functools.wraps(original)
        def recorded(*args, **kwargs):
            outer = self._depth == 0
            watched = outer and call == "backward"
            before = {name: _grads(m) for name, m in self.watch.items()} if watched else {}
            where = _calling_line() if outer else ""
            self._depth += 1
            try:
                result = original(*args, **kwargs)
            finally:
                self._depth -= 1
            if outer:
                added = {name: _added(old, self.watch[name]) for name, old in before.items()}
                self.events.append(TimelineEvent(call, where, added))
            return result

        return recorded

    def _patch(self, owner, attribute: str, call: str) -> None:
        original = getattr(owner, attribute)
        had_own = attribute in vars(owner)
        setattr(owner, attribute, self._record(call, original))
        self._undo.append((owner, attribute, original, had_own))

    def __enter__(self) -> CallTimeline:
        self._patch(torch.autograd, "backward", "backward")
        self._patch(torch.nn.utils, "clip_grad_norm_", "clip")
        self._patch(torch.nn.utils.clip_grad, "clip_grad_norm_", "clip")
        self._patch(self.optimizer, "zero_grad", "zero_grad")
        self._patch(self.optimizer, "step", "step")
        if self.scheduler is not None:
            self._patch(self.scheduler, "step", "scheduler")
        if self.scaler is not None:
            self._patch(self.scaler, "unscale_", "unscale_")
            self._patch(self.scaler, "update", "update")
            # scaler.step(optimizer) steps the optimizer (recorded there) and may unscale_
            # on the loop's behalf (not the loop's call: it runs inside the step)
            self._patch(self.scaler, "step", "_scaler_step")
        return self

    def __exit__(self, *exc) -> None:
        while self._undo:
            owner, attribute, original, had_own = self._undo.pop()
            if had_own or isinstance(owner, type(torch)):
                setattr(owner, attribute, original)
            else:
                delattr(owner, attribute)  # back to the class's method
        self.events = [
            # scaler.step's own event stands for the optimizer step it made, or skipped
            TimelineEvent("step", e.line) if e.call == "_scaler_step" else e
            for e in self.events
        ]

    @property
    def calls(self) -> list[str]:
        """The calls' names, in order."""
        return [event.call for event in self.events]

    def windows(self) -> list[int]:
        """The number of backward passes before each ``optimizer.step()``: one number per
        step, and a last one for backward passes that no step followed (left out when 0)."""
        counts, passes = [], 0
        for call in self.calls:
            if call == "backward":
                passes += 1
            elif call == "step":
                counts.append(passes)
                passes = 0
        return counts + ([passes] if passes else [])

    def summary(self) -> str:
        """The calls in words, runs of one call counted: ``backward() ×4, optimizer.step(),
        zero_grad(), ...``."""
        if not self.events:
            return _("no call was recorded")
        return ", ".join(
            TIMELINE_CALLS[call] + (f" ×{n}" if (n := len(list(run))) > 1 else "")
            for call, run in itertools.groupby(self.calls)
        )
