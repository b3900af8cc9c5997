"""Notebook 07's checkers: correct answers written several ways pass, each known mistake is
named."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from helpers.exercises import training_stacks as X

PAD = -100


def _sums(model, micro_batches, no_sync=True):
    count = torch.zeros((), dtype=torch.int64)
    batches = list(micro_batches)
    for j, (tokens, targets) in enumerate(batches):
        last = j == len(batches) - 1
        with model.no_sync() if no_sync and not last else torch.enable_grad():
            F.cross_entropy(model(tokens), targets, ignore_index=PAD, reduction="sum").backward()
        count += (targets != PAD).sum()
    return count


def foreach_version(model, optimizer, micro_batches, world_size, all_reduce):
    optimizer.zero_grad()
    count = _sums(model, micro_batches)
    all_reduce(count)
    torch._foreach_mul_([p.grad for p in model.parameters()], world_size / count)
    nn.utils.clip_grad_norm_(model.parameters(), 0.4)
    optimizer.step()


def dividing_version(model, optimizer, micro_batches, world_size, all_reduce):
    for p in model.parameters():
        p.grad = None
    count = _sums(model, micro_batches, no_sync=False)
    all_reduce(count)
    for p in model.parameters():
        p.grad /= count / world_size
    nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.4)
    optimizer.step()


def reassigning_version(model, optimizer, micro_batches, world_size, all_reduce):
    optimizer.zero_grad(set_to_none=False)
    count = _sums(model, micro_batches)
    all_reduce(count)
    factor = world_size / count.item()
    for p in model.parameters():
        p.grad = p.grad * factor
    torch.nn.utils.clip_grad_norm_(list(model.parameters()), 0.4)
    optimizer.step()


@pytest.mark.parametrize("answer", [foreach_version, dividing_version, reassigning_version])
def test_correct_windows_pass(answer):
    assert X.check_scale_after_window(answer).passed


def _mistake(kind):
    def window(model, optimizer, micro_batches, world_size, all_reduce):
        if kind != "no zero_grad":
            optimizer.zero_grad()
        count = torch.zeros((), dtype=torch.int64)
        batches = list(micro_batches)
        if kind == "count first":
            count = sum((t != PAD).sum() for _, t in batches)
            all_reduce(count)
        for tokens, targets in batches:
            reduction = "mean" if kind == "mean loss" else "sum"
            loss = F.cross_entropy(model(tokens), targets, ignore_index=PAD, reduction=reduction)
            if kind == "count first":
                loss = loss * world_size / count
            loss.backward()
            if kind != "count first":
                count += (targets != PAD).sum()
        if kind == "no all_reduce":
            pass
        elif kind != "count first":
            all_reduce(count if kind != "local count" else count.clone())
        factor = 1 / count if kind == "no world factor" else world_size / count
        if kind == "clip before scaling":
            nn.utils.clip_grad_norm_(model.parameters(), 0.4)
        if kind != "count first":
            for p in model.parameters():
                p.grad *= factor
        if kind not in ("clip before scaling", "no clip"):
            nn.utils.clip_grad_norm_(model.parameters(), 0.4)
        optimizer.step()
        if kind == "two steps":
            optimizer.step()

    return window


@pytest.mark.parametrize(
    ("kind", "hint"),
    [
        ("no world factor", "averaged them over the ranks"),
        ("local count", "own token count"),
        ("mean loss", "backward the sum"),
        ("clip before scaling", "clipped before they were scaled"),
        ("no clip", "not clipped"),
        ("no zero_grad", "zero the gradients"),
        ("count first", "before the window's last backward"),
        ("no all_reduce", "all_reduce was never called"),
        ("two steps", "step once"),
    ],
)
def test_each_window_mistake_is_named(kind, hint):
    result = X.check_scale_after_window(_mistake(kind))
    assert not result.passed and hint in result.message, result.message


def test_wrong_kinds_and_placeholders():
    assert "Not answered yet" in X.check_scale_after_window(...).message
    assert "5 parameters" in X.check_scale_after_window(lambda model: None).message

    def raises(model, optimizer, micro_batches, world_size, all_reduce):
        all_reduce(3)

    assert "sums a tensor in place" in X.check_scale_after_window(raises).message

    def real_collective(model, optimizer, micro_batches, world_size, all_reduce):
        torch.distributed.all_reduce(torch.zeros(1))

    assert "call the all_reduce it passes in" in X.check_scale_after_window(real_collective).message


def fixed(model, micro_batches, k):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for start in range(0, len(micro_batches), k):
        window = micro_batches[start : start + k]
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()


def fixed_by_sum(model, micro_batches, k):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    windows = [micro_batches[i : i + k] for i in range(0, len(micro_batches), k)]
    for window in windows:
        for p in model.parameters():
            p.grad = None
        for x, y in window:
            F.mse_loss(model(x), y, reduction="sum").div(len(y) * len(window)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()


@pytest.mark.parametrize("answer", [fixed, fixed_by_sum])
def test_repaired_windows_pass(answer):
    assert X.check_repaired_window(answer).passed


def _broken(model, micro_batches, k):
    optimizers = {p: torch.optim.SGD([p], lr=0.5) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()
        optimizers[p].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)
    for start in range(0, len(micro_batches), k):
        for inputs, targets in micro_batches[start : start + k]:
            F.mse_loss(model(inputs), targets).backward()


def _by_k(model, micro_batches, k):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for start in range(0, len(micro_batches), k):
        optimizer.zero_grad()
        for inputs, targets in micro_batches[start : start + k]:
            (F.mse_loss(model(inputs), targets) / k).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()


def _per_micro_batch(model, micro_batches, k):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for inputs, targets in micro_batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def _no_clip(model, micro_batches, k):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for start in range(0, len(micro_batches), k):
        window = micro_batches[start : start + k]
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        optimizer.step()


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (_broken, "still steps inside backward"),
        (_by_k, "divided by k = 3"),
        (_per_micro_batch, "7 optimizer steps"),
        (_no_clip, "not clipped"),
    ],
)
def test_each_repair_mistake_is_named(answer, hint):
    result = X.check_repaired_window(answer)
    assert not result.passed and hint in result.message, result.message


def test_the_numeric_answers():
    assert X.check_scale_factor(2 / 80).passed and X.check_reduce_scatters(4).passed
    assert "DDP averages" in X.check_scale_factor(1 / 80).message
    assert "once per group" in X.check_reduce_scatters(1).message or "group by group" in (
        X.check_reduce_scatters(1).message
    )
