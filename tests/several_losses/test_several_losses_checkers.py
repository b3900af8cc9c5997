"""Helpers of notebook 03: models, padded tokens, gradient recording, its exercise checkers."""

import pytest
import torch
from answers import second_try
from torch import nn


class TestSeveralLossesCheckers:
    """Notebook 04's checkers: the solution passes, typical mistakes get their hint."""

    @staticmethod
    def run(body):
        from helpers.several_losses.checkers_04 import check_two_task_window

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
        from helpers.several_losses.checkers_04 import check_misordered_gan

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
            result = second_try(check_misordered_gan, answer)
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
        from helpers.several_losses.checkers_04 import MISORDERED_GAN_TRUE

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
