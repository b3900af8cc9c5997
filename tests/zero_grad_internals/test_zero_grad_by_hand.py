"""The write exercises of notebooks 02 and 04: correct answers written in different ways
pass, and each typical mistake gets the hint that names it."""

from __future__ import annotations

import pytest
import torch

from helpers.zero_grad_internals.checkers_02 import check_my_zero_grad


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
    from helpers.zero_grad_internals.checkers_02 import diagnose_zeroed, run_zero_grad

    _, after = run_zero_grad(torch.optim.Optimizer.zero_grad)
    assert all(grad is None for grad in after.values())
    assert diagnose_zeroed(
        *run_zero_grad(torch.optim.Optimizer.zero_grad, set_to_none=False)
    ).passed
