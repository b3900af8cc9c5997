"""Several losses, one backward: weighting, per-task gradients without touching ``.grad``,
how much two tasks disagree, and a PCGrad-style fix for conflicting gradients."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from helpers.translation import _


def _check_losses(losses: Sequence[torch.Tensor]) -> None:
    if isinstance(losses, torch.Tensor) or not isinstance(losses, Sequence) or not losses:
        raise TypeError(_("losses must be a non-empty list of scalar loss tensors"))
    for index, loss in enumerate(losses):
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            raise ValueError(
                _("loss {index} must be a scalar tensor (reduce it with .mean())").format(
                    index=index
                )
            )


def weighted_sum(
    losses: Sequence[torch.Tensor], weights: Sequence[float] | None = None
) -> torch.Tensor:
    """``w1 * loss1 + w2 * loss2 + ...``: one tensor to call ``backward()`` on once."""
    _check_losses(losses)
    if weights is None:
        weights = [1.0] * len(losses)
    if len(weights) != len(losses):
        raise ValueError(
            _("{n_losses} losses but {n_weights} weights: give one weight per loss").format(
                n_losses=len(losses), n_weights=len(weights)
            )
        )
    return sum(weight * loss for weight, loss in zip(weights, losses, strict=True))


def task_gradients(
    losses: Sequence[torch.Tensor], params: Sequence[torch.Tensor]
) -> list[list[torch.Tensor]]:
    """Each loss's gradient with respect to ``params``, by ``torch.autograd.grad`` (the
    graph is kept for the next loss; ``.grad`` is not touched). A parameter a loss does not
    reach gets zeros."""
    _check_losses(losses)
    params = list(params)
    if not params or not all(isinstance(p, torch.Tensor) and p.requires_grad for p in params):
        raise ValueError(_("params must be a non-empty list of tensors that require grad"))
    result = []
    for loss in losses:
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        result.append(
            [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)]
        )
    return result


def flatten(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """All gradient tensors of one task as one vector."""
    if not grads:
        raise ValueError(_("grads is empty"))
    return torch.cat([g.reshape(-1) for g in grads])


def cosine_similarity(grads_a: Sequence[torch.Tensor], grads_b: Sequence[torch.Tensor]) -> float:
    """Cosine of the angle between two tasks' gradients: 1 agree, 0 unrelated, -1 opposed."""
    a, b = flatten(grads_a), flatten(grads_b)
    if a.shape != b.shape:
        raise ValueError(_("the two tasks' gradients must cover the same parameters"))
    norms = a.norm() * b.norm()
    if norms == 0:
        raise ValueError(_("a task's gradient is zero: its direction is undefined"))
    return (a @ b / norms).item()


def pcgrad(task_grads: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
    """Combine per-task gradients the PCGrad way (Yu et al., 2020): where task i's gradient
    conflicts with task j's (negative dot product), remove its component along task j's
    original gradient; then add the projected gradients. Returns one tensor per parameter,
    to write into ``.grad`` of the shared parameters. The paper visits the other tasks in a
    random order each step; this uses a fixed order, which is the same for two tasks. For
    two tasks and a plain gradient step, the result does not increase either loss to first
    order; with three or more tasks there is no such guarantee."""
    if not task_grads or len(task_grads) < 2:
        raise ValueError(_("pcgrad needs the gradients of at least two tasks"))
    shapes = [[tuple(g.shape) for g in grads] for grads in task_grads]
    if any(s != shapes[0] for s in shapes):
        raise ValueError(_("every task's gradients must cover the same parameters, in order"))
    flat = [flatten(grads) for grads in task_grads]
    projected = []
    for i, g_i in enumerate(flat):
        g = g_i.clone()
        for j, g_j in enumerate(flat):
            dot = g @ g_j
            if j != i and dot < 0:
                g = g - dot / (g_j @ g_j) * g_j
        projected.append(g)
    combined = torch.stack(projected).sum(dim=0)
    pieces, start = [], 0
    for grad in task_grads[0]:
        pieces.append(combined[start : start + grad.numel()].view_as(grad))
        start += grad.numel()
    return pieces
