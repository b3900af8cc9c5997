"""Parsons problems: the lines of a short function, shuffled, with distractors among them; the
learner gives the order of the lines that belong, by their letters. :func:`parsons_checker`
makes the checker.

Every correct order is accepted, because the order is judged by what it does: the chosen lines
(each with its indentation, given) become the function's body, which runs on a small problem
and must end where the reference function ends. A wrong order gets the rule it breaks: a
distractor's own rule, a line left out, a name used before the line that makes it, or, when
the lines are the right ones in an order that does something else, a hint of the exercise's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping

import torch

from helpers.checks import (
    NOT_ANSWERED,
    AnswerKindError,
    CheckResult,
    ask_first,
    checker,
    correct,
    is_unanswered,
    wrong,
)
from helpers.translation import _, translate


def _labels(answer: object, known: list[str]) -> list[str]:
    """The letters of ``answer``: a string such as "bcadeg" (spaces and commas allowed) or a
    list of one-letter strings."""
    if isinstance(answer, str):
        letters = [c for c in answer.lower() if not c.isspace() and c not in ",;-"]
    elif isinstance(answer, (list, tuple)) and all(isinstance(a, str) for a in answer):
        letters = [a.strip().strip("()").lower() for a in answer]
    else:
        kind = "None" if answer is None else type(answer).__name__
        raise AnswerKindError(
            _(
                'answer with the letters in order, as a string such as "{example}", got {kind}'
            ).format(example="".join(known[:3]), kind=kind)
        )
    unknown = [letter for letter in letters if letter not in known]
    if unknown:
        raise AnswerKindError(
            _("there is no line {letter}: the lines are {known}").format(
                letter=unknown[0], known=", ".join(known)
            )
        )
    repeated = sorted({letter for letter in letters if letters.count(letter) > 1})
    if repeated:
        raise AnswerKindError(
            _("line {letter} appears twice: use each line once, or leave it out").format(
                letter=repeated[0]
            )
        )
    return letters


def trains_like(
    reference: Callable, trained: Callable[[Callable], tuple], *, rtol=1e-5, atol=1e-7
) -> Callable[[Callable], bool]:
    """A ``runs_right`` for :func:`parsons_checker`: ``trained(function)`` runs a function on
    the problem and returns what it ends with, a tuple of tensors (the weights, compared with
    ``torch.allclose``) and numbers (such as a scheduler's step count, compared exactly). An
    order runs right when it ends where ``reference`` does; the reference runs once, at the
    first check."""

    @functools.cache
    def expected() -> tuple:
        return trained(reference)

    def runs_right(function: Callable) -> bool:
        return all(
            torch.allclose(got, want, rtol=rtol, atol=atol)
            if isinstance(want, torch.Tensor)
            else got == want
            for got, want in zip(trained(function), expected(), strict=True)
        )

    return runs_right


def parsons_checker(
    signature: str,
    lines: Mapping[str, str],
    distractors: Mapping[str, str],
    required: Mapping[str, str],
    runs_right: Callable[[Callable], bool],
    *,
    misordered: str,
    why: str,
    doc: str,
    names: Mapping[str, object] | None = None,
    before: Mapping[tuple[str, str], str] | None = None,
) -> Callable[[object], CheckResult]:
    """A checker for a Parsons problem. ``signature`` is the function's ``def`` line; ``lines``
    maps each letter to its line of code, indentation included (relative to the body).
    ``distractors`` maps each letter of a line that does not belong to the rule it breaks, as a
    question; ``required`` maps each letter of a line every correct order uses to what a loop
    without it lacks. ``runs_right(function)`` runs the assembled function on a small problem
    and says whether it ends where the reference ends. ``misordered`` is the hint for the right
    lines in an order that runs otherwise; ``why`` the line for a right answer. ``names`` are
    the module-level names the lines use (such as ``F``); ``before`` maps a pair of letters
    ``(x, y)``, x's line before y's, to the hint for an order that puts y first."""
    known = list(lines)
    marked = set(distractors) | set(required)
    if not marked <= set(known) or set(distractors) & set(required):
        raise ValueError(_("distractors and required lines must be letters of lines, and not both"))

    def assemble(letters: list[str]) -> Callable | str:
        body = "\n".join("    " + lines[letter] for letter in letters) or "    pass"
        source = f"{signature}\n{body}\n"
        namespace: dict = dict(names or {})
        try:
            exec(compile(source, "<parsons>", "exec"), namespace)  # the learner's order
        except SyntaxError:  # IndentationError too: a block left without its body
            return _(
                "in this order the lines do not make a function: a line that opens a block "
                "(ending in ':') needs the lines of its block right after it, one step deeper"
            )
        name = re.match(r"def (\w+)", signature).group(1)
        return namespace[name]

    @checker
    def check(answer: object) -> CheckResult:
        if is_unanswered(answer):
            return wrong(NOT_ANSWERED)
        letters = _labels(answer, known)
        for letter in letters:
            if letter in distractors:
                return wrong(
                    _("line {letter} does not belong: {hint}").format(
                        letter=letter, hint=ask_first(translate(distractors[letter]))
                    )
                )
        for letter, lacks in required.items():
            if letter not in letters:
                return wrong(
                    _("your order leaves out line {letter}: {hint}").format(
                        letter=letter, hint=ask_first(translate(lacks))
                    )
                )
        for (first, then), hint in (before or {}).items():
            if first in letters and then in letters and letters.index(then) < letters.index(first):
                return wrong(
                    _("line {then} comes before line {first}: {hint}").format(
                        then=then, first=first, hint=ask_first(translate(hint))
                    )
                )
        function = assemble(letters)
        if isinstance(function, str):
            return wrong(function)
        try:
            right = runs_right(function)
        except NameError as error:
            used = str(error).split("'")[1] if "'" in str(error) else str(error)
            return wrong(
                _(
                    "the loop uses `{name}` before the line that makes it: put that line first"
                ).format(name=used)
            )
        except Exception as error:  # the assembled lines, in an order that cannot run
            return wrong(
                _("in this order the loop raises {name}: {hint}").format(
                    name=type(error).__name__, hint=ask_first(translate(misordered))
                )
            )
        if not right:
            return wrong(ask_first(translate(misordered)))
        return correct(translate(why))

    check.__doc__ = doc
    check.lines = dict(lines)
    check.distractors = dict(distractors)
    check.required = dict(required)
    return check
