"""Exercise 05.2's code review: the answer key is what the loops do (a correct loop trains as
the plain loop does and the auditor is silent on it; a buggy one trains otherwise and the
auditor reports exactly its rule), and the checker names each wrong verdict's misconception."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from helpers import checks
from helpers.data import make_teacher_batches
from helpers.loop_runs import audited_run, run_loop
from helpers.pitfalls.checkers_05 import check_loop_review
from helpers.pitfalls.review_loops import ACCUMULATION_STEPS, REVIEW_KEY, REVIEW_LOOPS

BATCHES = make_teacher_batches(n_batches=12, batch_size=8, features=8)


def plain(model, optimizer, batches):
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def weights(run):
    return torch.cat([p.detach().flatten() for p in run.model.parameters()])


@pytest.mark.parametrize("letter", list(REVIEW_LOOPS))
def test_the_key_is_what_the_loop_does(letter):
    loop, rule = REVIEW_LOOPS[letter], REVIEW_KEY[letter]
    audited = audited_run(loop, BATCHES, accumulation_steps=ACCUMULATION_STEPS[letter])
    assert audited.codes == ([] if rule == "ok" else [rule])
    same = torch.equal(weights(run_loop(loop, BATCHES)), weights(run_loop(plain, BATCHES)))
    assert same == (rule == "ok") or ACCUMULATION_STEPS[letter] > 1


def test_the_review_has_correct_and_buggy_loops_in_no_telling_order():
    verdicts = list(REVIEW_KEY.values())
    assert 2 <= verdicts.count("ok") <= len(verdicts) - 2
    assert verdicts != sorted(verdicts, key=lambda v: v != "ok"), "not all correct ones first"


def test_every_right_answer_is_accepted_however_written():
    assert check_loop_review(dict(REVIEW_KEY)).passed
    spelled = {k.lower(): (f"`{v}`" if v != "ok" else "correct") for k, v in REVIEW_KEY.items()}
    assert check_loop_review(spelled).passed
    underscores = {k: v.replace("-", "_").upper() for k, v in REVIEW_KEY.items()}
    assert check_loop_review(underscores).passed
    with_none = {k: (None if v == "ok" else v) for k, v in REVIEW_KEY.items()}
    assert check_loop_review(with_none).passed


@pytest.mark.parametrize("letter", list(REVIEW_KEY))
def test_each_wrong_verdict_gets_its_question_then_why(letter):
    right = REVIEW_KEY[letter]
    wrongs = ["missing-zero-grad"] if right == "ok" else ["ok", "step-without-grad"]
    for verdict in wrongs:
        checks.WRONG_SO_FAR.clear()
        answer = {**REVIEW_KEY, letter: verdict}
        kind = "ok" if right == "ok" else ("bug" if verdict == "ok" else "rule")
        kind = verdict if (letter, verdict) in check_loop_review.hints else kind
        hint = check_loop_review.hints[letter, kind]
        first, second = check_loop_review(answer), check_loop_review(answer)
        question = hint[: hint.index("?") + 1]
        assert not first.passed and first.message.startswith(question), first.message
        assert "Answer again" in first.message and right not in first.message, "asked, not told"
        assert second.message == hint, second.message


def test_naming_loop_fs_symptom_asks_for_its_cause():
    result = check_loop_review({**REVIEW_KEY, "F": "step-without-grad"})
    assert not result.passed and "but why?" in result.message


def test_bad_answers_get_a_message_never_an_error():
    buggy = {k for k, v in REVIEW_KEY.items() if v != "ok"}
    for answer, fragment in (
        (buggy, "are the buggy ones. Now name the rule each breaks"),
        ({"A", "B"}, "answer with a dict"),
        (None, "answer must be a dict"),
        ({"A": "ok"}, "give a verdict for every loop, A to F: missing B"),
        ({**REVIEW_KEY, "B": "forgot it"}, "is not a rule id"),
        ({**REVIEW_KEY, "B": 3}, 'write "ok" or the rule id it breaks'),
    ):
        result = check_loop_review(answer)
        assert not result.passed and fragment in result.message, (answer, result.message)
    assert check_loop_review(...).unanswered
    assert check_loop_review(dict.fromkeys(REVIEW_KEY, ...)).unanswered, "the exercise's start"
    half = {**dict.fromkeys(REVIEW_KEY, ...), "A": "ok"}
    assert "loop B still holds ..." in check_loop_review(half).message
