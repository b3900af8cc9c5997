"""What ``zero_grad`` does, observed on the installed torch rather than read from its source.

Each function sets up a tiny case, calls the real ``zero_grad`` and reports what happened,
so a notebook can assert the facts on any torch version."""

from __future__ import annotations

import inspect

import torch
from torch import nn

from helpers.translation import _


def default_set_to_none(method) -> bool:
    """The default of ``set_to_none`` in ``method``'s signature."""
    parameter = inspect.signature(method).parameters.get("set_to_none")
    if parameter is None:
        raise ValueError(
            _("{qualname} has no set_to_none parameter").format(qualname=method.__qualname__)
        )
    return parameter.default


def _param_with_grad(value: float = 1.0) -> nn.Parameter:
    param = nn.Parameter(torch.tensor([value]))
    (3 * param).sum().backward()
    return param


def clears_every_param_group() -> bool:
    """True when ``optimizer.zero_grad()`` clears the grads of a second param group too
    (the source article's version looked at ``param_groups[0]`` only)."""
    first, second = _param_with_grad(), _param_with_grad()
    optimizer = torch.optim.SGD([{"params": [first]}, {"params": [second], "lr": 0.5}], lr=0.1)
    optimizer.zero_grad()
    return first.grad is None and second.grad is None


def leaves_none_grads_alone() -> bool:
    """True when ``zero_grad(set_to_none=False)`` leaves a None grad as None (it does not
    allocate zeros for a parameter that never received a gradient)."""
    used, unused = _param_with_grad(), nn.Parameter(torch.tensor([1.0]))
    torch.optim.SGD([used, unused], lr=0.1).zero_grad(set_to_none=False)
    return unused.grad is None and used.grad is not None


def zeroing_keeps_the_tensor(via: str = "optimizer") -> dict[str, bool]:
    """With ``set_to_none=False`` (through an optimizer or a module): is the same grad tensor
    kept and filled with zeros, and is a grad that had a ``grad_fn`` detached?"""
    if via not in ("optimizer", "module"):
        raise ValueError(_("via must be 'optimizer' or 'module', got {via!r}").format(via=via))
    param = nn.Parameter(torch.tensor([2.0]))
    # what backward(create_graph=True) leaves in .grad: 3 p^2 with a grad_fn (made here with
    # autograd.grad, which avoids the reference cycle backward(create_graph=True) warns about)
    (grad,) = torch.autograd.grad((param**3).sum(), param, create_graph=True)
    param.grad = grad
    if grad.grad_fn is None:
        raise RuntimeError("expected a grad with a grad_fn to start from")
    if via == "optimizer":
        torch.optim.SGD([param], lr=0.1).zero_grad(set_to_none=False)
    else:
        module = nn.Module()
        module.param = param
        module.zero_grad(set_to_none=False)
    return {
        "same tensor after": param.grad is grad,
        "all zeros after": not param.grad.any().item(),
        "grad_fn after": param.grad.grad_fn is not None,
        "requires_grad after": param.grad.requires_grad,
    }


def foreach_zero_calls(**optimizer_options) -> int | None:
    """How many times ``torch._foreach_zero_`` ran during one ``zero_grad(set_to_none=False)``
    of an SGD optimizer built with ``optimizer_options`` (e.g. ``foreach=True``); None when
    this torch cannot build that optimizer here (fused SGD on the CPU needs torch 2.4+)."""
    params = [_param_with_grad(), _param_with_grad()]
    try:
        optimizer = torch.optim.SGD(params, lr=0.1, **optimizer_options)
    except (TypeError, RuntimeError):
        return None
    calls = 0
    original = torch._foreach_zero_

    def counting(tensors):
        nonlocal calls
        calls += 1
        return original(tensors)

    torch._foreach_zero_ = counting
    try:
        optimizer.zero_grad(set_to_none=False)
    finally:
        torch._foreach_zero_ = original
    return calls
