"""Notebook 07's Parsons problem: an AMP window from shuffled lines, with distractors that do
per micro-batch what belongs once per window (clipping, ``scaler.update()``) or step around
the scaler. An order is judged by what it trains: two windows of bfloat16 autocast on the CPU
with a GradScaler, whose weights must end where the reference's do."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from helpers.data import make_teacher_batches
from helpers.models import make_mlp
from helpers.parsons import parsons_checker, trains_like
from helpers.translation import N_


def amp_window(model, optimizer, scaler, window):
    """The reference: scale each micro-batch's loss, share 1 / len(window); once per window,
    unscale, clip, step through the scaler and update its scale."""
    optimizer.zero_grad()
    for inputs, targets in window:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs), targets) / len(window)
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()


def _trained(window_step: Callable) -> tuple[torch.Tensor]:
    """Two windows of 4 micro-batches with ``window_step``: the weights after them, flat."""
    batches = make_teacher_batches(n_batches=8, batch_size=8, features=8)
    model = make_mlp((8, 16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    for start in (0, 4):
        window_step(model, optimizer, scaler, batches[start : start + 4])
    return (torch.cat([p.detach().flatten() for p in model.parameters()]),)


check_amp_order = parsons_checker(
    "def amp_window(model, optimizer, scaler, window):",
    {
        "a": "scaler.update()",
        "b": "    nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "c": "for inputs, targets in window:",
        "d": "scaler.step(optimizer)",
        "e": "        loss = F.mse_loss(model(inputs), targets) / len(window)",
        "f": "optimizer.zero_grad()",
        "g": "    scaler.update()",
        "h": "nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "i": '    with torch.autocast("cpu", dtype=torch.bfloat16):',
        "j": "scaler.unscale_(optimizer)",
        "k": "    scaler.scale(loss).backward()",
        "l": "optimizer.step()",
    },
    distractors={
        "b": N_(
            "does a clip inside the loop clip the window's gradient? It rescales each partial "
            "sum, and still scaled: clip once, after unscale_()."
        ),
        "g": N_(
            "does the scale change inside a window? update() after a micro-batch, with no "
            "step, raises an error: update once, after scaler.step(optimizer)."
        ),
        "l": N_(
            "who steps the optimizer in an AMP window? scaler.step(optimizer): it skips the "
            "step when a gradient is inf or NaN, which optimizer.step() would apply."
        ),
    },
    required={
        "f": N_("what empties .grad before the window? Without it each window adds the last."),
        "c": N_("what runs the window's micro-batches? The loop over `window`."),
        "i": N_("what runs the forward pass in bfloat16? The autocast block."),
        "e": N_("what computes each micro-batch's share of the window's loss?"),
        "k": N_("which line runs backward()? Scale the loss first: scaler.scale(loss).backward()."),
        "j": N_(
            "what brings .grad back from its scale before the clip? scaler.unscale_(optimizer)."
        ),
        "h": N_("which line clips the window's gradient, once? clip_grad_norm_ after unscale_."),
        "d": N_("which line moves the weights? scaler.step(optimizer)."),
        "a": N_("what adjusts the scale for the next window? scaler.update(), once."),
    },
    runs_right=trains_like(amp_window, _trained),
    misordered=N_(
        "is each call where it belongs? zero_grad() first; each micro-batch's loss under "
        "autocast, scaled, backward; then once per window unscale_(), clip, scaler.step() "
        "and update()."
    ),
    why=N_(
        "every micro-batch's loss is scaled and backwarded into one sum; then, once, "
        "unscale_() brings it back, the clip sees the true norm, scaler.step() skips an "
        "overflow and update() adjusts the scale."
    ),
    doc="""Section 3's Parsons problem: an AMP window from shuffled lines, with three
    distractors (a clip and an update per micro-batch, optimizer.step() around the scaler).""",
    names={"F": F, "nn": nn, "torch": torch},
    before={
        ("j", "h"): N_(
            "does the clip see the true gradient before unscale_()? It sees the gradient "
            "times the scale, 65,536: unscale_() first, then clip."
        ),
        ("d", "a"): N_(
            "does the scale change before the step that checks it? update() comes after "
            "scaler.step(optimizer)."
        ),
        ("h", "d"): N_(
            "does the step use the clipped gradient? Clip before scaler.step(optimizer)."
        ),
    },
)
