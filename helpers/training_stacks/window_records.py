"""What the checkers of notebook 08 record while a learner's window runs: the norm each
``clip_grad_norm_`` call saw, and a stop with a hint from the check's stand-ins."""

from __future__ import annotations

import contextlib

import torch


class CheckStop(Exception):
    """Raised by the check's stand-ins (the loader, ``all_reduce``) to stop a learner's window
    with a hint; the check reports ``hint`` itself, not "your function raised"."""

    def __init__(self, hint: str):
        super().__init__(hint)
        self.hint = hint


@contextlib.contextmanager
def watch_clipping(record: list):
    """Record, for each ``clip_grad_norm_`` call, the norm it saw, its max_norm and the
    number of tensors it clipped together and their gradient before clipping (torch's
    clip_grad_norm_ hands them to ``_clip_grads_with_norm_``, looked up at call time). Yields
    whether it is watching."""
    from torch.nn.utils import clip_grad

    original = getattr(clip_grad, "_clip_grads_with_norm_", None)
    if original is None:  # another torch: no record, the check then names mistakes by weights
        yield False
        return

    def clip_with_norm(parameters, max_norm, total_norm, foreach=None):
        tensors = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        grads = [t.grad.detach().flatten() for t in tensors if t.grad is not None]
        record.append(
            {
                "kind": "clip",
                "norm": float(total_norm),
                "max_norm": float(max_norm),
                "tensors": len(tensors),
                "grad": torch.cat(grads).clone() if grads else None,
            }
        )
        return original(tensors, max_norm, total_norm, foreach)

    clip_grad._clip_grads_with_norm_ = clip_with_norm
    try:
        yield True
    finally:
        clip_grad._clip_grads_with_norm_ = original


def grad_norm(params) -> float:
    grads = [p.grad.detach().double() for p in params if p.grad is not None]
    return float(torch.sqrt(sum((g * g).sum() for g in grads))) if grads else 0.0


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def near(a: float, b: float, rel: float = 1e-3) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b))
