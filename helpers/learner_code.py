"""Reading a learner's function as code: its source (for checkers that run it in fresh
processes) and whether it still holds the exercise's ``...`` blanks."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable

from helpers.translation import N_, _, translate

# ------------------------------------------------------------------ the learner's source
LAMBDA = N_(
    "write your function with def in a cell, not as a lambda: the check runs its source in "
    "fresh processes"
)


def function_source(function: Callable) -> str:
    """The source of ``function``'s ``def`` (decorators dropped), dedented, for a module of
    its own; ``ValueError`` when its source cannot be read or is not a ``def``."""
    if getattr(function, "__name__", None) == "<lambda>":
        raise ValueError(translate(LAMBDA))
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        raise ValueError(
            _(
                "the check cannot read your function's source (it needs a `def` written in a "
                "notebook cell or a file, not one made by exec or a lambda)"
            )
        ) from None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        raise ValueError(
            _(
                "the check cannot parse your function's source: write your function with "
                "`def {name}(...)` in one cell"
            ).format(name=function.__name__)
        ) from None
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    if not defs or defs[0].name != function.__name__:
        raise ValueError(
            _(
                "write your function with `def {name}(...)` in one cell: the check "
                "runs its source in fresh processes"
            ).format(name=function.__name__)
        )
    definition = defs[0]
    definition.decorator_list = []
    return ast.unparse(definition)


def has_placeholder(source: str) -> bool:
    """Whether a function's source still holds a ``...`` statement (the exercise's blanks)."""
    return any(
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and node.value.value is Ellipsis
        for node in ast.walk(ast.parse(source))
    )
