"""Show the code that runs: a notebook prints a helper's source with :func:`show_source`,
so what the learner reads is what the course executes (tests/course/test_shown_sources.py)."""

from __future__ import annotations

import inspect

from helpers.translation import _


def show_source(function: object, *, numbered: bool = False) -> None:
    """Print the source of a function or class defined in the course's helpers; with
    ``numbered``, each line after its number, from 1 for the ``def`` line."""
    if not (inspect.isfunction(function) or inspect.isclass(function)):
        raise TypeError(
            _("show_source takes a function or class, got {kind}").format(
                kind=type(function).__name__
            )
        )
    lines = inspect.getsource(function).rstrip().splitlines()
    if numbered:
        lines = [f"{n:>3}  {line}".rstrip() for n, line in enumerate(lines, 1)]
    print("\n".join(lines))
