"""Helpers of notebook 03: models, padded tokens, gradient recording, its exercise checkers."""

import pytest
import torch
from answers import second_try
from torch import nn

from helpers.accumulation import relative_error
from helpers.gradient_accumulation.checkers_03 import (
    check_accumulation_loop,
    check_batch_coupling,
    check_exact_norms,
    check_tail_fraction,
    check_tail_window_loop,
)
from helpers.models import make_norm_model


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
            "It is divided by k=4 but holds only 2",
        ),
        (loop(lambda w, t, k: int((t != -100).sum()) * len(w)), "weighted unequally"),
        (loop(lambda w, t, k: 1), "48x the mean over its tokens"),
        (loop(lambda w, t, k: len(w) * t.numel()), "targets.numel() counts the padding too"),
        (loop(window_tokens, zero=False), "still held window 1's gradient"),
        (lambda *args: 1 / 0, "raised ZeroDivisionError"),
        (..., "Not answered yet"),
    ],
)
def test_accumulation_loop_mistakes_get_their_hint(train_epoch, hint):
    result = second_try(check_accumulation_loop, train_epoch)
    assert not result.passed and hint in result.message, result.message


@pytest.mark.parametrize(
    ("train_epoch", "question"),
    [
        (loop(window_tokens, drop_tail=True), "is the short last window stepped?"),
        (loop(lambda w, t, k: k * t.numel()), "how many micro-batches does your last window"),
        (loop(lambda w, t, k: len(w) * t.numel()), "does targets.numel() count only the tokens"),
        (loop(window_tokens, zero=False), "does each window start from empty grads?"),
    ],
)
def test_accumulation_loops_first_wrong_answer_gets_the_question_alone(train_epoch, question):
    result = check_accumulation_loop(train_epoch)  # each test starts with none wrong yet
    assert not result.passed and question in result.message, result.message
    assert "Answer again" in result.message and "Divide by" not in result.message


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
    """The earlier form of exercise 03.4, a prediction made before the cell that measures it."""
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


@pytest.mark.parametrize(
    "answer", [{"A", "B"}, {"a", "b"}, ["B", "a"], ("A", "B"), "ab", "AB", "a, b", "A and B"]
)
def test_batch_coupling_takes_every_way_of_writing_a_and_b(answer):
    """Exercise 03.4 (optional), a prediction about four layers and losses the section did
    not measure."""
    result = check_batch_coupling(answer)
    assert result.passed, result.message


@pytest.mark.parametrize(
    ("answer", "hints", "not_named"),
    [
        ({"A"}, ["B divides each sample by its own length"], ["A,", "C ", "D "]),
        ({"b"}, ["A, BatchNorm in eval mode"], ["B divides", "C ", "D "]),
        ({"A", "B", "C"}, ["C subtracts the mean of the batch"], ["A,", "B divides", "D "]),
        ("abd", ["D scores each sample against the other samples"], ["A,", "B divides", "C "]),
        ("abcd", ["C subtracts", "D scores"], ["A,", "B divides"]),
        ({"C", "D"}, ["A, BatchNorm", "B divides", "C subtracts", "D scores"], []),
        (set(), ["A, BatchNorm", "B divides"], ["C subtracts", "D scores"]),
        ({"A", "B", "E"}, ["E: answer with the letters A, B, C and D"], []),
        ({"BatchNorm"}, ["answer with the letters"], []),
        (3, ["a set of names such as {'A', 'B'}"], []),
        (None, ["a set of names"], []),
        (..., ["Not answered yet"], []),
    ],
)
def test_batch_coupling_names_each_mistake(answer, hints, not_named):
    result = check_batch_coupling(answer)
    assert not result.passed
    for hint in hints:
        assert hint in result.message, result.message
    for other in not_named:
        assert other not in result.message, result.message


def test_batch_coupling_answer_is_what_accumulation_measures():
    """The checker's answer, measured: A and B keep 4 x 8 equal to 1 x 32, C and D do not."""
    from helpers.accumulation import current_gradients, full_batch_gradients

    class UnitLength(nn.Module):
        def forward(self, x):
            return x / x.norm(dim=1, keepdim=True)

    class Centred(nn.Module):
        def forward(self, x):
            return x - x.mean(dim=0)

    def in_batch_loss(z, _):
        return nn.functional.cross_entropy(z @ z.T, torch.arange(len(z)))

    def with_layer(layer, outputs=1):
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), layer, nn.ReLU(), nn.Linear(16, outputs))

    generator = torch.Generator().manual_seed(1)
    features, values = torch.randn(32, 8, generator=generator), torch.randn(32, 1)
    options = {
        "A": (make_norm_model("BatchNorm").eval(), nn.MSELoss()),
        "B": (with_layer(UnitLength()), nn.MSELoss()),
        "C": (with_layer(Centred()), nn.MSELoss()),
        "D": (with_layer(nn.Identity(), outputs=4), in_batch_loss),
    }
    exact = set()
    for option, (net, loss_fn) in options.items():
        reference = full_batch_gradients(net, loss_fn, features, values)
        for x, y in zip(features.split(8), values.split(8), strict=True):
            (loss_fn(net(x), y) / 4).backward()
        error = relative_error(current_gradients(net), reference)
        assert error < 1e-5 or error > 0.05, (option, error)
        if error < 1e-5:
            exact.add(option)
    assert check_batch_coupling(exact).passed, exact


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


# ------------------------------------------------------------ exercise 03.2, part 1
def tail_loop(weight, zero="window", windows=None):
    """A window loop over mean losses, each backward weighted by ``weight(window, targets,
    samples, k)``; ``zero`` is where it empties .grad ("window", "micro-batch" or "never")."""

    def train_epoch(model, optimizer, micro_batches, k):
        starts = list(range(0, len(micro_batches), k))[:windows]
        for start in starts:
            window = micro_batches[start : start + k]
            samples = sum(len(t) for _, t in window)
            if zero == "window":
                optimizer.zero_grad()
            for inputs, targets in window:
                if zero == "micro-batch":
                    optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(inputs), targets)
                (loss * weight(window, targets, samples, k)).backward()
            optimizer.step()

    return train_epoch


def share(window, targets, samples, k):
    return len(targets) / samples


def summed_over_samples(model, optimizer, micro_batches, k):  # another correct way
    for index in range(0, len(micro_batches), k):
        window = micro_batches[index : index + k]
        total = sum(t.numel() for _, t in window)
        for x, t in window:
            (nn.functional.cross_entropy(model(x), t, reduction="sum") / total).backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("train_epoch", [tail_loop(share), summed_over_samples])
def test_tail_window_loop_accepts_correct_answers_however_written(train_epoch):
    result = check_tail_window_loop(train_epoch)
    assert result.passed, result.message


@pytest.mark.parametrize(
    ("train_epoch", "hint"),
    [
        (tail_loop(lambda w, t, s, k: 1 / len(w)), "the short one's samples count double"),
        (tail_loop(lambda w, t, s, k: 1 / k), "Window 3 holds 2, so dividing each"),
        (tail_loop(lambda w, t, s, k: 1), "steps on the sum of 4 means"),
        (tail_loop(lambda w, t, s, k: 1 / s), "multiply by `len(targets)` too"),
        (tail_loop(share, zero="micro-batch"), "stepped on its last micro-batch alone"),
        (tail_loop(share, zero="never"), "Window 2 still held window 1's gradient"),
        (tail_loop(share, windows=2), "step() ran 2 times; 10 micro-batches with k=4 make 3"),
    ],
)
def test_tail_window_loop_names_each_typical_mistake(train_epoch, hint):
    result = second_try(check_tail_window_loop, train_epoch)
    assert not result.passed and hint in result.message, result.message


def test_tail_window_loop_first_asks_then_explains():
    wrong = tail_loop(lambda w, t, s, k: 1 / len(w))
    first = check_tail_window_loop(wrong)
    assert "Do the window's micro-batches hold the same number of samples?" in first.message
    assert "count double" not in first.message
    assert "count double" in check_tail_window_loop(wrong).message


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (..., "Not answered yet"),
        (None, "pass your function itself"),
        (lambda model, optimizer: None, "give it 4 parameters"),
    ],
)
def test_tail_window_loop_wrong_kinds_give_a_message(answer, hint):
    result = check_tail_window_loop(answer)
    assert not result.passed and hint in result.message, result.message


def test_an_error_in_the_tail_window_loop_is_explained():
    def reads_a_grad(model, optimizer, micro_batches, k):
        for p in model.parameters():
            p.grad.zero_()

    result = check_tail_window_loop(reads_a_grad)
    assert not result.passed and "AttributeError" in result.message
