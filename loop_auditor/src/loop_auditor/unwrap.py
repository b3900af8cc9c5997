"""The objects frameworks hand to user code, unwrapped to the torch objects inside them.

Accelerate's ``accelerator.prepare()`` returns an ``AcceleratedOptimizer`` (the torch optimizer
is ``.optimizer``) and an ``AcceleratedScheduler`` (``.scheduler``); Lightning's
``self.optimizers()`` returns a ``LightningOptimizer`` (``._optimizer``). Both forward
``step()`` and ``zero_grad()`` to the torch object, which is what the auditor hooks.
"""

from __future__ import annotations

import torch

from loop_auditor.language import _

_OPTIMIZER_ATTRIBUTES = ("optimizer", "_optimizer")  # Accelerate, Lightning
_SCHEDULER_ATTRIBUTES = ("scheduler", "_scheduler")


def _dig(obj, attributes: tuple[str, ...], found) -> object | None:
    """``obj`` itself, or the object inside up to 4 wrappers (each held in one of
    ``attributes``), for which ``found`` is true; None when there is none."""
    for _depth in range(5):
        if found(obj):
            return obj
        obj = next((getattr(obj, a) for a in attributes if _has(obj, a)), None)
        if obj is None:
            return None
    return None


def unwrap_optimizer(optimizer) -> torch.optim.Optimizer:
    """The torch optimizer in ``optimizer`` (itself, or inside up to 4 wrappers); TypeError
    when there is none."""
    found = _dig(
        optimizer,
        _OPTIMIZER_ATTRIBUTES,
        # Lightning's wrapper is an instance of a subclass of the optimizer's own class
        lambda o: (
            isinstance(o, torch.optim.Optimizer)
            and not any(_has(o, a) for a in _OPTIMIZER_ATTRIBUTES)
        ),
    )
    if found is None:
        raise TypeError(
            _(
                "optimizer must be a torch.optim.Optimizer, or the wrapper Accelerate or "
                "Lightning hands you (AcceleratedOptimizer, LightningOptimizer); got {type}"
            ).format(type=type(optimizer).__name__)
        )
    return found


def unwrap_scheduler(scheduler):
    """The torch learning-rate scheduler in ``scheduler`` (itself or inside a wrapper such as
    Accelerate's ``AcceleratedScheduler``); TypeError when there is none."""
    found = _dig(scheduler, _SCHEDULER_ATTRIBUTES, _is_scheduler)
    if found is None:
        raise TypeError(
            _(
                "scheduler must be a torch.optim.lr_scheduler scheduler, or a wrapper around "
                "one (Accelerate's AcceleratedScheduler); got {type}"
            ).format(type=type(scheduler).__name__)
        )
    return found


def accumulation_steps_of(optimizer) -> int | None:
    """The accumulation steps a wrapper was configured with (Accelerate's
    ``gradient_state.num_steps``), or None."""
    state = getattr(optimizer, "gradient_state", None) if _has(optimizer, "optimizer") else None
    steps = getattr(state, "num_steps", None)
    return steps if isinstance(steps, int) and steps >= 1 else None


def _is_scheduler(scheduler) -> bool:
    schedulers = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
    return isinstance(scheduler, schedulers)


def _has(obj, name: str) -> bool:
    try:
        return name in vars(obj)
    except TypeError:
        return False
