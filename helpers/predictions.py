"""Predict before the reveal: a question with two to four options, asked in the cell before the
one that shows the answer. :func:`choice_checker` makes its checker.

The learner answers with the option's letter (``"b"``, ``"B"`` and ``"(b)"`` are all fine), or
with the option's value itself where the option is a number (``4.0`` for an option 4.0). A
wrong option gets the misconception it stands for, as a question, then why; the right one gets
one line of why. Each checker keeps ``answer``, ``options``, ``misconceptions`` and ``reveal``
(the text that the cell revealing the answer prints) as attributes, so that the tests can try
every option and check that no output before the prompt prints its answer.
"""

from __future__ import annotations

import decimal
import math
import numbers
import re
from collections.abc import Callable, Mapping

from helpers.checks import (
    NOT_ANSWERED,
    CheckResult,
    ask_first,
    checker,
    correct,
    is_unanswered,
    wrong,
)
from helpers.translation import _, translate

LETTER = re.compile(r"\(?\s*([a-dA-D])\s*\)?\.?")


def choice_checker(
    options: Mapping[str, object],
    answer: str,
    *,
    why: str,
    misconceptions: Mapping[str, str],
    reveal: str,
    doc: str,
) -> Callable[[object], CheckResult]:
    """A checker for a question with ``options`` (letter -> the option's value, a number or a
    short text, as the notebook shows it). ``answer`` is the right letter and ``why`` one line
    on why it is right; ``misconceptions`` gives every other letter its hint, which asks about
    the misconception first; ``reveal`` is what the cell that shows the answer prints."""
    letters = list(options)
    if not 2 <= len(letters) <= 4 or letters != ["a", "b", "c", "d"][: len(letters)]:
        raise ValueError(
            _("options must be lettered a, b (, c, d), got {letters}").format(letters=letters)
        )
    if answer not in options or set(misconceptions) != set(letters) - {answer}:
        raise ValueError(
            _("answer must be one of the letters, and every other letter needs a hint")
        )
    if not reveal:
        raise ValueError(_("reveal must be the text that the revealing cell prints"))

    def letter_of(given: object) -> str | None:
        if isinstance(given, str):
            match = LETTER.fullmatch(given.strip())
            if match:
                return match.group(1).lower()
            for letter, value in options.items():
                if isinstance(value, str) and given.strip().lower() == value.lower():
                    return letter
            return None
        if isinstance(given, (numbers.Real, decimal.Decimal)) and not isinstance(given, bool):
            for letter, value in options.items():
                if isinstance(value, numbers.Real) and math.isclose(float(given), value):
                    return letter
        return None

    choices = ", ".join(letters)

    @checker
    def check(given: object) -> CheckResult:
        if is_unanswered(given):
            return wrong(NOT_ANSWERED)
        letter = letter_of(given)
        if letter is None:
            if isinstance(given, str) and re.fullmatch(r"\(?\s*[a-zA-Z]\s*\)?", given.strip()):
                return wrong(
                    _("there is no option {given}: choose one of {choices}").format(
                        given=given.strip(), choices=choices
                    )
                )
            shown = "None" if given is None else repr(given)
            return wrong(
                _(
                    'answer with the letter of one option, as a string such as "{letter}" '
                    "(one of {choices}); got {shown}"
                ).format(letter=letters[0], choices=choices, shown=shown[:80])
            )
        if letter == answer:
            return correct(
                _("({letter}) is right: {why}").format(letter=letter, why=translate(why))
            )
        return wrong(
            _("({letter}) is not it. {hint}").format(
                letter=letter, hint=ask_first(translate(misconceptions[letter]))
            )
        )

    check.__doc__ = doc
    check.answer = answer
    check.options = dict(options)
    check.misconceptions = dict(misconceptions)
    check.reveal = reveal
    return check
