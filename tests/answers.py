"""Answering a checker as a learner does: the first wrong answer of an exercise gets the
question that names the misconception, a second one the computation too
(helpers.checks.ask_first). Tests that look for the computation answer twice."""

from __future__ import annotations


def second_try(check, answer, **options):
    """The result of ``check(answer, **options)`` given a second time."""
    check(answer, **options)
    return check(answer, **options)
