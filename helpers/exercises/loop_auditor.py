"""Notebook 06's prediction (exercise 06.1): which rule ids does the loop auditor report for
a loop the notebook has not run? The answer is not typed: :func:`reported_codes` runs the
auditor on :func:`helpers.pitfalls.accumulate_clipping`, the loop the exercise cell shows
(tests/test_pitfalls.py checks that the cell defines it as the helper keeps it)."""

from __future__ import annotations

from functools import cache

from helpers.audit import CODES
from helpers.checks import (
    NOT_ANSWERED,
    CheckResult,
    as_names,
    checker,
    correct,
    is_unanswered,
    wrong,
)
from helpers.pitfalls import accumulate_clipping, audited_run, make_teacher_batches

LOOP = accumulate_clipping
N_BATCHES, K = 10, 4  # the exercise text says: 10 micro-batches, accumulation_steps=4


@cache
def reported_codes() -> tuple[str, ...]:
    """The rule ids the auditor reports when it watches the exercise's loop, in its order."""
    batches = make_teacher_batches(n_batches=12, batch_size=8, features=8)[:N_BATCHES]
    return tuple(audited_run(LOOP, batches, accumulation_steps=K).codes)


# A rule id the answer leaves out: what in the loop breaks it (the id itself is not named,
# so that the learner reads the table of rules again).
MISSING = {
    "clip-per-micro-batch": "clip_grad_norm_ sits in the loop over micro-batches, so it runs "
    "after every backward(), also after those that no step() follows: the auditor sees each "
    "clip and whether a step() comes right after it.",
    "leftover-gradients": f"{N_BATCHES} micro-batches in windows of {K} leave a tail of "
    f"{N_BATCHES % K} whose backward passes no step() follows: the auditor checks what .grad "
    "holds when the loop ends.",
}

# A real rule id the auditor does not report for this loop: why.
NOT_REPORTED = {
    "window-length": f"every step() uses exactly {K} backward passes: the tail never reaches "
    "a step, so no step has the wrong count. And a loss not divided by k changes the "
    "gradients' size, not the count; the auditor cannot see how a loss was scaled (section 2).",
    "missing-zero-grad": "zero_grad() runs right after every step(), so no step reuses the "
    "gradients an earlier step used.",
    "zero-grad-before-step": "zero_grad() runs only right after step(), never between a "
    "backward() and the step() that uses it.",
    "step-without-grad": f"every step() comes after {K} backward() calls, so it has gradients.",
    "cross-network-leak": "there is one network and one optimizer: no other network's loss "
    "reaches these parameters.",
    "scheduler-per-micro-batch": "this loop has no scheduler.",
    "unscale-after-clip": "this loop uses no GradScaler and never clips.",
    "graph-kept-alive": "the loop keeps no loss: each one is dropped after its backward().",
    "params-not-in-optimizer": "the loop changes no layer: every parameter that gets a "
    "gradient is in the optimizer.",
}

UNSEEN = (
    "The loop's other bug, losses not divided by k (each step k times too large), has no rule: "
    "the auditor watches the order of the calls and what .grad holds, not how a loss was "
    "scaled (section 2)."
)


EMPTY = ("", "none", "nothing")  # written for the empty set


def _names(answer: object) -> set[str]:
    """The rule ids in ``answer``, however written: any letter case, with or without
    backticks, quotes or braces, underscores for hyphens; "none" or {} for the empty set."""
    if isinstance(answer, dict) and not answer:
        answer = set()  # {} is an empty dict, meant as the empty set
    if isinstance(answer, str):
        answer = answer.translate(str.maketrans("`'\"{}[]()", " " * 9))
    given = as_names(answer, '{"missing-zero-grad", "window-length"}', names=CODES)
    cleaned = {name.strip("`'\" ").replace("_", "-") for name in given}
    spelled = {code.lower(): code for code in CODES}
    return {spelled.get(name.lower(), name) for name in cleaned if name.lower() not in EMPTY}


@checker
def check_auditor_findings(answer: object) -> CheckResult:
    """Exercise 06.1: the set of rule ids the auditor reports for ``accumulate_clipping`` on
    10 micro-batches with accumulation_steps=4 (computed by running it)."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    given = _names(answer)
    expected = set(reported_codes())
    unknown = sorted(given - set(CODES))
    if unknown:
        return wrong(
            f"{', '.join(unknown)}: not a rule id of the auditor. Its rules are "
            f"{', '.join(CODES)}. There is no rule for how a loss was scaled: the auditor "
            "cannot see it (section 2)."
        )
    if not given:
        return wrong(
            "An empty set says the auditor finds nothing. It cannot see that the losses are "
            "not divided by k, but it does see when clip_grad_norm_, step() and zero_grad() "
            "run, and what .grad holds when the loop ends. Look at each against the table of "
            "rules in section 1."
        )
    if given == expected:
        return correct(
            f"the auditor reports {' and '.join(reported_codes())}. {UNSEEN} Repair the "
            "two it reports and it falls silent on a loop that is still wrong."
        )
    hints = [
        f"{code} is not reported: {NOT_REPORTED.get(code, 'this loop does not break it.')}"
        for code in CODES
        if code in given - expected
    ]
    hints += [
        f"A rule is missing: {MISSING.get(code, 'the auditor reports one more rule.')}"
        for code in reported_codes()
        if code in expected - given
    ]
    return wrong(" ".join(hints))
