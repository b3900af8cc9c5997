"""Parsons problems: every order that trains as the reference does is accepted, a distractor
or a missing line is answered with its rule, a misordered loop with the exercise's hint, and
bad input with what is expected; and the course's Parsons problems (03's window loop, 04's
GAN update, 07's AMP window) hold their keys and are listed in their notebooks as judged."""

from __future__ import annotations

import itertools

import pytest
from course import ROOT, read
from torch.nn import functional as F

from helpers.at_scale.checkers_07 import check_amp_order
from helpers.gradient_accumulation.checkers_03 import check_window_order
from helpers.parsons import parsons_checker
from helpers.several_losses.checkers_04 import check_gan_order

RIGHT = "cajhfkeg"

# Each problem: its checker, its notebook, a right order and other right ones written apart
# from it (the zero_grad calls may move), and wrong orders with the start of their answers.
PROBLEMS = {
    "03": (check_window_order, "03_gradient_accumulation.ipynb", RIGHT, ["cjahfkeg"], {}),
    "04": (
        check_gan_order,
        "04_several_losses.ipynb",
        "cefigjkda",
        ["jcefigkda", "ecfigjkda", "cefijgkda", "cefigkjda"],
        {
            "cfiegjkda": "line i comes before line e: ",  # D zeroed after its backward
            "ckefigjda": "line k comes before line g: ",  # G's loss scored before D's step
            "cefigjkad": "does each model zero, backward and step",  # G steps before backward
            "cefigjdka": "line d comes before line k: ",
        },
    ),
    "07": (
        check_amp_order,
        "07_accumulation_at_scale.ipynb",
        "fciekjhda",
        ["ciekjhdaf"],
        {
            "fciekhjda": "line h comes before line j: ",  # clipped while still scaled
            "fciekjhad": "line a comes before line d: ",
            "fciekjdha": "line d comes before line h: ",
            "fcikejhda": "in this order the lines do not make a function",
        },
    ),
}


@pytest.mark.parametrize("number", sorted(PROBLEMS))
def test_the_notebook_lists_the_lines_the_checker_judges(number):
    check, name, *_ = PROBLEMS[number]
    nb = read(ROOT / "notebooks" / name)
    prompts = [c.source for c in nb.cells if c.source.startswith("**Put it in order")]
    listed = [p.split("```text\n")[1].split("\n```")[0].splitlines() for p in prompts]
    assert [f"({letter}) {line}" for letter, line in check.lines.items()] in listed


@pytest.mark.parametrize("number", sorted(PROBLEMS))
def test_each_problem_takes_its_right_orders_and_names_its_mistakes(number):
    check, _, right, others, wrong_orders = PROBLEMS[number]
    for order in (right, right.upper(), " ".join(right), list(right), *others):
        result = check(order)
        assert result.passed, (order, result.message)
    for order, start in wrong_orders.items():
        result = check(order)
        assert not result.passed and start in result.message, (order, result.message)
    for letter in check.distractors:
        result = check(right + letter)
        assert result.message.startswith(f"line {letter} does not belong: "), result.message
    for letter in check.required:
        result = check(right.replace(letter, ""))
        assert result.message.startswith(f"your order leaves out line {letter}: ")
    for answer in (None, 7, right + "z", right + right[0]):
        assert not check(answer).passed and check(answer).message


def test_every_correct_order_is_accepted_however_written():
    for order in (RIGHT, "cjahfkeg", RIGHT.upper(), " ".join(RIGHT), list(RIGHT), tuple(RIGHT)):
        result = check_window_order(order)
        assert result.passed, (order, result.message)


def test_the_correct_orders_are_those_that_zero_once_per_window_outside_its_backward_passes():
    needed = sorted(check_window_order.required)
    passing = {
        "".join(order)
        for order in itertools.permutations(needed)
        if order[0] == "c" and check_window_order("".join(order)).passed  # c opens the loop
    }
    # zero_grad (j) before the window's micro-batches, or after its step: at the end of a
    # window it empties .grad for the next one, and the first window finds it None
    assert passing == {RIGHT, "cjahfkeg", "cahfkejg", "cahfkegj"}


@pytest.mark.parametrize("letter", sorted(check_window_order.distractors))
def test_a_distractor_is_answered_with_its_rule(letter):
    for at in range(1, len(RIGHT) + 1):
        result = check_window_order(RIGHT[:at] + letter + RIGHT[at:])
        assert not result.passed
        assert result.message.startswith(f"line {letter} does not belong: ")
        assert "?" in result.message


@pytest.mark.parametrize("letter", sorted(check_window_order.required))
def test_a_missing_line_is_named(letter):
    result = check_window_order(RIGHT.replace(letter, ""))
    assert not result.passed
    assert result.message.startswith(f"your order leaves out line {letter}: ")


def test_a_misordered_loop_gets_the_hint_and_never_raises():
    for order in ("cajhfkge", "cahfkjeg", "ajchfkeg", "hcajfkeg", "cajhkfeg"):
        result = check_window_order(order)
        assert not result.passed and result.message, order
    assert check_window_order("cajhfkge").message.startswith("line g comes before line e: ")
    assert "zero_grad(), step() and scheduler.step()" in check_window_order("cahfkjeg").message
    assert "do not make a function" in check_window_order("ajchfkeg").message
    assert "before the line that makes it" in check_window_order("cajhkfeg").message


def test_bad_input_gets_what_is_expected():
    for answer, fragment in (
        (None, "answer with the letters in order"),
        (7, "answer with the letters in order"),
        ("cajz", "there is no line z"),
        ("cajj", "line j appears twice"),
        ([1, 2], "answer with the letters in order"),
    ):
        result = check_window_order(answer)
        assert not result.passed and fragment in result.message, (answer, result.message)
    assert check_window_order(...).unanswered


def test_a_problem_is_refused_unless_its_letters_fit():
    with pytest.raises(ValueError, match="letters of lines"):
        parsons_checker(
            "def f():",
            {"a": "return 1"},
            distractors={"z": "Is it?"},
            required={},
            runs_right=lambda function: True,
            misordered="",
            why="",
            doc="",
            names={"F": F},
        )


def test_trains_like_compares_tensors_closely_and_numbers_exactly():
    import torch

    from helpers.parsons import trains_like

    runs = []

    def trained(function):
        runs.append(function)
        return function()

    def reference():
        return torch.ones(2), 3

    runs_right = trains_like(reference, trained)
    assert runs_right(lambda: (torch.ones(2) + 1e-9, 3))
    assert not runs_right(lambda: (torch.ones(2), 4)), "a step count must match exactly"
    assert not runs_right(lambda: (torch.ones(2) * 1.01, 3))
    assert runs.count(reference) == 1, "the reference runs once"
