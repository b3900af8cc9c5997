"""Helpers of notebook 03: models, padded tokens, gradient recording, its exercise checkers."""

import pytest
import torch
from torch import nn

from helpers.accumulation import relative_error
from helpers.data import make_padded_tokens
from helpers.exercises.gradient_accumulation import (
    check_accumulation_loop,
    check_batch_coupling,
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
        (loop(lambda w, t, k: len(w) * t.numel()), "targets.numel() counts the padding too"),
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


class TestSeveralLossesCheckers:
    """Notebook 04's checkers: the solution passes, typical mistakes get their hint."""

    @staticmethod
    def run(body):
        from helpers.exercises.several_losses import check_two_task_window

        return check_two_task_window(body)

    def test_two_task_window(self):
        def solution(losses, counts, wa, wb):
            total = sum(counts)
            for (a, b), n in zip(losses, counts, strict=True):
                ((wa * a + wb * b) * n / total).backward()

        def one_backward(losses, counts, wa, wb):  # one graph for the window: right too
            total = sum(counts)
            pairs = zip(losses, counts, strict=True)
            sum((wa * a + wb * b) * n / total for (a, b), n in pairs).backward()

        def two_passes(losses, counts, wa, wb):
            for (a, b), n in zip(losses, counts, strict=True):
                (wa * a * n / sum(counts)).backward(retain_graph=True)
                (wb * b * n / sum(counts)).backward()

        for right in (solution, one_backward, two_passes):
            assert self.run(right).passed, right.__name__

        def each(scale, task_a=lambda wa: wa, task_b=lambda wb: wb, last_only=False):
            def body(losses, counts, wa, wb):
                pairs = list(zip(losses, counts, strict=True))
                for (a, b), n in pairs[-1:] if last_only else pairs:
                    weighted = task_a(wa) * a + task_b(wb) * b
                    (weighted * scale(n, counts)).backward()

            return body

        def no_retain(losses, counts, wa, wb):
            for a, b in losses:
                (wa * a).backward()
                (wb * b).backward()

        def share(n, counts):
            return n / sum(counts)

        cases = [
            (no_retain, "found a micro-batch's graph freed"),
            (each(lambda n, c: 1 / len(c)), "divided by k = 3"),
            (each(lambda n, c: 1), "added undivided"),
            (each(lambda n, c: n), "never divided by the window's count"),
            (each(lambda n, c: 1 / sum(c)), "divided by the window's count alone"),
            (each(share, lambda wa: 1, lambda wb: 1), "the weights w_a and w_b are missing"),
            (each(share, lambda wa: 2.0, lambda wb: 0.3), "the weights are swapped"),
            (each(share, task_b=lambda wb: 0), "only loss_a reached the trunk"),
            (each(share, task_a=lambda wa: 0), "only loss_b reached the trunk"),
            (each(share, task_a=lambda wa: 1), "without its weight w_a"),
            (each(share, task_b=lambda wb: 1), "without its weight w_b"),
            (each(share, lambda wa: wa * wa, lambda wb: wb * wb), "applied twice"),
            (each(lambda n, c: n / sum(c) / 2), "was halved"),
            (each(lambda n, c: n / sum(c) / 2.3), "normalized to sum to 1"),
            (each(share, last_only=True), "only the last micro-batch"),
            (lambda losses, counts, wa, wb: None, "did you call backward()"),
            (lambda losses, counts, wa, wb: wa * losses[0][0].backward(), "returns None"),
            (each(lambda n, c: 0.5), "not the window's w_a * g_a + w_b * g_b"),  # the fallback
            (..., "Not answered yet"),
        ]
        for body, hint in cases:
            result = self.run(body)
            assert not result.passed and hint in result.message, (hint, result.message)
        for answer in ("two_task_window", None, lambda losses: None):
            assert not self.run(answer).passed

    def test_misordered_gan(self):
        from helpers.exercises.several_losses import check_misordered_gan

        for right in ({"B", "C"}, "b, c", "BC", "c and B", ["c", "b"]):  # any form, any case
            assert check_misordered_gan(right).passed, right
        for answer, hints in [
            ({"A", "B", "C"}, ["A is false"]),
            ("abc", ["A is false"]),
            ({"B"}, ["C is true"]),
            ({"C"}, ["B is true"]),
            ({"A"}, ["A is false", "B is true", "C is true"]),
            ("a, c", ["A is false", "B is true"]),
            (set(), ["B is true", "C is true"]),
        ]:
            result = check_misordered_gan(answer)
            assert not result.passed and all(h in result.message for h in hints), result.message
        for answer in ({"B", "C", "D"}, "only B and C"):  # not statement letters
            result = check_misordered_gan(answer)
            assert not result.passed and "the statements are 'A', 'B' and 'C'" in result.message
        assert not check_misordered_gan(3).passed  # the wrong kind of answer: a message, no raise
        assert not check_misordered_gan(...).passed


class TestNotebook04GanClaims:
    """What notebook 04 says about a GAN update, and the key of its exercise 04.2, run."""

    @staticmethod
    def gan():
        torch.manual_seed(0)
        G, D = nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt_g = torch.optim.SGD(G.parameters(), lr=0.1)
        opt_d = torch.optim.SGD(D.parameters(), lr=0.1)
        real, noise = torch.randn(8, 8), torch.randn(8, 4)
        return G, D, opt_g, opt_d, real, noise

    @staticmethod
    def grads(loss, model):
        grads = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
        return torch.cat([g.flatten() for g in grads])

    def test_without_detach_d_loss_reaches_g_and_g_backward_raises(self):
        G, D, _, opt_d, real, noise = self.gan()
        bce = nn.functional.binary_cross_entropy_with_logits
        fake = G(noise)
        d_loss = bce(D(real), torch.ones(8, 1)) + bce(D(fake), torch.zeros(8, 1))
        d_loss.backward()
        assert all(p.grad is not None for p in G.parameters()), "D's loss reached G's .grad"
        opt_d.step()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            bce(D(fake), torch.ones(8, 1)).backward()  # G's loss, scored again after D's step

    def test_the_misordered_update_of_exercise_04_2(self):
        from helpers.exercises.several_losses import MISORDERED_GAN_TRUE

        G, D, opt_g, opt_d, real, noise = self.gan()
        bce = nn.functional.binary_cross_entropy_with_logits
        ones, zeros = torch.ones(8, 1), torch.zeros(8, 1)
        # the exercise's update, as the notebook prints it (A: nothing below raises)
        opt_d.zero_grad()
        opt_g.zero_grad()
        fake = G(noise)
        g_loss = bce(D(fake), ones)
        g_loss.backward(retain_graph=True)  # kept only to compute the references below
        d_loss = bce(D(real), ones) + bce(D(fake.detach()), zeros)
        d_loss.backward(retain_graph=True)
        d_grad = torch.cat([p.grad.flatten() for p in D.parameters()])
        g_grad = torch.cat([p.grad.flatten() for p in G.parameters()])
        # B: D's .grad at its step is g_loss's gradient plus d_loss's
        from_d_loss, from_g_loss = self.grads(d_loss, D), self.grads(g_loss, D)
        torch.testing.assert_close(d_grad, from_d_loss + from_g_loss)
        assert (d_grad - from_d_loss).norm() > 0.1 * from_d_loss.norm()
        # C: G's .grad at its step is g_loss's gradient only
        torch.testing.assert_close(g_grad, self.grads(g_loss, G), rtol=0, atol=0)
        opt_d.step()
        opt_g.step()
        assert MISORDERED_GAN_TRUE == {"B", "C"}

    def test_the_misordered_update_runs_as_printed(self):
        G, D, opt_g, opt_d, real, noise = self.gan()
        bce = nn.functional.binary_cross_entropy_with_logits
        ones, zeros = torch.ones(8, 1), torch.zeros(8, 1)
        opt_d.zero_grad()
        opt_g.zero_grad()
        fake = G(noise)
        g_loss = bce(D(fake), ones)
        g_loss.backward()
        d_loss = bce(D(real), ones) + bce(D(fake.detach()), zeros)
        d_loss.backward()
        opt_d.step()
        opt_g.step()  # A is false: no error

    def test_zeroing_d_right_before_its_backward_fixes_d_step(self):
        G, D, opt_g, opt_d, real, noise = self.gan()
        bce = nn.functional.binary_cross_entropy_with_logits
        ones, zeros = torch.ones(8, 1), torch.zeros(8, 1)
        opt_g.zero_grad()
        fake = G(noise)
        bce(D(fake), ones).backward()
        opt_d.zero_grad()  # moved: what g_loss left in D's .grad is dropped
        d_loss = bce(D(real), ones) + bce(D(fake.detach()), zeros)
        d_loss.backward(retain_graph=True)
        d_grad = torch.cat([p.grad.flatten() for p in D.parameters()])
        torch.testing.assert_close(d_grad, self.grads(d_loss, D))
