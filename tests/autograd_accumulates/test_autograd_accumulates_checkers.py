"""Every checker passes the solution and rejects typical wrong answers with the right hint."""

import pytest
import torch
from answers import second_try
from torch.nn import functional as F

from helpers.autograd_accumulates.checkers_01 import (
    check_grad_prediction,
    check_training_loop,
    check_weight_without_zero_grad,
)
from helpers.checks import (
    CheckResult,
)


def assert_hint(result: CheckResult, *fragments: str):
    assert not result.passed
    for fragment in fragments:
        assert fragment in result.message, result.message


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
        assert_hint(second_try(check_grad_prediction, answer), hint)

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
        assert_hint(second_try(check_weight_without_zero_grad, answer), hint)


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
