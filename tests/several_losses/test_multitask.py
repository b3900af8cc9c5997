import pytest
import torch
from torch import nn

from helpers.several_losses.multitask import (
    cosine_similarity,
    flatten,
    pcgrad,
    task_gradients,
    weighted_sum,
)


@pytest.fixture
def two_heads():
    torch.manual_seed(0)
    trunk, head_a, head_b = nn.Linear(4, 6), nn.Linear(6, 1), nn.Linear(6, 1)
    x = torch.randn(10, 4)
    features = torch.tanh(trunk(x))
    loss_a = head_a(features).pow(2).mean()
    loss_b = (head_b(features) - 1).pow(2).mean()
    return trunk, head_a, loss_a, loss_b


def test_weighted_sum_scales_each_tasks_gradient_linearly(two_heads):
    trunk, _, loss_a, loss_b = two_heads
    (g_a,), (g_b,) = task_gradients([loss_a, loss_b], [trunk.weight])
    (combined,) = torch.autograd.grad(weighted_sum([loss_a, loss_b], [0.3, 2.0]), trunk.weight)
    torch.testing.assert_close(combined, 0.3 * g_a + 2.0 * g_b)


def test_task_gradients_leave_grad_untouched_and_fill_unreached_params(two_heads):
    trunk, head_a, loss_a, loss_b = two_heads
    grads = task_gradients([loss_a, loss_b], [trunk.weight, head_a.weight])
    assert trunk.weight.grad is None and head_a.weight.grad is None
    assert torch.count_nonzero(grads[1][1]) == 0, "loss_b does not reach head_a"


def test_cosine_similarity():
    assert cosine_similarity([torch.tensor([1.0, 0.0])], [torch.tensor([2.0, 0.0])]) == 1.0
    assert cosine_similarity([torch.tensor([1.0, 0.0])], [torch.tensor([-1.0, 0.0])]) == -1.0
    with pytest.raises(ValueError, match="zero"):
        cosine_similarity([torch.zeros(2)], [torch.ones(2)])


def test_pcgrad_projects_away_conflicts_only():
    agree = [[torch.tensor([1.0, 0.0])], [torch.tensor([1.0, 1.0])]]
    torch.testing.assert_close(pcgrad(agree)[0], torch.tensor([2.0, 1.0]))  # plain sum
    conflict = [[torch.tensor([1.0, 0.0])], [torch.tensor([-1.0, 1.0])]]
    combined = pcgrad(conflict)[0]
    # task 1 loses its component along task 2, and task 2 its component along task 1
    torch.testing.assert_close(combined, torch.tensor([0.5, 0.5]) + torch.tensor([0.0, 1.0]))
    for g in (conflict[0][0], conflict[1][0]):
        assert combined @ g >= 0, "the combined step does not increase either loss (first order)"


def test_pcgrad_keeps_parameter_shapes():
    grads = [[torch.ones(2, 3), torch.ones(3)], [-torch.ones(2, 3), torch.zeros(3)]]
    shapes = [tuple(g.shape) for g in pcgrad(grads)]
    assert shapes == [(2, 3), (3,)]


def test_bad_input(two_heads):
    _, _, loss_a, loss_b = two_heads
    with pytest.raises(ValueError, match="2 losses but 1 weights"):
        weighted_sum([loss_a, loss_b], [1.0])
    with pytest.raises(TypeError, match="non-empty list"):
        weighted_sum([])
    with pytest.raises(ValueError, match="scalar"):
        weighted_sum([torch.ones(3)])
    with pytest.raises(ValueError, match="require grad"):
        task_gradients([loss_a], [torch.ones(2)])
    with pytest.raises(ValueError, match="at least two tasks"):
        pcgrad([[torch.ones(2)]])
    with pytest.raises(ValueError, match="same parameters"):
        pcgrad([[torch.ones(2)], [torch.ones(3)]])
    with pytest.raises(ValueError, match="empty"):
        flatten([])
