"""One-line checks for the notebooks' claims, in the spirit of Andrej Karpathy's ``cmp()``.

``check`` asserts a claim and prints one line that says what it verified::

    >>> check("w.grad after two backward() calls", 4.0, 4.0)
    ✓ w.grad after two backward() calls == 4.0
    >>> check("accumulated gradient = full-batch gradient", acc, full, atol=1e-6)
    ✓ accumulated gradient = full-batch gradient (max difference < 1e-6)

A claim that does not hold raises ``AssertionError`` with what was found instead, so a
notebook that stops being true stops running. The printed line names a bound, never a
noise-level number, so it is the same on every machine.

The claim is printed as the notebook wrote it; the words around it (``max difference``, what
a failed claim found) are in the language ``GM_LANG`` names (:mod:`helpers.translation`).
"""

from __future__ import annotations

import math
import numbers

import torch

from helpers.translation import _

__all__ = ["check"]

_NO_EXPECTED = object()


def _bound(atol: float) -> str:
    """1e-06 -> '1e-6', 0.001 -> '1e-3', 0.5 -> '0.5'."""
    mantissa, exponent = f"{atol:e}".split("e")
    if float(mantissa) == 1.0:
        return f"1e{int(exponent)}"
    return f"{atol:g}"


def _as_tensor(value: object) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach()
    return torch.as_tensor(value)


def _as_float64(value: object) -> torch.Tensor:
    """Python numbers become float64 tensors: float32 would round them before the comparison."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    return torch.as_tensor(value, dtype=torch.float64)


def _max_difference(actual: object, expected: object) -> float:
    actual_t, expected_t = _as_float64(actual), _as_float64(expected)
    if actual_t.shape != expected_t.shape:
        raise AssertionError(
            _("shapes differ: {actual} and {expected}").format(
                actual=tuple(actual_t.shape), expected=tuple(expected_t.shape)
            )
        )
    if actual_t.numel() == 0:
        return 0.0
    difference = (actual_t.double().cpu() - expected_t.double().cpu()).abs().max().item()
    return difference if not math.isnan(difference) else math.inf


def _show(value: object) -> str:
    if isinstance(value, torch.Tensor):
        if value.numel() == 1:
            return str(value.item())
        return _("tensor of shape {shape}").format(shape=tuple(value.shape))
    return repr(value) if isinstance(value, str) else str(value)


def _equal(actual: object, expected: object) -> bool:
    if isinstance(actual, torch.Tensor) or isinstance(expected, torch.Tensor):
        actual_t, expected_t = _as_tensor(actual), _as_tensor(expected)
        return actual_t.shape == expected_t.shape and bool(
            torch.equal(actual_t.cpu(), expected_t.cpu().to(actual_t.dtype))
        )
    return bool(actual == expected)


def check(
    claim: str, actual: object, expected: object = _NO_EXPECTED, *, atol: float | None = None
) -> None:
    """Assert ``claim`` and print ``✓ claim`` with what was verified.

    - ``check(claim, condition)``: the condition must be true; prints ``✓ claim``.
    - ``check(claim, actual, expected)``: exact equality (tensors with ``torch.equal``);
      prints ``✓ claim == expected``.
    - ``check(claim, actual, expected, atol=1e-6)``: every element within ``atol``; prints
      ``✓ claim (max difference < 1e-6)``.
    """
    if not isinstance(claim, str) or not claim.strip():
        raise TypeError(_("check(claim, ...): claim is the sentence to print, a non-empty str"))
    if expected is _NO_EXPECTED:
        if atol is not None:
            raise TypeError(
                _("check(claim, actual, expected, atol=...): atol needs an expected value")
            )
        if not isinstance(actual, (bool, torch.Tensor)) or (
            isinstance(actual, torch.Tensor) and (actual.numel() != 1 or actual.dtype != torch.bool)
        ):
            raise TypeError(
                _(
                    "check(claim, condition) takes a bool condition, got {kind}: "
                    "pass check(claim, actual, expected) to compare two values"
                ).format(kind=type(actual).__name__)
            )
        if not bool(actual):
            raise AssertionError(_("✗ {claim}: it does not hold").format(claim=claim))
        print(f"✓ {claim}")
        return
    if atol is not None:
        if isinstance(atol, bool) or not isinstance(atol, numbers.Real) or not atol > 0:
            raise ValueError(
                _("atol is a bound above 0, like 1e-6; got {atol!r}").format(atol=atol)
            )
        difference = _max_difference(actual, expected)
        if not difference < atol:
            raise AssertionError(
                _("✗ {claim}: the max difference is {difference:.3g}, not below {bound}").format(
                    claim=claim, difference=difference, bound=_bound(atol)
                )
            )
        print(_("✓ {claim} (max difference < {bound})").format(claim=claim, bound=_bound(atol)))
        return
    if not _equal(actual, expected):
        raise AssertionError(
            _("✗ {claim}: got {actual}, expected {expected}").format(
                claim=claim, actual=_show(actual), expected=_show(expected)
            )
        )
    print(f"✓ {claim} == {_show(expected)}")
