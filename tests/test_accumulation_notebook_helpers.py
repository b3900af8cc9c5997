"""Helpers of notebook 03: models, padded tokens, gradient recording, its exercise checkers."""

import pytest
import torch
from torch import nn

from helpers.accumulation import relative_error
from helpers.data import make_padded_tokens
from helpers.exercises.gradient_accumulation import (
    check_accumulation_loop,
    check_exact_norms,
    check_tail_fraction,
)
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


def loop(divide_by, drop_tail=False, zero=True):
    def train_epoch(model, optimizer, loss_fn, micro_batches, k):
        end = len(micro_batches) - (len(micro_batches) % k if drop_tail else 0)
        for start in range(0, end, k):
            window = micro_batches[start : start + k]
            if zero:
                optimizer.zero_grad()
            for inputs, targets in window:
                (loss_fn(model(inputs), targets) / divide_by(window, targets, k)).backward()
            optimizer.step()

    return train_epoch


def window_tokens(window, targets, k):
    return sum(int((y != -100).sum()) for _, y in window)


def test_accumulation_loop_solution_passes():
    assert check_accumulation_loop(loop(window_tokens)).passed


@pytest.mark.parametrize(
    ("train_epoch", "hint"),
    [
        (loop(window_tokens, drop_tail=True), "the last window of 2 was never stepped"),
        (
            loop(lambda w, t, k: k * t.numel()),
            "your last window is divided by k=4 but holds only 2",
        ),
        (loop(lambda w, t, k: int((t != -100).sum()) * len(w)), "weighted unequally"),
        (loop(lambda w, t, k: 1), "48x the mean over its tokens"),
        (loop(window_tokens, zero=False), "still held window 1's gradient"),
        (lambda *args: 1 / 0, "raised ZeroDivisionError"),
        (..., "Not answered yet"),
    ],
)
def test_accumulation_loop_mistakes_get_their_hint(train_epoch, hint):
    result = check_accumulation_loop(train_epoch)
    assert not result.passed and hint in result.message, result.message


def test_tail_fraction():
    """Exercise 03.1: 11 equal micro-batches, k = 4: the tail of 3 gets 3/4 of its gradient."""
    from fractions import Fraction

    import numpy as np

    for answer in (0.75, 3 / 4, Fraction(3, 4), np.float64(0.75), torch.tensor(0.75)):
        assert check_tail_fraction(answer).passed, answer
    misconceptions = check_tail_fraction.misconceptions
    assert len(misconceptions) >= 3 and 3 / 11 in misconceptions and 0 in misconceptions
    for answer, hint in [
        (3 / 11, "the tail's share of the data"),
        (0, "The tail is not dropped"),
        (1, "the tail's too"),
        (0.25, "one micro-batch's weight"),
        (4 / 3, "Upside down"),
        (0.5, "tail of 2"),
        (0.6, "its correct mean divides by 3"),  # the fallback
    ]:
        result = check_tail_fraction(answer)
        assert not result.passed and hint in result.message, (answer, result.message)
    for answer in (..., None, "3/4", [0.75], check_tail_fraction):
        assert not check_tail_fraction(answer).passed


def test_exact_norms():
    """Exercise 03.3, a prediction made before the cell that measures it."""
    assert check_exact_norms({"GroupNorm", "LayerNorm"}).passed
    assert check_exact_norms(["LayerNorm", "GroupNorm", "none"]).passed
    assert check_exact_norms("GroupNorm and LayerNorm").passed
    for answer, hint in [
        ({"GroupNorm", "LayerNorm", "BatchNorm"}, "BatchNorm normalizes with the mean"),
        ({"LayerNorm"}, "GroupNorm computes its statistics within each sample"),
        ({"BatchNorm"}, "LayerNorm computes its statistics within each sample"),
        ({"Dropout"}, "use the names"),
        (3, "a set of names"),
        (None, "a set of names"),
    ]:
        result = check_exact_norms(answer)
        assert not result.passed and hint in result.message, result.message


def test_the_exercise_checks_say_what_kind_of_answer_they_expect():
    for answer in ("train_epoch", None, 3):
        result = check_accumulation_loop(answer)
        assert not result.passed and "pass your function itself" in result.message
    result = check_accumulation_loop(lambda model, optimizer: None)
    assert not result.passed and "give it 5 parameters" in result.message


def test_accumulation_loop_that_zeroes_before_step_is_named():
    def train_epoch(model, optimizer, loss_fn, micro_batches, k):
        for start in range(0, len(micro_batches), k):
            window = micro_batches[start : start + k]
            tokens = sum(int((y != -100).sum()) for _, y in window)
            for inputs, targets in window:
                (loss_fn(model(inputs), targets) / tokens).backward()
            optimizer.zero_grad(set_to_none=False)
            optimizer.step()

    result = check_accumulation_loop(train_epoch)
    assert not result.passed and "zero_grad() run between backward() and step()" in result.message


class TestSeveralLossesCheckers:
    """Notebook 04's checkers: the solution passes, typical mistakes get their hint."""

    @staticmethod
    def run(body):
        from helpers.exercises.several_losses import check_two_task_backward

        return check_two_task_backward(body)

    def test_two_task_backward(self):
        assert self.run(lambda a, b, wa, wb: (wa * a + wb * b).backward()).passed

        def two_passes(a, b, wa, wb):
            (wa * a).backward(retain_graph=True)
            (wb * b).backward()

        assert self.run(two_passes).passed

        def no_retain(a, b, wa, wb):
            a.backward()
            b.backward()

        cases = [
            (no_retain, "found the graph freed: backward once"),
            (lambda a, b, wa, wb: (a + b).backward(), "the weights w_a and w_b are missing"),
            (lambda a, b, wa, wb: (wa * a).backward(), "loss_b was never backpropagated"),
            (lambda a, b, wa, wb: (wa * wa * a + wb * wb * b).backward(), "applied twice"),
            (lambda a, b, wa, wb: None, "did you call backward()"),
            (lambda a, b, wa, wb: wa * a.backward(), "backward() returns None"),
            (lambda a, b, wa, wb: a.backward(), "without its weight"),
            (lambda a, b, wa, wb: (wb * a + wa * b).backward(), "the weights are swapped"),
            (lambda a, b, wa, wb: (a + wb * b).backward(), "without its weight w_a"),
            (lambda a, b, wa, wb: (wa * a + b).backward(), "without its weight w_b"),
            (lambda a, b, wa, wb: ((wa * a + wb * b) / 2).backward(), "was halved"),
        ]
        for body, hint in cases:
            result = self.run(body)
            assert not result.passed and hint in result.message, result.message

    def test_gan_order(self):
        from helpers.exercises.several_losses import check_gan_order

        assert check_gan_order({"B"}).passed and check_gan_order("b").passed
        assert check_gan_order("only B").passed is False  # "only" is not an option letter
        for answer, hint in [
            ({"A", "B"}, "A raises"),
            ({"B", "C"}, "C runs, but"),
            ({"A"}, "B works"),
        ]:
            result = check_gan_order(answer)
            assert not result.passed and hint in result.message
        assert not check_gan_order(3).passed  # the wrong kind of answer: a message, no raise

    def test_window_gradient(self):
        from helpers.exercises.several_losses import check_window_gradient

        assert check_window_gradient(-0.4).passed
        for answer, hint in [
            (0.1, "g1 + g2"),
            (-1.6, "4x too large"),
            (-0.1, "one micro-batch's share"),
            (-0.3, "g2 alone"),
            (-0.2, "averages the two tasks"),
            (-0.05, "halved"),
        ]:
            result = check_window_gradient(answer)
            assert not result.passed and hint in result.message
