"""helpers.claims.check: a claim that holds prints one line saying what was verified; one
that does not raises and says what was found; bad calls say how to call it."""

from __future__ import annotations

import pytest
import torch

from helpers.claims import check


def test_a_true_condition_prints_its_claim(capsys):
    check("w is a leaf", True)
    assert capsys.readouterr().out == "✓ w is a leaf\n"


def test_a_false_condition_raises_with_the_claim():
    with pytest.raises(AssertionError, match="✗ w is a leaf: it does not hold"):
        check("w is a leaf", False)


def test_an_equal_value_prints_what_it_equals(capsys):
    check("w.grad after two backward() calls", torch.tensor(4.0), 4.0)
    check("the steps", [1, 2], [1, 2])
    assert capsys.readouterr().out.splitlines() == [
        "✓ w.grad after two backward() calls == 4.0",
        "✓ the steps == [1, 2]",
    ]


def test_an_unequal_value_raises_with_both_values():
    with pytest.raises(AssertionError, match=r"got 3.0, expected 4.0"):
        check("w.grad", torch.tensor(3.0), 4.0)
    with pytest.raises(AssertionError, match="got tensor of shape"):
        check("grads", torch.zeros(2), torch.ones(2))
    with pytest.raises(AssertionError):
        check("shapes", torch.zeros(2), torch.zeros(3))


def test_close_values_print_the_bound_not_the_noise(capsys):
    full = torch.tensor([1.0, 2.0])
    check("accumulated = full batch", full + 1e-8, full, atol=1e-6)
    check("loose", 1.0, 1.2, atol=0.5)
    assert capsys.readouterr().out.splitlines() == [
        "✓ accumulated = full batch (max difference < 1e-6)",
        "✓ loose (max difference < 0.5)",
    ]


def test_values_beyond_the_bound_raise_with_the_difference():
    with pytest.raises(AssertionError, match=r"max difference is 0.1, not below 1e-6"):
        check("same", torch.tensor([1.0]), torch.tensor([1.1]), atol=1e-6)
    with pytest.raises(AssertionError, match="inf"):
        check("nan", torch.tensor([float("nan")]), torch.tensor([1.0]), atol=1e-6)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "hint"),
    [
        (("", True), {}, TypeError, "non-empty str"),
        (("x", 3), {}, TypeError, "check\\(claim, actual, expected\\)"),
        (("x", True), {"atol": 1e-6}, TypeError, "needs an expected"),
        (("x", 1.0, 1.0), {"atol": 0}, ValueError, "above 0"),
        (("x", 1.0, 1.0), {"atol": "small"}, ValueError, "like 1e-6"),
    ],
)
def test_bad_calls_say_how_to_call_it(args, kwargs, error, hint):
    with pytest.raises(error, match=hint):
        check(*args, **kwargs)


def test_python_floats_are_compared_in_float64_not_rounded_to_float32():
    with pytest.raises(AssertionError, match="not below 1e-9"):
        check("close", 1.0, 1.0 + 1e-8, atol=1e-9)  # float32 would round both to 1.0
