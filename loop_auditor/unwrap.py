"""The objects frameworks hand to user code, unwrapped to the torch objects inside them.

Accelerate's ``accelerator.prepare()`` returns an ``AcceleratedOptimizer`` (the torch optimizer
is ``.optimizer``) and an ``AcceleratedScheduler`` (``.scheduler``); Lightning's
``self.optimizers()`` returns a ``LightningOptimizer`` (``._optimizer``). Both forward
``step()`` and ``zero_grad()`` to the torch object, which is what the auditor hooks.
"""

from __future__ import annotations

import torch

_OPTIMIZER_ATTRIBUTES = ("optimizer", "_optimizer")  # Accelerate, Lightning
_SCHEDULER_ATTRIBUTES = ("scheduler", "_scheduler")


def unwrap_optimizer(optimizer) -> torch.optim.Optimizer:
    """The torch optimizer in ``optimizer`` (itself, or inside up to 4 wrappers); TypeError
    when there is none."""
    found = optimizer
    for _ in range(5):
        inner = next(
            (getattr(found, a) for a in _OPTIMIZER_ATTRIBUTES if _has(found, a)),
            None,
        )
        if inner is None:
            break
        found = inner
    if isinstance(found, torch.optim.Optimizer) and not _has(found, "optimizer"):
        return found
    raise TypeError(
        f"optimizer must be a torch.optim.Optimizer, or the wrapper Accelerate or Lightning "
        f"hands you (AcceleratedOptimizer, LightningOptimizer); got {type(optimizer).__name__}"
    )


def unwrap_scheduler(scheduler):
    """The torch learning-rate scheduler in ``scheduler`` (itself or inside a wrapper such as
    Accelerate's ``AcceleratedScheduler``); TypeError when there is none."""
    found = scheduler
    for _ in range(5):
        if isinstance(found, torch.optim.lr_scheduler.LRScheduler) or _is_plateau(found):
            return found
        inner = next(
            (getattr(found, a) for a in _SCHEDULER_ATTRIBUTES if _has(found, a)),
            None,
        )
        if inner is None:
            break
        found = inner
    raise TypeError(
        f"scheduler must be a torch.optim.lr_scheduler scheduler, or a wrapper around one "
        f"(Accelerate's AcceleratedScheduler); got {type(scheduler).__name__}"
    )


def accumulation_steps_of(optimizer) -> int | None:
    """The accumulation steps a wrapper was configured with (Accelerate's
    ``gradient_state.num_steps``), or None."""
    state = getattr(optimizer, "gradient_state", None) if _has(optimizer, "optimizer") else None
    steps = getattr(state, "num_steps", None)
    return steps if isinstance(steps, int) and steps >= 1 else None


def _is_plateau(scheduler) -> bool:
    return isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def _has(obj, name: str) -> bool:
    try:
        return name in vars(obj)
    except TypeError:
        return False
