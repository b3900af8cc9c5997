"""The write exercises of notebooks 02 and 04: correct answers written in different ways
pass, and each typical mistake gets the hint that names it."""

from __future__ import annotations

import pytest
import torch

from helpers.checks import is_unanswered
from helpers.several_losses.checkers_04 import check_task_grad_norms


def assert_hint(result, *fragments):
    assert not result.passed
    for fragment in fragments:
        assert fragment in result.message, result.message


# Exercise 04.3: per-task gradient norms.


def norms_by_sum_of_squares(losses, params):
    norms = []
    for loss in losses:
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        norms.append(torch.sqrt(sum((g**2).sum() for g in grads if g is not None)).item())
    return norms


def norms_by_concatenation(losses, params):
    result = []
    for loss in losses:
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        flat = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)]
        result.append(torch.cat([g.flatten() for g in flat]).norm())
    return tuple(result)


def norms_materialized(losses, params):
    grads = [
        torch.autograd.grad(loss, params, retain_graph=True, materialize_grads=True)
        for loss in losses
    ]
    return torch.stack(
        [torch.linalg.vector_norm(torch.cat([g.flatten() for g in gs])) for gs in grads]
    )


def norms_without_retain_graph(losses, params):
    return [
        torch.cat([g.flatten() for g in torch.autograd.grad(loss, params, materialize_grads=True)])
        .norm()
        .item()
        for loss in losses
    ]


def norms_without_allow_unused(losses, params):
    return [
        torch.cat(
            [g.flatten() for g in torch.autograd.grad(loss, params, retain_graph=True)]
        ).norm()
        for loss in losses
    ]


def norms_with_none_in_the_sum(losses, params):
    return [
        sum(
            (g**2).sum()
            for g in torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        ).sqrt()
        for loss in losses
    ]


def norms_lazily_without_retain_graph(losses, params):
    return (
        torch.cat([g.flatten() for g in torch.autograd.grad(loss, params) if g is not None]).norm()
        for loss in losses
    )


def norms_lazily(losses, params):
    grad = torch.autograd.grad
    return (
        torch.cat([g.flatten() for g in grad(loss, params, retain_graph=True, allow_unused=True)
                   if g is not None]).norm()
        for loss in losses
    )  # fmt: skip


def norms_concatenating_none(losses, params):
    norms = []
    for loss in losses:
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        norms.append(torch.cat([g.flatten() for g in grads]).norm())
    return norms


def norms_through_backward(losses, params):
    norms = []
    for loss in losses:
        for p in params:
            p.grad = None
        loss.backward(retain_graph=True)
        norms.append(torch.cat([p.grad.flatten() for p in params if p.grad is not None]).norm())
    return norms


def norms_through_backward_then_reset(losses, params):
    """The false pass of issue 24: right norms, then every .grad set to None."""
    norms = norms_through_backward(losses, params)
    for p in params:
        p.grad = None
    return norms


def norms_through_backward_restored(losses, params):
    """backward(), but the .grad it found put back: correct, however it is written."""
    held = [p.grad for p in params]
    norms = norms_through_backward(losses, params)
    for p, grad in zip(params, held, strict=True):
        p.grad = grad
    return [float(n) for n in norms]


def norms_reading_held_grads(losses, params):
    """backward() on top of the held gradients, then the norm of what .grad holds."""
    norms = []
    for loss in losses:
        held = [p.grad.clone() for p in params]
        loss.backward(retain_graph=True)
        norms.append(torch.cat([p.grad.flatten() for p in params]).norm())
        for p, grad in zip(params, held, strict=True):
            p.grad = grad
    return norms


def l1_norms(losses, params):
    norms = []
    for loss in losses:
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        norms.append(sum(g.abs().sum() for g in grads if g is not None))
    return norms


def squared_norms(losses, params):
    return [n**2 for n in norms_by_sum_of_squares(losses, params)]


def norms_added_per_tensor(losses, params):
    norms = []
    for loss in losses:
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        norms.append(sum(g.norm() for g in grads if g is not None))
    return norms


def norm_of_the_sum(losses, params):
    total = sum(losses)
    grads = torch.autograd.grad(total, params, retain_graph=True, allow_unused=True)
    norm = torch.cat([g.flatten() for g in grads if g is not None]).norm()
    return [norm, norm]


def one_norm_only(losses, params):
    return norms_by_sum_of_squares(losses[:1], params)


@pytest.mark.parametrize(
    "answer",
    [
        norms_by_sum_of_squares,
        norms_by_concatenation,
        norms_materialized,
        norms_lazily,
        norms_through_backward_restored,
    ],
)
def test_task_norms_accept_correct_versions(answer):
    result = check_task_grad_norms(answer)
    assert result.passed, result.message


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (norms_without_retain_graph, "pass retain_graph=True"),
        (norms_without_allow_unused, "pass allow_unused=True"),
        (norms_with_none_in_the_sum, "count it as 0"),
        (norms_concatenating_none, "count it as 0"),
        (norms_lazily_without_retain_graph, "pass allow_unused=True"),
        (norms_through_backward, "parameters lost the .grad they held"),
        (norms_through_backward_then_reset, "parameters lost the .grad they held"),
        (norms_reading_held_grads, "include the gradients .grad already held"),
        (l1_norms, "these are L1 norms"),
        (squared_norms, "squared norms"),
        (norms_added_per_tensor, "added the norms of the separate tensors"),
        (norm_of_the_sum, "norm of the summed gradient"),
        (one_norm_only, "two losses, so two norms"),
        (lambda losses, params: None, "one number per loss"),
        (lambda losses: None, "give it 2 parameters"),
    ],
)
def test_task_norms_name_each_mistake(answer, hint):
    assert_hint(check_task_grad_norms(answer), hint)


def placeholder(losses, params): ...  # one norm per loss


def placeholder_with_a_docstring(losses, params):
    """Return one norm per loss."""
    ...


def test_a_function_left_as_its_placeholder_is_not_answered():
    assert is_unanswered(placeholder) and is_unanswered(placeholder_with_a_docstring)
    assert not is_unanswered(norms_by_sum_of_squares) and not is_unanswered(print)
    assert_hint(check_task_grad_norms(placeholder), "Not answered yet")
