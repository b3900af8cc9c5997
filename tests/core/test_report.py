"""helpers.report: noise printed as its bound, surprises printed as themselves."""

import math

import numpy as np
import pytest
import torch

from helpers.report import below


@pytest.mark.parametrize("value", [0.0, 1.1e-08, 1.5e-08, -9.9e-07, np.float32(3e-7)])
def test_noise_prints_as_the_bound_whatever_its_digits(value):
    assert below(value, 1e-6) == "< 1e-6"


def test_the_bound_is_written_as_a_power_of_ten():
    assert below(0.0, 1e-5) == "< 1e-5"
    assert below(0.0, 0.001) == "< 1e-3"
    assert below(0.5, 1.0) == "< 1e0"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1e-6, "1.0e-06 (not < 1e-6)"),
        (2.34e-5, "2.3e-05 (not < 1e-6)"),
        (-0.3, "-3.0e-01 (not < 1e-6)"),
    ],
)
def test_a_value_over_the_bound_shows_itself(value, expected):
    assert below(value, 1e-6) == expected


def test_nan_and_inf_are_never_below():
    assert below(math.nan, 1e-6) == "nan (not < 1e-6)"
    assert below(math.inf, 1e-6) == "inf (not < 1e-6)"


def test_tensor_values_need_item():
    with pytest.raises(TypeError, match="value must be a real number"):
        below(torch.tensor(1e-8), 1e-6)


@pytest.mark.parametrize(
    ("bound", "error"),
    [
        (0, ValueError),
        (-1e-6, ValueError),
        (3e-6, ValueError),
        (math.inf, ValueError),
        ("1e-6", TypeError),
        (True, TypeError),
    ],
)
def test_bad_bounds_are_refused(bound, error):
    with pytest.raises(error, match="bound must be"):
        below(0.0, bound)
