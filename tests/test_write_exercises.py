"""The write exercises of notebooks 02 and 04: correct answers written in different ways
pass, and each typical mistake gets the hint that names it."""

from __future__ import annotations

import pytest
import torch

from helpers.checks import is_unanswered
from helpers.exercises.several_losses import check_task_grad_norms
from helpers.exercises.zero_grad_internals import check_my_zero_grad


def assert_hint(result, *fragments):
    assert not result.passed
    for fragment in fragments:
        assert fragment in result.message, result.message


# Exercise 02.3: zero_grad by hand.


def zero_grad_like_torch(optimizer, set_to_none=True):
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                if p.grad.grad_fn is not None:
                    p.grad.detach_()
                else:
                    p.grad.requires_grad_(False)
                p.grad.zero_()


def zero_grad_flat(opt, set_to_none: bool = True) -> None:
    grads = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
    for p in grads:
        if set_to_none:
            p.grad = None
        else:
            p.grad.detach_()  # also drops requires_grad on a leaf grad
            p.grad.fill_(0.0)


def zero_grad_keyword_only(optimizer, *, set_to_none=True):
    zero_grad_like_torch(optimizer, set_to_none)


def zero_grad_first_group(optimizer, set_to_none=True):
    for p in optimizer.param_groups[0]["params"]:
        if p.grad is not None:
            p.grad = None if set_to_none else p.grad.detach_().zero_()


def zero_grad_no_skip(optimizer, set_to_none=True):
    for group in optimizer.param_groups:
        for p in group["params"]:
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_().zero_()


def zero_grad_new_tensors(optimizer, set_to_none=True):
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                p.grad = None if set_to_none else torch.zeros_like(p)


def zero_grad_times_zero(optimizer, set_to_none=True):
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                p.grad = None if set_to_none else p.grad.detach_().mul_(0)


def zero_grad_no_detach(optimizer, set_to_none=True):
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    with torch.no_grad():
                        p.grad.zero_()


def zero_grad_default_false(optimizer, set_to_none=False):
    zero_grad_like_torch(optimizer, set_to_none)


def zero_grad_without_the_option(optimizer):
    zero_grad_like_torch(optimizer)


def zero_grad_zeros_for_none(optimizer, set_to_none=True):
    for group in optimizer.param_groups:
        for p in group["params"]:
            if set_to_none:
                p.grad = None
            elif p.grad is None:
                p.grad = torch.zeros_like(p)
            else:
                p.grad.detach_().zero_()


def zero_grad_never_none(optimizer, set_to_none=True):
    zero_grad_like_torch(optimizer, set_to_none=False)


def zero_grad_in_place_only(optimizer, set_to_none=True):
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()


def zero_grad_requires_grad_everywhere(optimizer, set_to_none=True):
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.requires_grad_(False)
                    p.grad.zero_()


def zero_grad_without_a_default(optimizer, set_to_none):
    zero_grad_like_torch(optimizer, set_to_none)


def zero_grad_that_exits(optimizer, set_to_none=True):
    raise SystemExit(1)


@pytest.mark.parametrize("answer", [zero_grad_like_torch, zero_grad_flat, zero_grad_keyword_only])
def test_zero_grad_by_hand_accepts_correct_versions(answer):
    result = check_my_zero_grad(answer)
    assert result.passed, result.message


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (zero_grad_first_group, "not param_groups[0]"),
        (zero_grad_no_skip, "whose grad is None"),
        (zero_grad_new_tensors, "keeps the same grad tensor"),
        (zero_grad_times_zero, "inf * 0 is NaN"),
        (zero_grad_no_detach, "still has a grad_fn"),
        (zero_grad_default_false, "set_to_none defaults to True"),
        (zero_grad_without_the_option, "give your function the parameter set_to_none"),
        (zero_grad_zeros_for_none, "must stay None"),
        (zero_grad_never_none, "set_to_none defaults to True"),
        (zero_grad_in_place_only, "requires_grad_(False) on a leaf"),
        (zero_grad_requires_grad_everywhere, "needs detach_()"),
        (zero_grad_without_a_default, "give set_to_none a default value"),
        (zero_grad_that_exits, "return from your function instead"),
        (lambda: None, "give it 1 parameters"),
    ],
)
def test_zero_grad_by_hand_names_each_mistake(answer, hint):
    assert_hint(check_my_zero_grad(answer), hint)


def zero_grad_delegated(optimizer, set_to_none=True):
    optimizer.zero_grad(set_to_none=set_to_none)


def zero_grad_through_the_class(optimizer, set_to_none=True):
    torch.optim.Optimizer.zero_grad(optimizer, set_to_none)


@pytest.mark.parametrize(
    "answer", [zero_grad_delegated, zero_grad_through_the_class, torch.optim.Optimizer.zero_grad]
)
def test_calling_torchs_own_zero_grad_is_not_an_answer(answer):
    assert_hint(check_my_zero_grad(answer), "calls torch's own zero_grad")
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    optimizer.zero_grad()  # torch's own is back after the check


def test_what_torchs_own_zero_grad_does_is_what_the_check_accepts():
    from helpers.exercises.zero_grad_internals import _diagnose_zeroed, _run_zero_grad

    _, after = _run_zero_grad(torch.optim.Optimizer.zero_grad)
    assert all(grad is None for grad in after.values())
    assert _diagnose_zeroed(
        *_run_zero_grad(torch.optim.Optimizer.zero_grad, set_to_none=False)
    ).passed


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
