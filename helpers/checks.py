"""Exercise checking: every checker returns a :class:`CheckResult` that says whether the
answer is right and, when it is not, names the likely mistake.

Set the environment variable ``GM_STRICT_CHECKS=1`` to make a failing check raise
``AssertionError`` instead (the test suite runs every solution this way).
"""

from __future__ import annotations

import html
import math
import os
import re
from dataclasses import dataclass

import torch

STRICT_ENV_VAR = "GM_STRICT_CHECKS"
NOT_ANSWERED = "Not answered yet: replace `...` with your answer and run the cell again."


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one answer: ``passed`` and a ``message`` for the learner."""

    passed: bool
    message: str

    def __repr__(self) -> str:
        return f"{'✅ Correct' if self.passed else '❌ Not yet'}: {self.message}"

    def _repr_html_(self) -> str:
        colour, mark = ("#1a7f37", "✅ Correct") if self.passed else ("#b35900", "❌ Not yet")
        return (
            f'<div style="border-left: 4px solid {colour}; padding: 0.3em 0.8em;">'
            f"<b>{mark}</b>: {html.escape(self.message)}</div>"
        )


def correct(message: str) -> CheckResult:
    """A passing result."""
    return CheckResult(True, message)


def wrong(message: str) -> CheckResult:
    """A failing result; raises ``AssertionError`` in strict mode."""
    if os.environ.get(STRICT_ENV_VAR, "") not in ("", "0"):
        raise AssertionError(message)
    return CheckResult(False, message)


def is_unanswered(answer: object) -> bool:
    """True for the placeholder ``...`` that exercise cells start with."""
    return answer is Ellipsis


def as_number(answer: object, what: str = "your answer") -> float:
    """``answer`` as a float: a Python number or a one-element tensor, else ``TypeError``."""
    if isinstance(answer, torch.Tensor):
        if answer.numel() != 1:
            raise TypeError(
                f"{what} must be a single number; got a tensor of shape {tuple(answer.shape)}"
            )
        return float(answer.item())
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise TypeError(f"{what} must be a number such as 17.0, got {type(answer).__name__}")
    return float(answer)


def as_names(answer: object, example: str, *, letters: bool = False) -> set[str]:
    """A set of names from a set, list or tuple of strings, or from one string such as
    "a, b" or "a and b"; with ``letters``, "ab" also means {"a", "b"}. ``example`` shows the
    expected form in the ``TypeError`` for anything else."""
    if isinstance(answer, str):
        tokens = [t for t in re.split(r"[\s,;]+", answer) if t and t.lower() != "and"]
        if letters and len(tokens) == 1 and tokens[0].isalpha():
            tokens = list(tokens[0])
        answer = tokens
    if not isinstance(answer, (set, list, tuple, frozenset)) or not all(
        isinstance(item, str) for item in answer
    ):
        raise TypeError(f"answer must be a set of names such as {example}")
    return {item.strip() for item in answer}


def number_matches(answer: float, expected: float, rel_tol: float = 1e-5) -> bool:
    """Equal within a relative tolerance (and an absolute one of 1e-6 near zero)."""
    return math.isclose(answer, expected, rel_tol=rel_tol, abs_tol=1e-6)


def diagnose_number(
    answer: float,
    expected: float,
    known_mistakes: dict[float, str],
    fallback: str,
    *,
    twice_hint: str | None = None,
) -> CheckResult:
    """Compare a numeric answer. A wrong one gets the hint of the known mistake it equals;
    else, when it is exactly twice ``expected`` and ``twice_hint`` is given, that hint
    (for example "was `.grad` zeroed before the second backward?"); else ``fallback``."""
    if number_matches(answer, expected):
        return correct(f"{expected:g} is right.")
    for value, hint in known_mistakes.items():
        if number_matches(answer, value):
            return wrong(f"{answer:g} is not it. {hint}")
    if twice_hint is not None and expected != 0 and number_matches(answer, 2 * expected):
        return wrong(f"{answer:g} is exactly 2x the expected value: {twice_hint}")
    return wrong(f"{answer:g} is not it. {fallback}")
