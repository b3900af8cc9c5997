"""Checking the arguments a helper is given: a clear ``TypeError`` or ``ValueError`` that says
what to change."""

from __future__ import annotations


def positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a whole number, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value
