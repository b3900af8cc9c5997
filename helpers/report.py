"""Printing measured numbers so that they read the same on every machine.

A difference that is float rounding (``1.1e-08`` here, ``1.5e-08`` on another CPU) is
printed as the bound it is meant to show, ``< 1e-6``, not as its noisy digits."""

from __future__ import annotations

import math
import numbers
import unicodedata

from helpers.translation import _


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
                _(
                    "{name} must be a real number (for a tensor, pass .item()), got {number!r}"
                ).format(name=name, number=number)
            )
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(
            _("bound must be a positive finite number such as 1e-6, got {bound}").format(
                bound=bound
            )
        )
    if not math.isclose(10 ** round(math.log10(bound)), bound, rel_tol=1e-9):
        raise ValueError(
            _("bound must be a power of ten such as 1e-6, got {bound:g}").format(bound=bound)
        )
    if math.isnan(value):
        return _("{value} (not < {bound})").format(value="nan", bound=_bound_text(bound))
    if abs(value) < bound:
        return f"< {_bound_text(bound)}"
    return _("{value} (not < {bound})").format(value=f"{value:.1e}", bound=_bound_text(bound))


def width(text: str) -> int:
    """The columns ``text`` takes in a monospaced output: 2 for each wide character (Chinese),
    1 for the others."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, columns: int, align: str = "<") -> str:
    """``text`` padded with spaces to ``columns`` columns (on the right for ``"<"``, on the
    left for ``">"``), counting a wide character as 2: ``f"{text:<8}"`` for English text, and
    aligned in a table for Chinese too."""
    if align not in ("<", ">"):
        raise ValueError(_("align must be '<' or '>', got {align!r}").format(align=align))
    spaces = " " * max(columns - width(text), 0)
    return text + spaces if align == "<" else spaces + text
