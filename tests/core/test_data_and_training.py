import copy

import pytest
import torch
from torch import nn

from helpers.data import make_article_setup, split_batches
from helpers.training import History, compare_zero_grad, train_steps, trainable_parameters


@pytest.fixture
def article():
    inputs, targets, model = make_article_setup()
    return model, split_batches(inputs, targets, 20)


def test_article_data_is_the_articles_seeded_stream_and_leaves_global_rng_alone():
    torch.manual_seed(7)
    before = torch.get_rng_state()
    inputs, targets, model = make_article_setup(seed=42)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(42)
    assert torch.equal(inputs, torch.randn(100, 10))
    assert torch.equal(targets, torch.randn(100, 1))
    assert model.weight.shape == (1, 10) and model.bias is None


def test_split_batches_keeps_order_and_a_short_last_batch():
    inputs, targets = torch.arange(10.0).unsqueeze(1), torch.arange(10.0)
    batches = split_batches(inputs, targets, 4)
    assert [len(x) for x, _ in batches] == [4, 4, 2]
    assert torch.equal(torch.cat([y for _, y in batches]), targets)


@pytest.mark.parametrize(
    ("inputs", "targets", "size", "error", "match"),
    [
        (torch.zeros(0, 2), torch.zeros(0), 2, ValueError, "empty"),
        (torch.zeros(3, 2), torch.zeros(4), 2, ValueError, "same length"),
        (torch.zeros(3, 2), torch.zeros(3), 0, ValueError, "at least 1"),
        (torch.zeros(3, 2), torch.zeros(3), 1.5, TypeError, "whole number"),
        ([1, 2], torch.zeros(2), 1, TypeError, "tensors"),
    ],
)
def test_split_batches_rejects_bad_input(inputs, targets, size, error, match):
    with pytest.raises(error, match=match):
        split_batches(inputs, targets, size)


def test_with_zero_grad_each_step_uses_its_own_batch_gradient(article):
    model, batches = article
    history = train_steps(copy.deepcopy(model), batches, steps=2, lr=0.01)
    manual = copy.deepcopy(model)
    for inputs, targets in batches[:2]:
        manual.zero_grad()
        nn.functional.mse_loss(manual(inputs), targets).backward()
        with torch.no_grad():
            manual.weight -= 0.01 * manual.weight.grad
    assert torch.allclose(history.weights[-1], manual.weight.flatten())


def test_without_zero_grad_is_sgd_with_momentum_one_bit_for_bit(article):
    model, batches = article
    buggy = train_steps(copy.deepcopy(model), batches, steps=50, lr=0.01, zero_grad=False)
    heavy = train_steps(copy.deepcopy(model), batches, steps=50, lr=0.01, momentum=1.0)
    assert all(torch.equal(a, b) for a, b in zip(buggy.weights, heavy.weights, strict=True))
    plain = train_steps(copy.deepcopy(model), batches, steps=50, lr=0.01)
    assert not torch.equal(buggy.weights[-1], plain.weights[-1])


def test_history_records_every_step(article):
    model, batches = article
    history = train_steps(copy.deepcopy(model), batches, steps=7, lr=0.01)
    assert history.steps == len(history.grad_norms) == len(history.weights) == 7
    assert history.losses[0] == pytest.approx(1.2663, abs=1e-4)


def test_compare_zero_grad_trains_copies_from_the_same_start(article):
    model, batches = article
    start = model.weight.detach().clone()
    runs = compare_zero_grad(model, batches, steps=5, lr=0.01)
    assert set(runs) == {"with zero_grad", "without zero_grad"}
    assert torch.equal(model.weight, start), "the model passed in is not trained"
    assert runs["with zero_grad"].losses[0] == runs["without zero_grad"].losses[0]
    assert runs["with zero_grad"].losses[1] == runs["without zero_grad"].losses[1]
    assert runs["with zero_grad"].losses[2] != runs["without zero_grad"].losses[2]


def test_train_steps_rejects_bad_input(article):
    model, batches = article
    frozen = copy.deepcopy(model).requires_grad_(False)
    with pytest.raises(ValueError, match="no parameters that require grad"):
        train_steps(frozen, batches, steps=1, lr=0.1)
    with pytest.raises(ValueError, match="no parameters that require grad"):
        trainable_parameters(nn.ReLU())
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        train_steps("model", batches, steps=1, lr=0.1)
    with pytest.raises(ValueError, match="batches is empty"):
        train_steps(model, [], steps=1, lr=0.1)
    with pytest.raises(ValueError, match="2 inputs but 3 targets"):
        train_steps(model, [(torch.zeros(2, 10), torch.zeros(3, 1))], steps=1, lr=0.1)
    with pytest.raises(TypeError, match=r"\(inputs, targets\) pair"):
        train_steps(model, [torch.zeros(2, 10)], steps=1, lr=0.1)
    with pytest.raises(ValueError, match="steps must be at least 1"):
        train_steps(model, batches, steps=0, lr=0.1)
    with pytest.raises(ValueError, match="lr must be a positive number"):
        train_steps(model, batches, steps=1, lr=-0.1)
    with pytest.raises(ValueError, match="must not be negative"):
        train_steps(model, batches, steps=1, lr=0.1, momentum=-1)
    assert isinstance(History(), History)
