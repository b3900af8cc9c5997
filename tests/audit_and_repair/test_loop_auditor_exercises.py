"""Notebook 06's prediction (exercise 06.1): the answer is computed by running the auditor on
the loop the cell shows (tests/pitfalls/test_pitfalls.py checks it is the same code); the checker
accepts it however it is written, names each mistake, and never raises at a learner."""

from __future__ import annotations

import pytest
from answers import second_try

from helpers.audit import CODES
from helpers.audit_and_repair import checkers_06
from helpers.audit_and_repair.checkers_06 import (
    NOT_REPORTED,
    PREDICTION_MISSING,
    check_auditor_findings,
    reported_codes,
)
from helpers.pitfalls.buggy_loops import accumulate_clipping

EXPECTED = {"clip-per-micro-batch", "leftover-gradients"}


def test_the_answer_is_what_the_auditor_reports_on_the_shown_loop():
    assert checkers_06.PREDICTION_LOOP is accumulate_clipping
    assert set(reported_codes()) == EXPECTED


def test_every_rule_id_has_its_hint():
    assert set(PREDICTION_MISSING) == EXPECTED
    assert set(NOT_REPORTED) == set(CODES) - EXPECTED


@pytest.mark.parametrize(
    "answer",
    [
        {"clip-per-micro-batch", "leftover-gradients"},
        ["leftover-gradients", "clip-per-micro-batch"],
        ("clip-per-micro-batch", "leftover-gradients"),
        frozenset(EXPECTED),
        "clip-per-micro-batch, leftover-gradients",
        "leftover-gradients and clip-per-micro-batch",
        "Clip-Per-Micro-Batch LEFTOVER-GRADIENTS",
        "`clip-per-micro-batch`, `leftover-gradients`",
        {"`clip-per-micro-batch`", "`Leftover-Gradients`"},
        "{'clip-per-micro-batch', 'leftover-gradients'}",
        ["clip_per_micro_batch", "leftover_gradients"],
    ],
)
def test_the_right_set_passes_however_it_is_written(answer):
    result = check_auditor_findings(answer)
    assert result.passed, result.message
    assert "not divided by k" in result.message


@pytest.mark.parametrize("code", sorted(set(CODES) - EXPECTED))
def test_a_rule_id_the_auditor_does_not_report_is_named_with_why(code):
    result = second_try(check_auditor_findings, EXPECTED | {code})
    assert not result.passed
    assert f"{code} is not reported: {NOT_REPORTED[code]}" in result.message


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_each_missing_rule_id_gets_its_hint(code):
    first = check_auditor_findings(EXPECTED - {code})
    assert not first.passed and first.message.endswith("a second wrong answer shows why.")
    assert PREDICTION_MISSING[code] not in first.message  # the question first
    result = check_auditor_findings(EXPECTED - {code})
    assert not result.passed
    assert PREDICTION_MISSING[code] in result.message
    assert code not in result.message  # the hint names the bug, not the id to copy


def test_window_length_says_the_auditor_cannot_see_the_scaling():
    result = second_try(check_auditor_findings, {"window-length", "leftover-gradients"})
    assert not result.passed
    assert "cannot see how a loss was scaled" in result.message
    assert PREDICTION_MISSING["clip-per-micro-batch"] in result.message


@pytest.mark.parametrize("answer", [{"loss-not-divided"}, EXPECTED | {"unscaled-loss"}, "tail"])
def test_a_rule_id_that_does_not_exist_lists_the_real_ones(answer):
    result = check_auditor_findings(answer)
    assert not result.passed
    assert "not a rule id" in result.message
    assert all(code in result.message for code in CODES)


@pytest.mark.parametrize("answer", [set(), {}, [], "", "none", "None"])
def test_the_empty_set_is_told_what_the_auditor_watches(answer):
    result = check_auditor_findings(answer)
    assert not result.passed
    assert "empty set" in result.message and "cannot see" in result.message


@pytest.mark.parametrize("answer", [None, 2, 2.0, ..., [1, 2], {"a": 1}, check_auditor_findings])
def test_it_never_raises_at_a_learner(answer):
    result = check_auditor_findings(answer)
    assert not result.passed
    expected_form = "Not answered yet" if answer is ... else "set of names"
    assert expected_form in result.message


def test_strict_mode_raises_on_a_wrong_answer(strict_checks):
    with pytest.raises(AssertionError):
        check_auditor_findings({"window-length"})
    assert check_auditor_findings(EXPECTED).passed
