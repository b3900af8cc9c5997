"""Helpers of notebook 03: models, padded tokens, gradient recording, its exercise checkers."""

import pytest
import torch
from torch import nn

from helpers.accumulation import relative_error
from helpers.data import make_padded_tokens
from helpers.grads import StepGradients
from helpers.models import NORMS, TokenModel, make_norm_model


def test_padded_tokens_pad_past_each_length():
    tokens, targets, lengths = make_padded_tokens(5, 4, seed=1)
    assert tokens.shape == targets.shape == (5, 4)
    for row, length in enumerate(lengths):
        assert 1 <= length <= 4
        assert (targets[row, length:] == -100).all() and (targets[row, :length] >= 0).all()
    with pytest.raises(ValueError, match="at least 1"):
        make_padded_tokens(0, 4)


def test_token_model_layout_and_errors():
    logits = TokenModel(vocab=11)(torch.zeros(3, 5, dtype=torch.long))
    assert logits.shape == (3, 11, 5)
    with pytest.raises(ValueError, match=r"\(batch, time\)"):
        TokenModel()(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="vocab must be at least 2"):
        TokenModel(vocab=1)


def test_norm_models():
    for norm in NORMS:
        assert make_norm_model(norm)(torch.randn(4, 8)).shape == (4, 1)
    assert isinstance(make_norm_model("BatchNorm")[1], nn.BatchNorm1d)
    with pytest.raises(ValueError, match="norm must be one of"):
        make_norm_model("InstanceNorm")


def test_relative_error():
    a = [torch.tensor([3.0, 4.0])]
    assert relative_error(a, a) == 0
    assert relative_error([torch.tensor([3.0, 4.0 + 5.0])], a) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="equally long"):
        relative_error([], [])
    with pytest.raises(ValueError, match="shapes differ"):
        relative_error([torch.zeros(2)], [torch.zeros(3)])


def test_step_gradients_records_what_each_step_used():
    w = nn.Parameter(torch.tensor([1.0, 2.0]))
    unused = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([w, unused], lr=0.1)
    with StepGradients(optimizer) as record:
        (w**2).sum().backward()
        optimizer.step()
    optimizer.step()  # outside: not recorded
    assert len(record.at_steps) == 1
    assert torch.equal(record.at_steps[0], torch.tensor([2.0, 4.0, 0.0]))
    with pytest.raises(TypeError):
        StepGradients("sgd")
