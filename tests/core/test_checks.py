"""Every checker passes the solution and rejects typical wrong answers with the right hint."""

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch
from answers import second_try

from helpers.autograd_accumulates.checkers_01 import (
    check_grad_prediction,
)
from helpers.checks import (
    NOT_ANSWERED,
    AnswerKindError,
    CheckResult,
    as_number,
    diagnose_number,
    wrong,
)


def assert_hint(result: CheckResult, *fragments: str):
    assert not result.passed
    for fragment in fragments:
        assert fragment in result.message, result.message


def test_result_renders_as_text_and_html():
    ok, bad = CheckResult(True, "fine"), CheckResult(False, "a < b")
    assert repr(ok) == "✅ Correct: fine"
    assert repr(bad) == "❌ Not yet: a < b"
    assert "a &lt; b" in bad._repr_html_() and "✅ Correct" in ok._repr_html_()


def test_an_unanswered_exercise_says_so_once_not_as_a_wrong_answer():
    pending = check_grad_prediction(...)
    assert pending.unanswered and not pending.passed
    assert repr(pending) == f"✏️ {NOT_ANSWERED}"
    assert "Not yet" not in repr(pending) and "Not yet" not in pending._repr_html_()
    assert not CheckResult(False, "a < b").unanswered


def test_strict_mode_raises_on_a_wrong_answer(strict_checks):
    with pytest.raises(AssertionError, match="18 is not it"):
        check_grad_prediction(18)
    assert check_grad_prediction(17).passed


@pytest.mark.parametrize(
    "answer",
    [
        3,
        3.0,
        Fraction(3),
        Decimal("3"),
        np.int64(3),
        np.float32(3),
        np.array(3.0),
        np.array([3]),
        torch.tensor(3),
        torch.tensor([3.0]),
        torch.tensor([[3.0]], dtype=torch.float64),
    ],
    ids=lambda a: type(a).__name__,
)
def test_numbers_accept_every_real_number_type(answer):
    assert as_number(answer) == 3.0


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (torch.zeros(2), "single number; got Tensor of shape (2,)"),
        (np.zeros((2, 2)), "single number; got ndarray of shape (2, 2)"),
        ("17", "not the string '17'"),
        (True, "not True"),
        (None, "got None"),
        ([17], "got list"),
        (1 + 2j, "real number"),
    ],
)
def test_numbers_refuse_other_kinds_with_what_is_expected(answer, message):
    with pytest.raises(AnswerKindError) as raised:
        as_number(answer)
    assert message in str(raised.value)
    assert isinstance(raised.value, TypeError)


def test_a_number_gets_its_mistakes_hint_else_the_fallback():
    assert diagnose_number(4.0, 4.0, {8.0: "doubled"}, "fallback").passed
    assert_hint(diagnose_number(8.0, 4.0, {8.0: "doubled"}, "fallback"), "8 is not it. doubled")
    assert_hint(diagnose_number(5.0, 4.0, {8.0: "doubled"}, "fallback"), "fallback")
    assert wrong("x").passed is False


def test_names_from_sets_lists_and_strings():
    from helpers.checks import as_names

    assert as_names({"a", "b"}, "{'a'}") == {"a", "b"}
    assert as_names("LayerNorm, GroupNorm", "{'a'}") == {"LayerNorm", "GroupNorm"}
    assert as_names("LayerNorm", "{'a'}") == {"LayerNorm"}
    assert as_names("A and C", "{'A'}", letters=True) == {"A", "C"}
    assert as_names("ab", "{'a'}", letters=True) == {"a", "b"}
    with pytest.raises(TypeError, match=r"such as \{'A'\}"):
        as_names(3, "{'A'}")


def test_a_name_in_any_letter_case_is_the_name():
    from helpers.checks import as_names

    assert as_names({"A", "b"}, "{'a'}", names=("a", "b", "c")) == {"a", "b"}
    assert as_names("layernorm and GROUPNORM", "{'a'}", names=("LayerNorm", "GroupNorm")) == {
        "LayerNorm",
        "GroupNorm",
    }
    assert as_names({"x"}, "{'a'}", names=("a",)) == {"x"}  # unknown names stay as written


@pytest.mark.parametrize(
    ("module", "checker", "right", "wrong", "hint"),
    [
        ("zero_grad_internals.checkers_02", "check_moved_parameters", {"A"}, "AC",
         "c's grad is None"),
        ("zero_grad_internals.checkers_02", "check_correct_loops", "a, c", "ab",
         "B zeroes at the top"),
        ("gradient_accumulation.checkers_03", "check_exact_norms", {"groupnorm", "LAYERNORM"},
         "batchnorm", "BatchNorm normalizes"),
        ("several_losses.checkers_04", "check_misordered_gan", "b, C", {"a", "B", "c"},
         "A is false"),
    ],
)  # fmt: skip
def test_every_choice_exercise_takes_any_letter_case(module, checker, right, wrong, hint):
    import importlib

    check = getattr(importlib.import_module(f"helpers.{module}"), checker)
    assert check(right).passed, check(right).message
    result = second_try(check, wrong)
    assert not result.passed and hint in result.message, result.message
