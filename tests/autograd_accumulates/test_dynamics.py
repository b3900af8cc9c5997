import copy

import pytest
import torch

from helpers.autograd_accumulates.dynamics import no_zero_grad_growth_factor
from helpers.data import make_article_setup, split_batches
from helpers.training import train_steps


@pytest.fixture(scope="module")
def article():
    return make_article_setup()


def test_small_steps_oscillate_without_growing(article):
    inputs, _, _ = article
    for lr in (0.001, 0.01, 0.07):
        assert no_zero_grad_growth_factor(inputs, 20, lr) == pytest.approx(1.0, abs=1e-9)


def test_growth_factor_predicts_the_measured_blow_up(article):
    inputs, targets, model = article
    factor = no_zero_grad_growth_factor(inputs, 20, 0.1)
    assert factor == pytest.approx(1.7364, abs=1e-4)
    history = train_steps(
        copy.deepcopy(model), split_batches(inputs, targets, 20), steps=200, lr=0.1, zero_grad=False
    )
    per_epoch = [max(history.losses[i : i + 5]) for i in range(0, 200, 5)]
    measured = (per_epoch[-1] / per_epoch[-11]) ** 0.1
    assert measured == pytest.approx(factor**2, rel=0.01)


def test_one_fixed_batch_is_stable_below_four_over_the_curvature(article):
    inputs, _, _ = article
    curvature = torch.linalg.eigvalsh(2 * inputs.T @ inputs / len(inputs)).max().item()
    below, above = 0.99 * 4 / curvature, 1.01 * 4 / curvature
    assert no_zero_grad_growth_factor(inputs, 100, below) == pytest.approx(1.0, abs=1e-9)
    assert no_zero_grad_growth_factor(inputs, 100, above) > 1.01


def test_rejects_bad_input():
    with pytest.raises(TypeError, match="2-D tensor"):
        no_zero_grad_growth_factor(torch.zeros(5), 2, 0.1)
    with pytest.raises(ValueError, match="empty"):
        no_zero_grad_growth_factor(torch.zeros(0, 3), 2, 0.1)
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        no_zero_grad_growth_factor(torch.zeros(4, 3), 0, 0.1)
    with pytest.raises(ValueError, match="lr must be a positive number"):
        no_zero_grad_growth_factor(torch.zeros(4, 3), 2, 0)
