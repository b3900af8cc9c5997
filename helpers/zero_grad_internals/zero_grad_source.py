"""``Optimizer.zero_grad``'s source, trimmed to what a learner needs to read first: the loop
over every param group, the skip of a ``None`` grad and its two branches, as the installed
torch writes them. What it leaves out (the foreach path, which collects the grads to zero them
in one call, and the profiler's label) is in the whole method, which notebook 02 prints in an
optional section."""

from __future__ import annotations

import re
import textwrap

from helpers.translation import _

LOOP = "for group in self.param_groups:"
FOREACH_TEST = re.compile(r"if \(?not foreach or p\.grad\.is_sparse\)?:")
HEADER = "# Optimizer.zero_grad as installed, trimmed: the foreach path and profiling left out\n"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block(lines: list[str], start: int) -> int:
    """The index after the block that starts at ``lines[start]`` (its deeper-indented lines)."""
    end = start + 1
    while end < len(lines) and (
        not lines[end].strip() or _indent(lines[end]) > _indent(lines[start])
    ):
        end += 1
    return end


def zero_grad_core(source: str) -> str:
    """The loop of ``Optimizer.zero_grad``'s ``source`` (``inspect.getsource``), dedented,
    with the foreach branch cut: ``if not foreach or p.grad.is_sparse: p.grad.zero_()`` becomes
    ``p.grad.zero_()``. A source without that loop is given whole, dedented."""
    if not isinstance(source, str):
        raise TypeError(
            _("source must be the text of a function (inspect.getsource), got {kind}").format(
                kind=type(source).__name__
            )
        )
    lines = source.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == LOOP]
    if not starts:
        return textwrap.dedent(source)
    loop = lines[starts[0] : _block(lines, starts[0])]
    for i, line in enumerate(loop):
        if FOREACH_TEST.fullmatch(line.strip()):
            body_end = _block(loop, i)
            body = [row[4:] if row.strip() else row for row in loop[i + 1 : body_end]]
            rest = body_end
            if rest < len(loop) and loop[rest].strip() == "else:":
                rest = _block(loop, rest)
            loop = loop[:i] + body + loop[rest:]
            break
    return HEADER + textwrap.dedent("\n".join(loop).rstrip() + "\n")
