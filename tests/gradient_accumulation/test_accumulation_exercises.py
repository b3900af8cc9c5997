"""Notebook 03's write exercises: a schedule's length (03.3) and, optional, the logged loss (03.5).
Each typical mistake is rejected with its hint, correct answers written differently pass,
answers of the wrong kind and code that raises give a ❌, never a traceback."""

import math

import numpy as np
import pytest
import torch

from helpers.gradient_accumulation.checkers_03 import (
    LOG_CASES,
    SCHEDULE_CASES,
    check_scheduler_steps,
    check_window_loss,
)


def window_loss_solution(losses, counts):
    total = sum(counts)
    return sum(loss.item() * count / total for loss, count in zip(losses, counts, strict=True))


def window_loss_tensors(losses, counts):
    weights = torch.tensor(counts, dtype=torch.float64)
    return (torch.stack(losses).double() * weights).sum() / weights.sum()


def window_loss_numpy(losses, counts):
    return np.average([float(loss) for loss in losses], weights=counts)


def window_loss_loop(losses, counts):
    summed, items = 0.0, 0
    for loss, count in zip(losses, counts, strict=True):
        summed += loss * count  # a tensor times an int: still a tensor
        items += count
    return summed / items


@pytest.mark.parametrize(
    "window_loss",
    [window_loss_solution, window_loss_tensors, window_loss_numpy, window_loss_loop],
)
def test_window_loss_accepts_correct_answers_however_written(window_loss):
    result = check_window_loss(window_loss)
    assert result.passed, result.message


@pytest.mark.parametrize(
    ("window_loss", "hint"),
    [
        (lambda losses, counts: losses[-1], "the last micro-batch's loss alone"),
        (lambda losses, counts: losses[-1] / len(losses), "last micro-batch's divided loss"),
        (
            lambda losses, counts: losses[-1] * counts[-1] / sum(counts),
            "add up every micro-batch's share",
        ),
        (lambda losses, counts: sum(losses) / len(losses), "the mean of the micro-batch means"),
        (lambda losses, counts: sum(loss / len(losses) for loss in losses), "mean of the micro"),
        (lambda losses, counts: sum(losses), "k times too large"),
        (
            lambda losses, counts: sum(x * c for x, c in zip(losses, counts, strict=True)),
            "divide it by the window's count",
        ),
        (
            lambda losses, counts: (
                sum(x * c for x, c in zip(losses, counts, strict=True)) / len(losses)
            ),
            "divided the summed loss by k",
        ),
        (
            lambda losses, counts: (
                sum(x * c for x, c in zip(losses, counts, strict=True))
                / (len(losses) * max(counts))
            ),
            "as if every micro-batch were full",
        ),
        (lambda losses, counts: 2.5, "the window's loss is"),  # the fallback names the value
    ],
)
def test_window_loss_names_each_typical_mistake(window_loss, hint):
    result = check_window_loss(window_loss)
    assert not result.passed and hint in result.message, result.message


def test_window_loss_mistakes_are_told_apart_by_the_first_case():
    losses, counts = LOG_CASES[0]
    expected = sum(x * c for x, c in zip(losses, counts, strict=True)) / sum(counts)
    from helpers.gradient_accumulation.checkers_03 import log_mistakes

    values = [expected] + [value for value, _ in log_mistakes(losses, counts)]
    assert len({round(v, 9) for v in values}) == len(values), values


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (..., "Not answered yet"),
        (lambda losses, counts: ..., "Not answered yet"),
        (None, "pass your function itself"),
        ("sum(losses) / len(losses)", "pass your function itself"),
        (lambda losses: losses[0], "give it 2 parameters"),
        (lambda losses, counts: None, "must be a number"),
        (lambda losses, counts: "2.3", "must be a number"),
        (lambda losses, counts: torch.stack(losses), "must be a single number"),
        (lambda losses, counts: 1 / 0, "your function raised ZeroDivisionError"),
        (lambda losses, counts: losses.sum(), "your function raised AttributeError"),
    ],
)
def test_window_loss_wrong_kinds_and_errors_give_a_message(answer, hint):
    result = check_window_loss(answer)
    assert not result.passed and hint in result.message, result.message


def test_window_loss_does_not_let_strict_mode_pass_a_mistake(strict_checks):
    with pytest.raises(AssertionError, match="mean of the micro-batch means"):
        check_window_loss(lambda losses, counts: sum(losses) / len(losses))
    assert check_window_loss(window_loss_solution).passed


def steps_ceil(n, k, epochs):
    return epochs * math.ceil(n / k)


def steps_floor_trick(n, k, epochs):
    return -(-n // k) * epochs


def steps_counting_windows(n, k, epochs):
    return len(range(0, n, k)) * epochs


def steps_tensor(n, k, epochs):
    return torch.tensor(epochs) * ((n + k - 1) // k)


@pytest.mark.parametrize(
    "scheduler_steps", [steps_ceil, steps_floor_trick, steps_counting_windows, steps_tensor]
)
def test_scheduler_steps_accepts_correct_answers_however_written(scheduler_steps):
    result = check_scheduler_steps(scheduler_steps)
    assert result.passed and "as an int" not in result.message, result.message


def test_a_float_count_passes_with_a_note_about_onecyclelr():
    result = check_scheduler_steps(lambda n, k, epochs: float(np.ceil(n / k) * epochs))
    assert result.passed and "OneCycleLR(total_steps=...) refuses a float" in result.message
    with pytest.raises(ValueError, match="Expected positive integer total_steps"):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=9.0)


@pytest.mark.parametrize(
    ("scheduler_steps", "hint"),
    [
        (lambda n, k, epochs: n * epochs, "that counts micro-batches, not optimizer steps"),
        (lambda n, k, epochs: epochs * (n // k), "leaves out each epoch's short last window"),
        (lambda n, k, epochs: epochs * (n // k + 1), "even when k divides n"),
        (lambda n, k, epochs: n * epochs / k, "true division counts a fraction of a step"),
        (lambda n, k, epochs: (n * epochs) // k, "windows do not run across epochs"),
        (lambda n, k, epochs: math.ceil(n * epochs / k), "windows do not run across epochs"),
        (lambda n, k, epochs: math.ceil(n / k), "multiply by epochs"),
        (lambda n, k, epochs: epochs * round(n / k), "round() goes to the nearest"),
        (lambda n, k, epochs: 1000, "the run makes"),  # the fallback gives the count
    ],
)
def test_scheduler_steps_names_each_typical_mistake(scheduler_steps, hint):
    result = check_scheduler_steps(scheduler_steps)
    assert not result.passed and hint in result.message, result.message


def test_the_schedule_cases_cover_a_tail_none_and_k_above_n():
    assert any(n % k for n, k, _ in SCHEDULE_CASES)
    assert any(n % k == 0 for n, k, _ in SCHEDULE_CASES)
    assert any(k > n for n, k, _ in SCHEDULE_CASES)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (..., "Not answered yet"),
        (lambda n, k, epochs: ..., "Not answered yet"),
        (9, "pass your function itself"),
        (None, "pass your function itself"),
        (lambda n, k: n, "give it 3 parameters"),
        (lambda n, k, epochs: None, "must be a number"),
        (lambda n, k, epochs: "9", "must be a number"),
        (lambda n, k, epochs: n / (k - 4), "your function raised ZeroDivisionError"),
        (lambda n, k, epochs: undefined_name, "is not defined"),  # noqa: F821
    ],
)
def test_scheduler_steps_wrong_kinds_and_errors_give_a_message(answer, hint):
    result = check_scheduler_steps(answer)
    assert not result.passed and hint in result.message, result.message


@pytest.mark.parametrize(
    "formula",
    [
        lambda n, k, e: e * math.ceil(n / k) - 1,
        lambda n, k, e: e * (n // k) + 1,
        lambda n, k, e: math.ceil(n / k) + e,
    ],
    ids=["one too few", "floor plus one", "plus epochs"],
)
def test_a_count_that_only_one_case_mistakes_for_a_known_error_gets_the_general_hint(formula):
    from helpers.gradient_accumulation.checkers_03 import check_scheduler_steps

    result = check_scheduler_steps(formula)
    assert not result.passed
    assert "each epoch has ceil(n / k) windows" in result.message, result.message
