"""Checking the arguments a helper is given: a clear ``TypeError`` or ``ValueError`` that says
what to change."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from helpers.data import Batch


def positive_int(value, name: str) -> int:
    """``value`` when it is a whole number of at least 1, else a clear error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a whole number, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def check_batches(batches, *, argument: str, item: str, empty: str) -> list[Batch]:
    """``batches`` as a list of (inputs, targets) pairs of matching lengths, else a clear
    ``TypeError`` or ``ValueError`` naming ``argument`` and the ``item`` at fault."""
    if isinstance(batches, (str, bytes)) or not isinstance(batches, Iterable):
        raise TypeError(f"{argument} must be a list of (inputs, targets) pairs")
    batches = list(batches)
    if not batches:
        raise ValueError(empty)
    for index, batch in enumerate(batches):
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise TypeError(f"{item} {index} must be an (inputs, targets) pair")
        inputs, targets = batch
        if len(inputs) != len(targets):
            raise ValueError(
                f"{item} {index} has {len(inputs)} inputs but {len(targets)} targets: "
                "they must have the same length"
            )
    return batches
