"""An exception inside the learner's function gets what it usually means in that exercise
(``call_learner``'s ``meanings``), before the meanings that hold in any exercise: each
exercise that passes its own is tried with the mistake that raises there."""

import pytest
import torch
from torch.nn import functional as F

from helpers import checks
from helpers.at_scale.checkers_07 import check_amp_window
from helpers.audit_and_repair import repair_trace
from helpers.audit_and_repair.checkers_06 import check_repair_c
from helpers.autograd_accumulates import checkers_01
from helpers.capstone.checkers_09 import check_capstone
from helpers.gradient_accumulation.checkers_03 import (
    check_accumulation_loop,
    check_tail_window_loop,
)
from helpers.training_stacks.checkers_08 import check_scale_after_window
from helpers.translation import translate


def zeroes_none_grads(model, optimizer, micro_batches, k):
    for p in model.parameters():
        p.grad.zero_()  # .grad is None before the first backward()


def zeroes_none_grads_with_loss(model, optimizer, loss_fn, micro_batches, k):
    for p in model.parameters():
        p.grad.zero_()


def scales_the_backward(model, optimizer, scaler, window):
    for inputs, targets in window:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs), targets)
        scaler.scale(loss.backward()).backward()  # backward() returns None


def keeps_all_reduces_result(model, optimizer, micro_batches, world_size, all_reduce):
    count = torch.tensor(0)
    for _, targets in micro_batches:
        count += (targets != -100).sum()
    count = all_reduce(count)  # all_reduce returns None
    for p in model.parameters():
        p.grad.mul_(world_size / count)


def capstone_scales_the_backward(
    model, optimizer, scheduler, scaler, micro_batches, accumulation_steps
):
    for inputs, targets in micro_batches:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(inputs), targets, ignore_index=-100, reduction="sum")
        scaler.scale(loss.backward()).backward()


@pytest.mark.parametrize(
    ("check", "answer", "meaning"),
    [
        (check_tail_window_loop, zeroes_none_grads, checks.NONE_GRAD_IN_A_WINDOW),
        (check_accumulation_loop, zeroes_none_grads_with_loss, checks.NONE_GRAD_IN_A_WINDOW),
        (check_amp_window, scales_the_backward, checks.NONE_IN_AN_AMP_WINDOW),
        (check_scale_after_window, keeps_all_reduces_result, checks.NONE_FROM_ALL_REDUCE),
    ],
)
def test_a_none_inside_the_learners_function_means_this_exercises_mistake(check, answer, meaning):
    result = check(answer)
    assert not result.passed
    assert translate(meaning["NoneType"]) in result.message, result.message  # every one has it
    assert translate(checks.MEANINGS["NoneType"]) not in result.message


def test_a_capstone_stage_gets_its_stages_meaning():
    result = check_capstone(capstone_scales_the_backward, stage=3)
    assert not result.passed
    assert translate(checks.NONE_IN_AN_AMP_WINDOW["NoneType"]) in result.message, result.message


def test_without_meanings_of_its_own_an_exercise_gets_the_general_one():
    def raises():
        None.zero_()

    with pytest.raises(checks.LearnerCodeError) as caught:
        checks.call_learner(raises)
    assert translate(checks.MEANINGS["NoneType"]) in str(caught.value)
    with pytest.raises(checks.LearnerCodeError) as caught:
        checks.call_learner(raises, meanings=checks.NONE_FROM_ALL_REDUCE)
    assert translate(checks.NONE_FROM_ALL_REDUCE["NoneType"]) in str(caught.value)


def backward_on_the_number(model, optimizer, batches):
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets).item()
        loss.backward()  # a float has no backward()
        optimizer.step()


def keeps_what_backward_returns(model, optimizer, batches):
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss = loss.backward()  # None
        print(loss.item())


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (backward_on_the_number, "has no attribute 'backward'"),
        (keeps_what_backward_returns, "NoneType"),
    ],
)
def test_the_training_loops_exceptions_get_its_meanings(answer, fragment):
    result = checkers_01.check_training_loop(answer)
    assert not result.passed
    assert translate(checkers_01.TRAINING_LOOP_MEANINGS[fragment]) in result.message
    assert translate(checks.MEANINGS["NoneType"]) not in result.message


def loop_c_without_the_import(model, optimizer, micro_batches, accumulation_steps=4):
    for window in windows(micro_batches, accumulation_steps):  # noqa: F821 (not imported)
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        optimizer.step()


def test_a_repair_that_uses_windows_unimported_is_told_where_it_is():
    result = check_repair_c(loop_c_without_the_import)
    assert not result.passed
    meaning = repair_trace.REPAIR_MEANINGS["name 'windows' is not defined"]
    assert translate(meaning) in result.message, result.message
    assert translate(checks.MEANINGS["is not defined"]) not in result.message
