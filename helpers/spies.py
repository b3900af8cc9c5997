"""Spies on a training loop's calls, for checkers that name a mistake by what the loop
called: :class:`ScalerSpy` on a GradScaler and the optimizer it steps, :class:`ClipSpy` on
``clip_grad_norm_``. Notebook 06's repair checkers, notebook 07's AMP checker and notebook
09's capstone checker use them."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch


class ScalerSpy:
    """Records the calls on one GradScaler (``scale``, ``unscale_``, ``step``, ``update``) and
    the optimizer steps that did not come from ``scaler.step``. A call made by the scaler
    itself (``step`` unscales when the loop did not) is not the loop's: not recorded."""

    def __init__(self, scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer):
        self.calls: list[str] = []
        self.inside_step = False
        self._depth = 0  # scaler calls in progress
        for name in ("scale", "unscale_", "step", "update"):  # the class's methods, looked up
            setattr(scaler, name, self._record(scaler, name))  # at each call (the auditor's)
        optimizer.register_step_pre_hook(self._optimizer_step)

    def _record(self, scaler, name):
        def call(*args, **kwargs):
            outer = self._depth == 0
            if outer:
                self.calls.append(name)
                self.inside_step = name == "step"
            self._depth += 1
            try:
                return getattr(type(scaler), name)(scaler, *args, **kwargs)
            finally:
                self._depth -= 1
                if outer:
                    self.inside_step = False

        return call

    def _optimizer_step(self, *_):
        if not self.inside_step:
            self.calls.append("optimizer.step")


class ClipSpy:
    """Inside a ``with`` block, records every ``clip_grad_norm_`` call made through
    ``torch.nn.utils`` (or ``torch.nn.utils.clip_grad``): its ``max_norm`` and ``norm_type``
    as given, in :attr:`calls`, and its ``max_norm`` as a float, when it is a number, in
    :attr:`norms`. A function imported by name before the block is not seen."""

    MODULES = (torch.nn.utils, torch.nn.utils.clip_grad)

    def __init__(self):
        self.calls: list[dict] = []
        self.norms: list[float] = []
        self._originals: list[tuple[object, Callable]] = []

    def _wrap(self, original: Callable) -> Callable:
        @functools.wraps(original)
        def clip_grad_norm_(parameters, *args, **kwargs):
            limit = args[0] if args else kwargs.get("max_norm")
            self.calls.append(
                {
                    "max_norm": limit,
                    "norm_type": args[1] if len(args) > 1 else kwargs.get("norm_type", 2.0),
                }
            )
            try:
                self.norms.append(float(limit))
            except (TypeError, ValueError, RuntimeError):
                pass  # not a number: clip_grad_norm_ itself says what is wrong
            return original(parameters, *args, **kwargs)

        return clip_grad_norm_

    def __enter__(self) -> ClipSpy:
        for module in self.MODULES:
            original = module.clip_grad_norm_
            self._originals.append((module, original))
            module.clip_grad_norm_ = self._wrap(original)
        return self

    def __exit__(self, *exc) -> None:
        while self._originals:
            module, original = self._originals.pop()
            module.clip_grad_norm_ = original
