"""Checking the arguments a helper is given: a clear ``TypeError`` or ``ValueError`` that says
what to change."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from helpers.translation import _

if TYPE_CHECKING:
    from helpers.data import Batch


def positive_int(value, name: str) -> int:
    """``value`` when it is a whole number of at least 1, else a clear error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            _("{name} must be a whole number, got {value!r}").format(name=name, value=value)
        )
    if value < 1:
        raise ValueError(_("{name} must be at least 1, got {value}").format(name=name, value=value))
    return value


def check_batches(batches, *, argument: str, item: str, empty: str) -> list[Batch]:
    """``batches`` as a list of (inputs, targets) pairs of matching lengths, else a clear
    ``TypeError`` or ``ValueError`` naming ``argument`` and the ``item`` at fault."""
    if isinstance(batches, (str, bytes)) or not isinstance(batches, Iterable):
        raise TypeError(
            _("{argument} must be a list of (inputs, targets) pairs").format(argument=argument)
        )
    batches = list(batches)
    if not batches:
        raise ValueError(empty)
    for index, batch in enumerate(batches):
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise TypeError(
                _("{item} {index} must be an (inputs, targets) pair").format(item=item, index=index)
            )
        inputs, targets = batch
        if len(inputs) != len(targets):
            raise ValueError(
                _(
                    "{item} {index} has {n_inputs} inputs but {n_targets} targets: they "
                    "must have the same length"
                ).format(item=item, index=index, n_inputs=len(inputs), n_targets=len(targets))
            )
    return batches
