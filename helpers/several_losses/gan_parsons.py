"""Notebook 04's Parsons problem: a GAN update from shuffled lines, with distractors that cut G
out of its own loss or let D's loss reach G. An order is judged by what it trains: two updates
of a small GAN, whose weights must end where the reference's do."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from helpers.parsons import parsons_checker, trains_like
from helpers.translation import N_

bce = nn.functional.binary_cross_entropy_with_logits


def gan_step(G, D, opt_g, opt_d, real, noise, ones, zeros):
    """The reference: D's update on the detached fakes, then G's on the fakes scored again."""
    fake = G(noise)
    opt_d.zero_grad()
    d_loss = bce(D(real), ones) + bce(D(fake.detach()), zeros)
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    g_loss = bce(D(fake), ones)  # scored again, by D after its step
    g_loss.backward()
    opt_g.step()


def _trained(step: Callable) -> tuple[torch.Tensor]:
    """Two updates of a small GAN (section 4's shapes) with ``step``: its weights, flat."""
    torch.manual_seed(0)
    G, D = nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt_g = torch.optim.SGD(G.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(D.parameters(), lr=0.1)
    real, ones, zeros = torch.randn(8, 8), torch.ones(8, 1), torch.zeros(8, 1)
    for _ in range(2):  # the second update shows a gradient the first one left behind
        step(G, D, opt_g, opt_d, real, torch.randn(8, 4), ones, zeros)
    return (torch.cat([p.detach().flatten() for net in (G, D) for p in net.parameters()]),)


check_gan_order = parsons_checker(
    "def gan_step(G, D, opt_g, opt_d, real, noise, ones, zeros):",
    {
        "a": "opt_g.step()",
        "b": "d_loss = bce(D(real), ones) + bce(D(fake), zeros)",
        "c": "fake = G(noise)",
        "d": "g_loss.backward()",
        "e": "opt_d.zero_grad()",
        "f": "d_loss = bce(D(real), ones) + bce(D(fake.detach()), zeros)",
        "g": "opt_d.step()",
        "h": "g_loss = bce(D(fake.detach()), ones)",
        "i": "d_loss.backward()",
        "j": "opt_g.zero_grad()",
        "k": "g_loss = bce(D(fake), ones)",
    },
    distractors={
        "b": N_(
            "should D's loss reach G? Without fake.detach(), d_loss.backward() runs on into G, "
            "adds D's loss to G's .grad and frees G's graph: G's own backward then fails."
        ),
        "h": N_(
            "can G learn from a detached fake? detach() cuts G out of g_loss's graph: G gets "
            "no gradient at all."
        ),
    },
    required={
        "c": N_("where do the fakes come from? The line that runs G on the noise."),
        "e": N_(
            "what empties D's .grad before its backward? g_loss.backward() of the update "
            "before wrote into it."
        ),
        "f": N_("what is D's loss? Real samples scored as real, detached fakes as fake."),
        "i": N_("which line gives D its gradient? Without d_loss.backward() D never learns."),
        "g": N_("which line moves D? Without opt_d.step() D never changes."),
        "j": N_("what empties G's .grad before its backward? Without it G's steps add up."),
        "k": N_("what is G's loss? The fakes, scored again by D, as real."),
        "d": N_("which line gives G its gradient? Without g_loss.backward() G never learns."),
        "a": N_("which line moves G? Without opt_g.step() G never changes."),
    },
    runs_right=trains_like(gan_step, _trained),
    misordered=N_(
        "does each model zero, backward and step on its own loss, in turn? D first: zero D's "
        "gradients, backward d_loss on the detached fakes, step D; then G: score the fakes "
        "again, zero G's gradients, backward g_loss, step G."
    ),
    why=N_(
        "D zeroes, backwards its loss on the detached fakes and steps; then D, after its "
        "step, scores the fakes again for G's loss, and G zeroes, backwards and steps: each "
        "model learns from its own loss only."
    ),
    doc="""Section 4's Parsons problem: a GAN update from shuffled lines, with two
    distractors (D's loss on fakes not detached, G's loss on detached fakes).""",
    names={"bce": bce},
    before={
        ("c", "f"): N_("where do the fakes come from? Run G on the noise first."),
        ("e", "i"): N_(
            "where must opt_d.zero_grad() go? Right before d_loss.backward(): later, it "
            "either empties the gradient opt_d.step() needs, or lets g_loss.backward() of "
            "the update before leak into D's .grad."
        ),
        ("g", "k"): N_(
            "is D scored again after its step? Compute g_loss after opt_d.step(): its graph "
            "needs D's new weights, and its backward must not reach D's step."
        ),
        ("j", "d"): N_(
            "does opt_g.zero_grad() come after G's backward? It would empty the gradient "
            "opt_g.step() needs: call it before g_loss.backward()."
        ),
        ("k", "d"): N_("which loss does g_loss.backward() run on? Compute g_loss first."),
        ("f", "i"): N_("which loss does d_loss.backward() run on? Compute d_loss first."),
    },
)
