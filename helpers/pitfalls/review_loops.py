"""The loops of exercise 05.2, a code review: six short training loops, some buggy, some
correct but unusual, shown to the learner with no label. ``REVIEW_KEY`` says which rule of the
loop auditor each one breaks ("ok" for none); tests/pitfalls/test_loop_review.py checks the
key by running every loop against a correct loop and under the auditor.

Each loop takes ``(model, optimizer, batches)``: one step per batch, or, in loop D, one step
per window of two micro-batches. The names say nothing of the bug on purpose."""

from __future__ import annotations

from torch import nn
from torch.nn import functional as F


def loop_a(model, optimizer, batches):
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def loop_b(model, optimizer, batches):
    optimizer.zero_grad()
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()


def loop_c(model, optimizer, batches):
    for inputs, targets in batches:
        optimizer.zero_grad(set_to_none=False)
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()


def loop_d(model, optimizer, batches):
    for i, (inputs, targets) in enumerate(batches):
        loss = F.mse_loss(model(inputs), targets) / 2
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        if i % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()


def loop_e(model, optimizer, batches):
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def loop_f(model, optimizer, batches):
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.zero_grad()
        optimizer.step()


REVIEW_LOOPS = {
    "A": loop_a,
    "B": loop_b,
    "C": loop_c,
    "D": loop_d,
    "E": loop_e,
    "F": loop_f,
}
# The rule each loop breaks, by the loop auditor's rule id; "ok" for a correct loop.
REVIEW_KEY = {
    "A": "ok",
    "B": "missing-zero-grad",
    "C": "ok",
    "D": "clip-per-micro-batch",
    "E": "ok",
    "F": "zero-grad-before-step",
}
# The accumulation steps each loop means: D steps once per two micro-batches.
ACCUMULATION_STEPS = {"A": 1, "B": 1, "C": 1, "D": 2, "E": 1, "F": 1}
