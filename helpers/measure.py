"""Measuring what code costs: bytes held by gradients, and times as medians of repeats."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping

import torch

from helpers.arguments import positive_int
from helpers.translation import _


def grad_bytes(params: Iterable[torch.Tensor]) -> int:
    """Bytes held by the ``.grad`` tensors of ``params`` (a grad that is None holds none)."""
    total = 0
    for index, param in enumerate(params):
        if not isinstance(param, torch.Tensor):
            raise TypeError(
                _("item {index} is a {kind}, not a tensor").format(
                    index=index, kind=type(param).__name__
                )
            )
        if param.grad is not None:
            total += param.grad.numel() * param.grad.element_size()
    return total


def median_seconds_each(
    actions: Mapping[str, Callable[[], object]],
    *,
    setup: Callable[[], object] | None = None,
    repeats: int = 25,
) -> dict[str, float]:
    """Median wall time of each action, the actions taking turns run by run, so that a load
    that comes and goes on the machine slows them alike. ``setup()`` runs untimed before
    every run; each action's first run is a warm-up."""
    if not isinstance(actions, Mapping) or not actions:
        raise ValueError(_("actions must be a non-empty dict of {name: function}"))
    if not all(callable(a) for a in actions.values()) or (
        setup is not None and not callable(setup)
    ):
        raise TypeError(_("actions and setup must be functions taking no arguments"))
    positive_int(repeats, "repeats")
    times: dict[str, list[float]] = {name: [] for name in actions}
    for run in range(repeats + 1):
        for name, action in actions.items():
            if setup is not None:
                setup()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            started = time.perf_counter()
            action()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            if run > 0:
                times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}
