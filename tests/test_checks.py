"""Every checker passes the solution and rejects typical wrong answers with the right hint."""

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from helpers.checks import (
    NOT_ANSWERED,
    AnswerKindError,
    CheckResult,
    as_number,
    diagnose_number,
    wrong,
)
from helpers.exercises.autograd_accumulates import (
    check_grad_prediction,
    check_training_loop,
    check_weight_without_zero_grad,
)
from helpers.exercises.setup_check import check_forced_device
from helpers.exercises.zero_grad_internals import (
    check_correct_loops,
    check_grad_after_sequence,
    check_moved_parameters,
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


class TestGradPrediction:
    def test_solution_passes(self):
        assert check_grad_prediction(17.0).passed
        assert check_grad_prediction(torch.tensor(17.0)).passed

    @pytest.mark.parametrize(
        ("answer", "hint"),
        [
            (5, "only the last backward"),
            (6, "three backward calls ran and each one adds"),
            (12, "left out (5 * w).backward()"),
            (11, "both of its backward calls add"),
            (27, "not the value 5 * w = 15"),
            (33, "adds the losses' values"),
            (34, "Add what each backward() contributes"),
            (1, "Add what each backward() contributes"),
        ],
    )
    def test_typical_mistakes_get_their_hint(self, answer, hint):
        assert_hint(check_grad_prediction(answer), hint)

    def test_placeholder_and_wrong_type(self):
        assert_hint(check_grad_prediction(...), "Not answered yet")
        assert_hint(check_grad_prediction("17"), "not the string '17'", "without quotes")
        assert_hint(check_grad_prediction(None), "must be a number", "got None")


class TestWeightWithoutZeroGrad:
    def test_solution_passes(self):
        assert check_weight_without_zero_grad(1.0 - 0.1 * (1 + 3 + 6)).passed

    @pytest.mark.parametrize(
        ("answer", "hint"),
        [
            (0.4, "loop *with* zero_grad"),
            (-0.8, "total 1 + 2 + 3 = 6 at every step"),
            (0.6, "count the third one"),
            (2.0, "SGD subtracts lr times the gradient"),
            (1.6, "Two mistakes"),
            (-9, "The learning rate is missing"),
            (-5, "no learning rate"),
            (0.25, "Write down `.grad` before each step"),
        ],
    )
    def test_typical_mistakes_get_their_hint(self, answer, hint):
        assert_hint(check_weight_without_zero_grad(answer), hint)


def loop_correct(model, optimizer, batches):
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def loop_zero_grad_at_the_end(model, optimizer, batches):
    for inputs, targets in batches:
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
        model.zero_grad()


def loop_without_zero_grad(model, optimizer, batches):
    for inputs, targets in batches:
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def loop_zero_grad_before_step(model, optimizer, batches):
    for inputs, targets in batches:
        F.mse_loss(model(inputs), targets).backward()
        optimizer.zero_grad()
        optimizer.step()


def loop_without_step(model, optimizer, batches):
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()


def loop_step_before_backward(model, optimizer, batches):
    for inputs, targets in batches:
        optimizer.zero_grad()
        optimizer.step()
        F.mse_loss(model(inputs), targets).backward()


def loop_twice_over_the_batches(model, optimizer, batches):
    for inputs, targets in [*batches, *batches]:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def loop_model_zero_grad(model, optimizer, batches):
    for inputs, targets in batches:
        model.zero_grad(set_to_none=False)
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def loop_sum_loss(model, optimizer, batches):
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets, reduction="sum").backward()
        optimizer.step()


def loop_that_raises(model, optimizer, batches):
    raise RuntimeError("boom")


class TestTrainingLoop:
    def test_solutions_pass_wherever_zero_grad_sits_between_step_and_backward(self):
        assert check_training_loop(loop_correct).passed
        assert check_training_loop(loop_zero_grad_at_the_end).passed
        assert check_training_loop(loop_model_zero_grad).passed

    @pytest.mark.parametrize(
        ("loop", "hint"),
        [
            (loop_without_zero_grad, "the gradients of every batch so far"),
            (loop_zero_grad_before_step, "`.grad` was None) at step 1"),
            (loop_step_before_backward, "backward() must come before step()"),
            (loop_without_step, "optimizer.step() was never called"),
            (loop_twice_over_the_batches, "step() ran 6 times for 3 batches"),
            (loop_sum_loss, "not the gradient of its batch's loss"),
            (loop_that_raises, "your function raised RuntimeError: boom"),
        ],
    )
    def test_typical_mistakes_get_their_hint(self, loop, hint):
        assert_hint(check_training_loop(loop), hint)

    def test_placeholder_and_wrong_type(self):
        assert_hint(check_training_loop(...), "Not answered yet")
        assert_hint(check_training_loop(loop_correct(None, None, [])), "pass your function itself")
        assert_hint(
            check_training_loop(lambda model, optimizer: None),
            "called as train_one_epoch(model, optimizer, batches)",
            "give it 3 parameters",
        )


class TestForcedDevice:
    def test_solution_passes(self):
        assert check_forced_device("cpu").passed
        assert check_forced_device(" CPU ").passed
        assert check_forced_device(torch.device("cpu")).passed

    @pytest.mark.parametrize(
        ("answer", "hint"),
        [
            ("cuda", "reads GM_DEVICE first"),
            ("cuda:0", "reads GM_DEVICE first"),
            ("GPU", "reads GM_DEVICE first"),
            ("mps", "Apple silicon's GPU"),
            ("tpu", "use one of those names"),
            (..., "Not answered yet"),
        ],
    )
    def test_typical_mistakes_get_their_hint(self, answer, hint):
        assert_hint(check_forced_device(answer), hint)

    def test_wrong_type(self):
        assert_hint(check_forced_device(0), "must be a string such as 'cuda', got int")
        assert_hint(check_forced_device(None), "got None")

    def test_answer_does_not_depend_on_this_machine(self, monkeypatch):
        monkeypatch.setenv("GM_DEVICE", "cuda")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        assert check_forced_device("cpu").passed
        assert_hint(check_forced_device("cuda"), "reads GM_DEVICE first")


class TestGradAfterSequence:
    def test_solution_passes(self):
        assert check_grad_after_sequence(2 * (2.0 - 0.1 * 8)).passed

    @pytest.mark.parametrize(
        ("answer", "hint"),
        [
            (4, "step() moved w before the last backward"),
            (10.4, "restarted from zeros"),
            (None, "leaves a tensor of zeros"),
            (0, "one more backward() added"),
            (3.2, "`.grad` is 8 before the step, not 4"),
            (1.2, "That is w after the step"),
            (12, "skips both the step"),
            (1.44, "the value of w ** 2 at w = 1.2"),
            (3, "Follow w and .grad line by line"),
        ],
    )
    def test_typical_mistakes_get_their_hint(self, answer, hint):
        assert_hint(check_grad_after_sequence(answer), hint)


class TestMovedParameters:
    def test_solution_passes_in_any_container(self):
        assert check_moved_parameters({"a"}).passed
        assert check_moved_parameters(["a"]).passed
        assert check_moved_parameters("a").passed
        assert check_moved_parameters("A").passed

    @pytest.mark.parametrize(
        ("answer", "hint"),
        [
            ({"a", "b"}, "first step: its moments start at zero"),
            ({"a", "c"}, "c's grad is None"),
            ({"b"}, "a has a real gradient"),
            ({"x"}, "named 'a', 'b' and 'c'"),
        ],
    )
    def test_typical_mistakes_get_their_hint(self, answer, hint):
        assert_hint(check_moved_parameters(answer), hint)

    def test_wrong_type(self):
        assert_hint(check_moved_parameters(3), "set of names")
        assert_hint(check_correct_loops(None), "set of names", "got None")


class TestCorrectLoops:
    def test_solution_passes(self):
        assert check_correct_loops({"A", "C"}).passed
        assert check_correct_loops("a, c").passed
        assert check_correct_loops("A and C").passed

    @pytest.mark.parametrize(
        ("answer", "hint"),
        [
            ({"A"}, "C zeroes only before the first batch of each pair"),
            ({"C"}, "A zeroes right after each step()"),
            ({"A", "B", "C"}, "B zeroes at the top of every batch"),
            ({"A", "C", "D"}, "D zeroes at the end of every batch"),
            ({"E"}, "named 'A', 'B', 'C' and 'D'"),
        ],
    )
    def test_typical_mistakes_get_their_hint(self, answer, hint):
        assert_hint(check_correct_loops(answer), hint)


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
        ("zero_grad_internals", "check_moved_parameters", {"A"}, "AC", "c's grad is None"),
        ("zero_grad_internals", "check_correct_loops", "a, c", "ab", "B zeroes at the top"),
        ("gradient_accumulation", "check_exact_norms", {"groupnorm", "LAYERNORM"},
         "batchnorm", "BatchNorm normalizes"),
        ("several_losses", "check_misordered_gan", "b, C", {"a", "B", "c"}, "A is false"),
    ],
)  # fmt: skip
def test_every_choice_exercise_takes_any_letter_case(module, checker, right, wrong, hint):
    import importlib

    check = getattr(importlib.import_module(f"helpers.exercises.{module}"), checker)
    assert check(right).passed, check(right).message
    result = check(wrong)
    assert not result.passed and hint in result.message, result.message
