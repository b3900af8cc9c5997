"""What every exercise checker promises: a numeric question knows at least three common
mistakes and names each; every real number type is accepted; an answer of the wrong kind or
a learner's exception gives a ❌ with a message, never a raised error or a traceback."""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch
from torch import nn

import helpers
from helpers.checks import MEANINGS, LearnerCodeError, call_learner, checker, wrong


def exercise_checkers() -> dict[str, object]:
    found = {}
    for module in pkgutil.walk_packages(helpers.__path__, "helpers."):
        leaf = module.name.rsplit(".", 1)[-1]
        if not (leaf.startswith("checkers_") or leaf.endswith("_exercise")):
            continue
        imported = importlib.import_module(module.name)
        for name, value in vars(imported).items():
            if name.startswith("check_") and callable(value):
                if all(value is not other for other in found.values()):
                    found[f"{module.name.removeprefix('helpers.')}.{name}"] = value
    return found


CHECKERS = exercise_checkers()
NUMERIC = {name: c for name, c in CHECKERS.items() if hasattr(c, "expected")}
CHOICES = {name: c for name, c in CHECKERS.items() if hasattr(c, "options")}
TRACES = {name: c for name, c in CHECKERS.items() if hasattr(c, "expected_rows")}
ONE_ANSWER = {
    name: c
    for name, c in CHECKERS.items()
    if len(
        [
            p
            for p in inspect.signature(c).parameters.values()
            if p.default is inspect.Parameter.empty
        ]
    )
    == 1
}


def test_the_numeric_questions_are_found():
    assert len(NUMERIC) >= 8, sorted(NUMERIC)


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_a_numeric_question_names_at_least_three_mistakes(name):
    check = NUMERIC[name]
    assert len(check.misconceptions) >= 3
    expected = check.expected()
    for value, hint in check.misconceptions.items():
        assert not math.isclose(value, expected, rel_tol=1e-5, abs_tol=1e-6), value
        result = check(value)  # the question that names the misconception, first or alone
        assert not result.passed and check.questions[value] in result.message, result.message
        assert hint in check(value).message, "a second wrong answer shows the computation"
    right = check(expected)
    assert right.passed and right.message.endswith(f" is right: {check.why}"), right.message


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_a_first_wrong_number_gets_its_question_alone(name):
    check = NUMERIC[name]
    value = next(iter(check.misconceptions))
    first = check(value)
    assert first.message.endswith(
        f"{check.questions[value]} Answer again: a second wrong answer shows why."
    ), first.message
    assert check.misconceptions[value] not in first.message


def test_the_choice_and_trace_questions_are_found():
    assert len(CHOICES) >= 3 and len(TRACES) >= 2, (sorted(CHOICES), sorted(TRACES))


@pytest.mark.parametrize("name", sorted(CHOICES))
def test_a_choice_accepts_its_letter_however_written_and_names_each_wrong_option(name):
    check = CHOICES[name]
    for form in (check.answer, check.answer.upper(), f"({check.answer})", f" {check.answer}) "):
        result = check(form)
        assert result.passed and result.message.startswith(f"({check.answer}) is right: "), form
    value = check.options[check.answer]
    assert check(value).passed, "the option's own value is accepted too"
    for letter, hint in check.misconceptions.items():
        result = check(letter)
        assert not result.passed and hint.split(" ")[0] in result.message, (letter, result.message)
        hint = result.message.split(" is not it. ", 1)[1]
        assert "?" in hint.split(". ")[0], f"the hint asks about the misconception first: {hint}"
    for given in ("z", "e", ""):
        assert not check(given).passed


@pytest.mark.parametrize("name", sorted(TRACES))
def test_a_trace_table_accepts_its_rows_in_any_real_number_type(name):
    check = TRACES[name]
    rows = check.expected_rows
    assert check(rows).passed
    assert check([list(row) for row in rows]).passed
    as_tensors = [tuple(None if v is None else torch.tensor(v) for v in row) for row in rows]
    assert check(tuple(as_tensors)).passed
    rounded = [tuple(None if v is None else round(v, 4) for v in row) for row in rows]
    assert check(rounded).passed, "what the learner writes, 2.4 for 2.4000000953674316"


@pytest.mark.parametrize("name", sorted(TRACES))
def test_a_trace_table_names_the_first_wrong_row_and_never_raises(name):
    check = TRACES[name]
    rows = [list(row) for row in check.expected_rows]
    for number in range(len(rows)):
        for column, name_of_column in enumerate(check.columns):
            wrong_rows = [list(row) for row in rows]
            value = wrong_rows[number][column]
            wrong_rows[number][column] = 7.25 if value is None else None
            result = check(wrong_rows)
            assert not result.passed
            assert result.message.startswith(f"row {number + 1} ("), result.message
            assert f", {name_of_column}: " in result.message, result.message
            assert "?" in result.message, "the hint asks about a misconception first"
    for bad in ([], rows[:-1], [*rows, rows[-1]], [["4", *rows[0][1:]], *rows[1:]], [rows[0][:1]]):
        result = check(bad)
        assert not result.passed and result.message


def number_forms(value: float) -> list[object]:
    forms = [
        value,
        Fraction(value).limit_denominator(1000),
        Decimal(repr(value)),
        np.float64(value),
        np.float32(value),
        np.array(value),
        np.array([value]),
        torch.tensor(value),
        torch.tensor([value], dtype=torch.float64),
    ]
    if float(value).is_integer():
        forms += [int(value), np.int64(value)]
    return forms


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_a_numeric_question_accepts_every_real_number_type(name):
    check = NUMERIC[name]
    for form in number_forms(check.expected()):
        result = check(form)
        assert result.passed, (type(form).__name__, result.message)


@pytest.mark.parametrize("name", sorted(ONE_ANSWER))
@pytest.mark.parametrize(
    "answer",
    [None, "some text", 3.5, [1, 2], lambda: None, ...],
    ids=["None", "str", "float", "list", "function", "Ellipsis"],
)
def test_a_wrong_kind_of_answer_gets_a_message_not_an_error(name, answer):
    result = ONE_ANSWER[name](answer)
    assert not result.passed and result.message


def test_strict_mode_raises_for_a_wrong_kind_of_answer(strict_checks):
    check = CHECKERS["autograd_accumulates.checkers_01.check_grad_prediction"]
    with pytest.raises(AssertionError, match="must be a number"):
        check("17")


def test_a_checker_reports_the_learners_exception_with_its_meaning():
    @checker
    def check(function):
        call_learner(function)
        return wrong("not reached")

    def learner():
        w = torch.ones(1, requires_grad=True)
        loss = (w * 2).sum()
        loss.backward()
        loss.backward()

    result = check(learner)
    assert not result.passed
    assert result.message.startswith("your function raised RuntimeError: Trying to backward")
    assert "compute a fresh loss" in result.message


def _backward_twice():
    loss = (torch.ones(1, requires_grad=True) * 2).sum()
    loss.backward()
    loss.backward()


def _no_graph():
    torch.ones(1).sum().backward()


def _update_before_step():
    model = nn.Linear(2, 1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.ones(1, 2)).sum()).backward()
    scaler.update()


def _step_without_grads():
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.ones(1, 2)).sum())
    scaler.step(optimizer)


def _no_update_between_windows():
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(2):
        scaler.scale(model(torch.ones(1, 2)).sum()).backward()
        scaler.unscale_(optimizer)
        scaler.step(optimizer)


def _unscale_twice():
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.ones(1, 2)).sum()).backward()
    scaler.unscale_(optimizer)
    scaler.unscale_(optimizer)


def _step_before_backward():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    loss = model(torch.ones(1, 2)).sum()
    with torch.no_grad():
        model[1].weight.add_(1.0)  # what a step() before backward() does
    loss.backward()


def _unscale_without_scale():
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    torch.amp.GradScaler("cpu").unscale_(optimizer)


def _param_group_twice():
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.add_param_group({"params": model.parameters()})


def _one_cycle(total_steps, steps):
    optimizer = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=total_steps)
    for _ in range(steps):
        optimizer.step()
        scheduler.step()


def _leaf_grad_zeroed_in_place():
    torch.ones(2, requires_grad=True).zero_()


def _requires_grad_on_a_non_leaf():
    (torch.ones(2, requires_grad=True) * 2).requires_grad_(False)


def _non_scalar():
    (torch.ones(2, requires_grad=True) * 2).backward()


def _shapes():
    nn.Linear(3, 1)(torch.ones(2, 4))


def _unpack_too_few():
    for _inputs, _targets in [torch.ones(1)]:
        pass


def _unpack_too_many():
    for _inputs, _targets in [(1, 2, 3)]:
        pass


def _not_callable():
    loss = torch.tensor(1.0)
    loss(2)


def _division():
    return 1 / 0


def _undefined():
    return undefined_name  # noqa: F821


def _none_grad():
    w = nn.Parameter(torch.ones(2))
    torch.optim.SGD([w], lr=0.1).zero_grad()
    w.grad.add_(1.0)  # .grad is None until a backward()


def _all_reduce_result():
    reduced = None  # what dist.all_reduce(tensor) returns: it reduces tensor in place
    return reduced / 2


MEANING_CASES = {
    "NoneType": _none_grad,
    "backward through the graph a second time": _backward_twice,
    "does not require grad and does not have a grad_fn": _no_graph,
    "No inf checks were recorded for this optimizer": _step_without_grads,
    "No inf checks were recorded prior to update": _update_before_step,
    "unscale_() is being called after step()": _no_update_between_windows,
    "unscale_() has already been called": _unscale_twice,
    "modified by an inplace operation": _step_before_backward,
    "grad can be implicitly created only for scalar outputs": _non_scalar,
    "Attempted unscale_ but _scale is None": _unscale_without_scale,
    "Tried to step": lambda: _one_cycle(6, 7),
    "a leaf Variable that requires grad is being used in an in-place operation": (
        _leaf_grad_zeroed_in_place
    ),
    "you can only change requires_grad flags of leaf variables": _requires_grad_on_a_non_leaf,
    "Expected positive integer total_steps": lambda: _one_cycle(7.5, 1),
    "some parameters appear in more than one parameter group": _param_group_twice,
    "cannot be multiplied": _shapes,
    "not enough values to unpack": _unpack_too_few,
    "too many values to unpack": _unpack_too_many,
    "object is not callable": _not_callable,
    "division by zero": _division,
    "is not defined": _undefined,
}


def test_every_meaning_has_a_real_case():
    assert set(MEANING_CASES) == set(MEANINGS)


@pytest.mark.parametrize("fragment", sorted(MEANING_CASES))
def test_each_real_error_gets_its_meaning(fragment):
    with pytest.raises(LearnerCodeError) as raised:
        call_learner(MEANING_CASES[fragment])
    assert fragment in str(raised.value.error)
    assert str(raised.value).endswith(MEANINGS[fragment])
    assert ".. " not in str(raised.value).replace("...", "")


def test_all_reduces_none_gets_the_meaning_of_a_none_too():
    with pytest.raises(LearnerCodeError) as raised:
        call_learner(_all_reduce_result)
    assert str(raised.value).endswith(MEANINGS["NoneType"])


def test_exit_in_the_learners_code_is_reported_too():
    def learner():
        raise SystemExit(1)

    with pytest.raises(LearnerCodeError, match="return from your function instead"):
        call_learner(learner)


def test_a_numeric_checker_needs_a_question_for_each_mistake():
    from helpers.checks import number_checker

    hints = {1.0: "One.", 2.0: "Two."}
    questions = {1.0: "Is it one?", 2.0: "Is it two?", None: "What is it?"}
    check = number_checker(3.0, hints, "Three.", questions=questions, why="it is.", doc="")
    assert check(3).message.endswith("3 is right: it is.")
    for broken in (
        {1.0: "Is it one?", None: "What is it?"},  # a mistake without its question
        {**questions, None: "No question."},  # a question that asks nothing
        {1.0: "Is it one?", 2.0: "Is it two?"},  # no question for the fallback
    ):
        with pytest.raises(ValueError, match="questions must give each misconception"):
            number_checker(3.0, hints, "Three.", questions=broken, why="", doc="")
