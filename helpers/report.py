"""Printing measured numbers so that they read the same on every machine.

A difference that is float rounding (``1.1e-08`` here, ``1.5e-08`` on another CPU) is
printed as the bound it is meant to show, ``< 1e-6``, not as its noisy digits."""

from __future__ import annotations

import math
import numbers


def _bound_text(bound: float) -> str:
    mantissa, exponent = f"{bound:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def below(value: float, bound: float) -> str:
    """``"< 1e-6"`` when ``abs(value) < bound`` (``bound`` a power of ten, such as 1e-6);
    otherwise the value itself and the bound it missed, ``"2.3e-05 (not < 1e-6)"``, so that
    a surprise shows in the output instead of hiding behind the bound."""
    for number, name in ((value, "value"), (bound, "bound")):
        if isinstance(number, bool) or not isinstance(number, numbers.Real):
            raise TypeError(
                f"{name} must be a real number (for a tensor, pass .item()), got {number!r}"
            )
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"bound must be a positive finite number such as 1e-6, got {bound}")
    if not math.isclose(10 ** round(math.log10(bound)), bound, rel_tol=1e-9):
        raise ValueError(f"bound must be a power of ten such as 1e-6, got {bound:g}")
    if math.isnan(value):
        return f"nan (not < {_bound_text(bound)})"
    if abs(value) < bound:
        return f"< {_bound_text(bound)}"
    return f"{value:.1e} (not < {_bound_text(bound)})"
