"""Notebook 05's prediction and notebook 06's repairs: each repair checker accepts every
correct repair however it is written and rejects plausible wrong ones with a hint that names
the mistake; the prediction names its misconceptions. The loops here are what learners
write."""

from __future__ import annotations

import ast
import inspect
import linecache
import math
import textwrap
from decimal import Decimal
from fractions import Fraction

import nbformat
import numpy as np
import pytest
import torch
from answers import second_try
from course import NOTEBOOKS, cells_tagged
from torch import nn
from torch.nn import functional as F

from helpers.accumulation import windows
from helpers.audit_and_repair import checkers_06
from helpers.audit_and_repair.checkers_06 import (
    check_repair,
    check_repair_a,
    check_repair_b,
    check_repair_c,
    check_repair_d,
    check_repair_e,
)
from helpers.audit_and_repair.loops_to_repair import CALLS, LOOPS, REPAIRED
from helpers.audit_and_repair.repair_trace import record_steps, trace
from helpers.models import make_mlp
from helpers.pitfalls.buggy_loops import accumulate_dropping_tail
from helpers.pitfalls.checkers_05 import check_clipped_norm
from helpers.spies import ClipSpy

CHECKS = {
    "A": check_repair_a,
    "B": check_repair_b,
    "D": check_repair_d,
    "C": check_repair_c,
    "E": check_repair_e,
}

# ------------------------------------------------------------------ loop A: correct


def a_detach(model, optimizer, batches):
    running_loss = 0.0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss.detach()
    return running_loss / len(batches)


def a_float_and_zero_after_step(model, optimizer, batches):
    losses = []
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        model.zero_grad(set_to_none=False)
        losses.append(float(loss))
    return sum(losses) / len(losses)


def a_no_grad_sum(model, optimizer, batches):
    running_loss = 0.0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            running_loss = running_loss + loss
    return running_loss.item() / len(batches)


# ------------------------------------------------------------------ loop A: wrong


def a_plus_equals_spelled_out(model, optimizer, batches):
    running_loss = 0.0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss = running_loss + loss
    return running_loss.item() / len(batches)


def a_list_of_losses(model, optimizer, batches):
    losses = []
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss)
    return torch.stack(losses).mean().item()


def a_returns_the_sum(model, optimizer, batches):
    running_loss = 0.0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    return running_loss


def a_dropped_zero_grad(model, optimizer, batches):
    running_loss = 0.0
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    return running_loss / len(batches)


def a_item_before_backward(model, optimizer, batches):
    running_loss = 0.0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets).item()
        loss.backward()
        optimizer.step()
        running_loss += loss
    return running_loss / len(batches)


def a_overwrites_the_total(model, optimizer, batches):
    running_loss = 0.0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss = loss.item()
    return running_loss / len(batches)


def a_returns_the_last_loss(model, optimizer, batches):
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
    return loss.item()


def a_floor_division(model, optimizer, batches):
    running_loss = 0.0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    return running_loss // len(batches)


def a_statistics_mean(model, optimizer, batches):  # correct: a numpy float is a number
    losses = []
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return np.mean(losses)


# ------------------------------------------------------------------ loop B: correct


def b_by_index(model, optimizer, batches, scheduler, k=4):
    optimizer.zero_grad()
    for i, (inputs, targets) in enumerate(batches):
        window_start = i - i % k
        size = min(k, len(batches) - window_start)
        (F.mse_loss(model(inputs), targets) / size).backward()
        if (i + 1) % k == 0 or i + 1 == len(batches):
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


def b_slices_zeros(model, optimizer, batches, sched):
    for start in range(0, len(batches), 4):
        window = batches[start : start + 4]
        model.zero_grad(set_to_none=False)
        for inputs, targets in window:
            loss = F.mse_loss(model(inputs), targets)
            (loss / len(window)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        sched.step()


# ------------------------------------------------------------------ loop B: wrong


def b_only_scheduler_moved(model, optimizer, batches, scheduler, k=4):
    optimizer.zero_grad()
    for i, (inputs, targets) in enumerate(batches):
        (F.mse_loss(model(inputs), targets) / k).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        if (i + 1) % k == 0:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    if len(batches) % k:
        optimizer.step()
        scheduler.step()


def b_tail_dropped(model, optimizer, batches, scheduler, k=4):
    optimizer.zero_grad()
    for i, (inputs, targets) in enumerate(batches):
        (F.mse_loss(model(inputs), targets) / k).backward()
        if (i + 1) % k == 0:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


def b_tail_divided_by_k(model, optimizer, batches, scheduler, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / k).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        optimizer.step()
        scheduler.step()


def b_scheduler_first(model, optimizer, batches, scheduler, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        scheduler.step()
        optimizer.step()


def b_one_backward_per_window(model, optimizer, batches, scheduler, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        losses = [F.mse_loss(model(inputs), targets) for inputs, targets in window]
        (sum(losses) / len(window)).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        optimizer.step()
        scheduler.step()


def b_int_max_norm_via_clip_grad(model, optimizer, batches, scheduler, k=4):  # correct
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        torch.nn.utils.clip_grad.clip_grad_norm_(model.parameters(), 5)
        optimizer.step()
        scheduler.step()


def b_not_divided(model, optimizer, batches, scheduler, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            F.mse_loss(model(inputs), targets).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        optimizer.step()
        scheduler.step()


def b_max_norm_1(model, optimizer, batches, scheduler, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        scheduler.step()


def b_clip_after_step(model, optimizer, batches, scheduler, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        optimizer.step()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        scheduler.step()


def b_no_clip(model, optimizer, batches, scheduler, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        optimizer.step()
        scheduler.step()


def b_scheduler_per_epoch(model, optimizer, batches, scheduler, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        optimizer.step()
    scheduler.step()


# ------------------------------------------------------------------ loop D: correct


def d_reset_in_place(model, optimizer, batches):
    model[-1].reset_parameters()  # a fresh head, the same parameters
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def d_add_group_with_settings(model, optimizer, batches):
    head = nn.Linear(16, 1)
    model[-1] = head
    optimizer.add_param_group({"params": [head.weight, head.bias], "lr": 0.01})
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        model.zero_grad()
        loss.backward()
        optimizer.step()


def d_copy_into_old_head(model, optimizer, batches):
    fresh = nn.Linear(16, 1)
    with torch.no_grad():
        model[-1].weight.copy_(fresh.weight)
        model[-1].bias.copy_(fresh.bias)
    for inputs, targets in batches:
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


# ------------------------------------------------------------------ loop D: wrong


def d_rebuilt_optimizer(model, optimizer, batches):
    model[-1] = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def d_only_the_weight(model, optimizer, batches):
    model[-1] = nn.Linear(16, 1)
    optimizer.add_param_group({"params": [model[-1].weight]})
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def d_head_lr(model, optimizer, batches):
    model[-1] = nn.Linear(16, 1)
    optimizer.add_param_group({"params": model[-1].parameters(), "lr": 0.1})
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def d_frozen_head(model, optimizer, batches):
    model[-1] = nn.Linear(16, 1)
    model[-1].requires_grad_(False)
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def d_group_before_the_new_head(model, optimizer, batches):
    optimizer.add_param_group({"params": model[-1].parameters()})
    model[-1] = nn.Linear(16, 1)
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def d_frozen_trunk(model, optimizer, batches):
    model[-1] = nn.Linear(16, 1)
    for p in model[:-1].parameters():
        p.requires_grad_(False)
    optimizer.add_param_group({"params": model[-1].parameters()})
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def d_head_in_every_iteration(model, optimizer, batches):
    for inputs, targets in batches:
        model[-1] = nn.Linear(16, 1)
        optimizer.add_param_group({"params": model[-1].parameters()})
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def d_head_without_bias(model, optimizer, batches):
    model[-1] = nn.Linear(16, 1, bias=False)
    optimizer.add_param_group({"params": model[-1].parameters()})
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def d_head_in_a_sequential(model, optimizer, batches):
    model[-1] = nn.Sequential(nn.Linear(16, 1))
    optimizer.add_param_group({"params": model[-1].parameters()})
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def d_head_appended(model, optimizer, batches):
    model.append(nn.Linear(1, 1))
    optimizer.add_param_group({"params": model[-1].parameters()})
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def d_wider_head(model, optimizer, batches):
    model[-1] = nn.Linear(16, 2)
    optimizer.add_param_group({"params": model[-1].parameters()})
    for inputs, targets in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs).mean(1, keepdim=True), targets).backward()
        optimizer.step()


def d_appended_and_own_optimizer(model, optimizer, batches):
    model.append(nn.Linear(1, 1))
    own = torch.optim.SGD(model.parameters(), lr=0.01)
    for inputs, targets in batches:
        own.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        own.step()


# ------------------------------------------------------------------ loop C: correct


def c_by_index(model, optimizer, batches, k=4):
    optimizer.zero_grad()
    tail = len(batches) % k
    for i, (inputs, targets) in enumerate(batches):
        in_tail = tail and i >= len(batches) - tail
        loss = F.mse_loss(model(inputs), targets) / (tail if in_tail else k)
        loss.backward()
        if (i + 1) % k == 0 or i + 1 == len(batches):
            optimizer.step()
            optimizer.zero_grad()


def c_slices(model, optimizer, batches, k=4):
    for start in range(0, len(batches), k):
        window = batches[start : start + k]
        for inputs, targets in window:
            loss = F.mse_loss(model(inputs), targets)
            loss.div(len(window)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)


# ------------------------------------------------------------------ loop C: wrong


def c_windows_divided_by_k(model, optimizer, batches, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / k).backward()
        optimizer.step()


def b_scheduler_moved_only(model, optimizer, batches, scheduler, k=4):
    optimizer.zero_grad()
    for i, (inputs, targets) in enumerate(batches):
        loss = F.mse_loss(model(inputs), targets) / k
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        if (i + 1) % k == 0:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


def c_not_divided(model, optimizer, batches, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def c_tail_not_divided(model, optimizer, batches, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            loss = F.mse_loss(model(inputs), targets)
            (loss / k if len(window) == k else loss).backward()
        optimizer.step()


def c_all_by_the_tail(model, optimizer, batches, k=4):
    tail = len(batches) % k
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / tail).backward()
        optimizer.step()


c_tail_dropped = accumulate_dropping_tail  # notebook 05's loop, as a learner might keep it


def c_in_float64(model, optimizer, batches, k=4):
    model.double()
    for window in windows(batches, k):
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs.double()), targets.double()) / len(window)).backward()
        optimizer.step()


# ------------------------------------------------------------------ loop E: correct


def e_zero_after_step(model, optimizer, batches, scaler):
    for inputs, targets in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            output = model(inputs)
        loss = F.mse_loss(output.float(), targets)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=False)


def e_model_zero_grad(model, optimizer, batches, grad_scaler):
    for inputs, targets in batches:
        model.zero_grad()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets)
        grad_scaler.scale(loss).backward()
        grad_scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1)
        grad_scaler.step(optimizer)
        grad_scaler.update()


# ------------------------------------------------------------------ loop E: wrong


def e_no_unscale(model, optimizer, batches, scaler):
    for inputs, targets in batches:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets)
        scaler.scale(loss).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)
        scaler.update()


def e_clip_after_step(model, optimizer, batches, scaler):
    for inputs, targets in batches:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.update()


def e_unscaled_backward(model, optimizer, batches, scaler):
    for inputs, targets in batches:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets)
        loss.backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)
        scaler.update()


def e_unscale_twice(model, optimizer, batches, scaler):
    for inputs, targets in batches:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()


def e_optimizer_step(model, optimizer, batches, scaler):
    for inputs, targets in batches:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        scaler.update()


def e_optimizer_step_without_unscale(model, optimizer, batches, scaler):
    for inputs, targets in batches:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets)
        scaler.scale(loss).backward()
        optimizer.step()
        scaler.update()


def e_no_clip(model, optimizer, batches, scaler):
    for inputs, targets in batches:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()


def e_scaler_unused(model, optimizer, batches, scaler):
    for inputs, targets in batches:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()


CORRECT = {
    "A": [a_detach, a_float_and_zero_after_step, a_no_grad_sum, a_statistics_mean],
    "B": [b_by_index, b_slices_zeros, b_int_max_norm_via_clip_grad],
    "D": [d_reset_in_place, d_add_group_with_settings, d_copy_into_old_head],
    "C": [c_by_index, c_slices],
    "E": [e_zero_after_step, e_model_zero_grad],
}

WRONG = [
    ("A", a_plus_equals_spelled_out, "graph-kept-alive: a loss tensor outlives"),
    ("A", a_list_of_losses, "or a list of losses"),
    ("A", a_returns_the_sum, "the sum of the losses"),
    ("A", a_dropped_zero_grad, "missing-zero-grad"),
    ("A", a_item_before_backward, "raised AttributeError"),
    ("B", b_only_scheduler_moved, "clip-per-micro-batch: clip_grad_norm_ still runs"),
    ("B", b_tail_dropped, "the last 2 of the 10 micro-batches"),
    ("B", b_tail_divided_by_k, "divided by its real length, 2, not by k=4"),
    ("A", a_overwrites_the_total, "the last batch's loss divided by 10"),
    ("A", a_returns_the_last_loss, "the last batch's loss, not the mean of all 10"),
    ("A", a_floor_division, "// is floor division"),
    ("B", b_scheduler_first, "stepped before the optimizer"),
    ("B", b_not_divided, "its losses are not divided at all"),
    ("B", b_max_norm_1, "max_norm=1 where loop B clips at max_norm=5"),
    ("B", b_clip_after_step, "clip_grad_norm_ ran, but only after optimizer.step()"),
    ("B", b_no_clip, "nothing clipped it, no clip_grad_norm_ ran"),
    ("B", b_scheduler_per_epoch, "stepped once (as if once per epoch) in 3 optimizer steps"),
    ("B", b_one_backward_per_window, "one backward() per micro-batch"),
    ("D", d_rebuilt_optimizer, "trained another optimizer, built inside it"),
    ("D", d_only_the_weight, "2.bias"),
    ("D", d_head_lr, "add_param_group fills them in"),
    ("D", d_frozen_head, "2.weight, 2.bias had no gradient"),
    ("D", d_group_before_the_new_head, "more than one parameter group"),
    ("D", d_frozen_trunk, "0.weight, 0.bias had no gradient: requires_grad_(False) froze"),
    ("D", d_head_in_every_iteration, "the head is replaced in every iteration"),
    ("D", d_head_without_bias, "parameters differ from the correct loop's: yours lacks 2.bias"),
    ("D", d_head_in_a_sequential, "yours has 2.0.weight, 2.0.bias"),
    ("D", d_head_appended, "yours has 3.weight, 3.bias"),
    ("D", d_wider_head, "2.weight has shape [2, 16], not [1, 16]"),
    ("D", d_appended_and_own_optimizer, "trained another optimizer"),
    ("C", c_windows_divided_by_k, "divided by k=4, not by its real length 2"),
    ("B", b_scheduler_moved_only, "clip-per-micro-batch: clip_grad_norm_ still runs after"),
    ("B", b_scheduler_moved_only, "leftover-gradients: the last 2 of the 10 micro-batches"),
    ("C", c_not_divided, "not divided at all"),
    ("C", c_tail_not_divided, "not divided at all"),
    ("C", c_all_by_the_tail, "divided by 2 instead of 4"),
    ("C", c_tail_dropped, "leftover-gradients"),
    ("C", c_in_float64, "Keep the model's dtype, float32"),
    ("E", e_no_unscale, "unscale-after-clip"),
    ("E", e_clip_after_step, "clip_grad_norm_ ran, but only after scaler.step(optimizer)"),
    ("E", e_unscaled_backward, "raised AssertionError: Attempted unscale_"),
    ("E", e_unscale_twice, "ran twice before one update()"),
    ("E", e_optimizer_step, "optimizer.step() was called instead of scaler.step(optimizer)"),
    ("E", e_optimizer_step_without_unscale, "instead of scaler.step(optimizer)"),
    ("E", e_no_clip, "nothing clipped it"),
    ("E", e_scaler_unused, "never called scaler.scale(loss)"),
]

# What an earlier version of the checker blamed these mistakes on: never again.
MISDIAGNOSED = [
    ("A", a_overwrites_the_total, "; the epoch's mean loss is"),
    ("B", b_not_divided, "divided by 3.01"),
    ("B", b_max_norm_1, "divided by 15.1"),
    ("B", b_clip_after_step, "divided by its real length"),
    ("B", b_no_clip, "divided by its real length"),
    ("B", b_scheduler_per_epoch, "stepped before the optimizer"),
    ("D", d_frozen_trunk, "step-without-grad"),
    ("D", d_head_in_every_iteration, "does anything else change the weights"),
    ("E", e_optimizer_step, "Correct"),
]


@pytest.mark.parametrize("name", sorted(REPAIRED))
def test_the_reference_repair_passes(name, strict_checks):
    assert CHECKS[name](REPAIRED[name]).passed


@pytest.mark.parametrize(
    ("name", "loop"),
    [(name, loop) for name, loops in CORRECT.items() for loop in loops],
    ids=lambda value: getattr(value, "__name__", value),
)
def test_correct_repairs_written_differently_pass(name, loop, strict_checks):
    result = CHECKS[name](loop)
    assert result.passed, result.message


@pytest.mark.parametrize(
    ("name", "loop", "hint"), WRONG, ids=[loop.__name__ for _, loop, _ in WRONG]
)
def test_wrong_repairs_get_a_hint_that_names_the_mistake(name, loop, hint):
    result = CHECKS[name](loop)
    assert not result.passed and hint in result.message, result.message
    assert "Traceback" not in result.message


@pytest.mark.parametrize(
    ("name", "loop", "blame"), MISDIAGNOSED, ids=[loop.__name__ for _, loop, _ in MISDIAGNOSED]
)
def test_a_mistake_is_not_blamed_on_another(name, loop, blame):
    result = CHECKS[name](loop)
    assert not result.passed and blame not in result.message, result.message


def test_the_five_loop_b_mistakes_get_five_different_hints():
    loops = [b_not_divided, b_max_norm_1, b_clip_after_step, b_no_clip, b_scheduler_per_epoch]
    messages = {check_repair_b(loop).message for loop in loops}
    assert len(messages) == len(loops)


def test_a_check_that_cannot_follow_the_loop_says_so_without_a_traceback(monkeypatch):
    def broken(*args):
        raise IndexError("internal")

    monkeypatch.setattr(checkers_06, "_difference", broken)
    result = check_repair_d(d_reset_in_place)
    assert not result.passed and "could not follow your loop" in result.message


def test_the_trace_records_clips_scheduler_steps_and_scaler_calls():
    b = trace("B", b_max_norm_1)
    assert [call["max_norm"] for call in b.clips] == [1.0, 1.0, 1.0]
    assert b.scheduler_steps == 3 and trace("B", b_scheduler_per_epoch).scheduler_steps == 1
    e = trace("E", e_optimizer_step)
    assert e.scaler_calls[:4] == ["scale", "unscale_", "optimizer.step", "update"]
    assert "optimizer.step" not in trace("E", REPAIRED["E"]).scaler_calls
    assert len(trace("D", d_head_in_every_iteration).params) == 10


def test_the_clip_spy_puts_clip_grad_norm_back():
    before = (torch.nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad.clip_grad_norm_)
    with ClipSpy() as spy:
        torch.nn.utils.clip_grad_norm_([torch.ones(2, requires_grad=True)], 3, norm_type=1)
    assert spy.calls == [{"max_norm": 3, "norm_type": 1}]
    assert (torch.nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad.clip_grad_norm_) == before


def test_every_exercise_has_three_wrong_repairs_and_two_correct_ones():
    for name in LOOPS:
        assert len([w for w in WRONG if w[0] == name]) >= 3
        assert len(CORRECT[name]) >= 2


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_the_untouched_buggy_loop_is_rejected(name):
    result = CHECKS[name](LOOPS[name])
    assert not result.passed
    assert result.message.startswith(f"This is loop {name} as given:")


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_the_untouched_loop_names_no_rule_and_no_fix(name):
    """Finding the bugs is the exercise: the loop as given gets how many problems the
    auditor finds and how to see its report, never which rules or their fixes."""
    message = CHECKS[name](LOOPS[name]).message
    assert not any(code in message for code in checkers_06.CODES), message
    assert not any(fix in message for fix in checkers_06.FIXES.values())
    assert "divided" not in message and "add_param_group" not in message


def test_the_untouched_loops_say_how_many_problems_to_find():
    expected = {"A": "1 problem", "B": "3 problems", "D": "1 problem", "E": "1 problem"}
    for name, count in expected.items():
        message = CHECKS[name](LOOPS[name]).message
        assert f"the auditor finds {count} in it" in message
        assert f"audit_loop({LOOPS[name].__name__})" in message
    message = CHECKS["C"](LOOPS["C"]).message
    assert "the auditor finds nothing in it, yet step 3 used a gradient" in message


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_audit_loop_reports_what_the_checker_saw(name):
    auditor = checkers_06.audit_loop(LOOPS[name])
    assert auditor.codes == trace(name, LOOPS[name]).run.codes
    assert checkers_06.audit_loop(REPAIRED[name], name.lower()).codes in ([], ["window-length"])


@pytest.mark.parametrize("args", [(3,), (c_not_divided,), (c_not_divided, "F")])
def test_audit_loop_refuses_what_it_cannot_run(args):
    with pytest.raises((TypeError, ValueError)):
        checkers_06.audit_loop(*args)


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_a_copy_of_the_buggy_loop_is_recognized(name):
    source = textwrap.dedent(inspect.getsource(LOOPS[name]))
    source = "# loop to repair\n" + source.replace("):\n", "):  # repair it here\n", 1)
    filename = f"<notebook cell {name}>"  # IPython keeps cells' sources in linecache
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"F": F, "nn": nn, "torch": torch}
    exec(compile(source, filename, "exec"), namespace)
    copy = namespace[LOOPS[name].__name__]
    assert CHECKS[name](copy).message.startswith(f"This is loop {name} as given:")
    assert not CHECKS[name](REPAIRED[name]).message.startswith("This is loop")


def loop_with_no_parameters():
    pass


def loop_with_two(model, optimizer):
    pass


@pytest.mark.parametrize("name", sorted(LOOPS))
@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (..., "Not answered yet"),
        (None, "pass your function itself"),
        ("loop_a", "not a string"),
        (3, "pass your function itself"),
        (loop_with_no_parameters, "give it"),
        (loop_with_two, "give it"),
    ],
    ids=["unanswered", "None", "string", "number", "no-parameters", "two-parameters"],
)
def test_a_wrong_kind_of_answer_says_what_is_expected(name, answer, expected):
    result = CHECKS[name](answer)
    assert not result.passed and expected in result.message, result.message


def test_the_expected_call_is_named_in_the_message():
    for name, call in CALLS.items():
        assert call in CHECKS[name](loop_with_two).message


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_a_loop_that_raises_gets_its_exception_not_a_traceback(name):
    def raising(*args):
        raise KeyError("oops")

    result = CHECKS[name](raising)
    assert not result.passed and "your function raised KeyError" in result.message


def test_a_def_line_without_the_scheduler_is_named_not_a_typeerror_from_steplr():
    result = check_repair_b(c_tail_dropped)  # (model, optimizer, batches, k=4): it lands in k
    assert not result.passed
    assert result.message.endswith(
        "your def line takes (model, optimizer, batches, k=4), without the scheduler: the "
        "check passes the scheduler fourth, so it lands in k. Keep the def line as given, "
        "loop_b(model, optimizer, micro_batches, scheduler, accumulation_steps=4)."
    )
    assert "TypeError" not in result.message


def test_an_empty_loop_trained_nothing():
    result = check_repair_a(lambda model, optimizer, batches: None)
    assert not result.passed and "No optimizer.step() ran" in result.message


def test_strict_mode_raises_with_the_hint(strict_checks):
    with pytest.raises(AssertionError, match="the auditor finds 1 problem"):
        check_repair_a(LOOPS["A"])


def test_check_repair_refuses_an_unknown_loop():
    with pytest.raises(ValueError, match="one of A, B, C, D, E"):
        check_repair("F", REPAIRED["A"])
    assert check_repair("a", REPAIRED["A"]).passed


def test_the_checker_runs_the_same_data_and_start_for_every_loop():
    one, two = trace("C", REPAIRED["C"]), trace("C", c_slices)
    assert [len(s) for s in (one.steps, two.steps)] == [3, 3]
    for name, (_, weight, settings) in one.steps[0].items():
        assert torch.equal(weight, two.steps[0][name][1]) and settings["lr"] == 0.01


def test_record_steps_keeps_what_each_step_used():
    model = make_mlp((2, 3, 1))
    optimizer = torch.optim.SGD(model[0].parameters(), lr=0.5)
    steps = record_steps(model, optimizer)
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    assert len(steps) == 1
    grad, weight, settings = steps[0]["0.weight"]
    assert settings["lr"] == 0.5 and steps[0]["2.weight"][2] is None
    assert torch.equal(weight - 0.5 * grad, model[0].weight.detach())


def test_the_buggy_loops_keep_their_findings():
    expected = {
        "A": ["graph-kept-alive"],
        "B": ["clip-per-micro-batch", "scheduler-per-micro-batch", "leftover-gradients"],
        "D": ["params-not-in-optimizer"],
        "C": [],
        "E": ["unscale-after-clip"],
    }
    for name, loop in LOOPS.items():
        assert sorted(trace(name, loop).run.codes) == sorted(expected[name]), name


# ------------------------------------------------------------------ the prediction


def clipped_norm(max_norm: float, k: int = 4) -> float:
    """What notebook 05's section 7 runs: clip after every one of k backward calls."""
    from helpers.data import make_teacher_batches

    model = make_mlp((8, 16, 1))
    for inputs, targets in make_teacher_batches()[:k]:
        (F.mse_loss(model(inputs), targets) / k).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()


def test_the_predicted_norm_is_what_clipping_every_micro_batch_gives(strict_checks):
    assert math.isclose(clipped_norm(0.5), check_clipped_norm.expected(), rel_tol=1e-5)
    assert check_clipped_norm(0.5).passed


@pytest.mark.parametrize("value", sorted(check_clipped_norm.misconceptions))
def test_each_misconception_gets_its_hint(value):
    result = second_try(check_clipped_norm, value)
    assert not result.passed and check_clipped_norm.misconceptions[value] in result.message


@pytest.mark.parametrize(
    "answer",
    [Fraction(1, 2), Decimal("0.5"), np.float32(0.5), np.array([0.5]), torch.tensor(0.5)],
    ids=["Fraction", "Decimal", "numpy", "array", "tensor"],
)
def test_the_prediction_accepts_any_real_number(answer):
    assert check_clipped_norm(answer).passed


@pytest.mark.parametrize("answer", [None, "0.5", [0.5, 0.5], ...])
def test_the_prediction_refuses_other_kinds(answer):
    result = check_clipped_norm(answer)
    assert not result.passed and result.message


# ------------------------------------------------------------------ the notebook


def exercise_cells(stem="06_loop_auditor"):
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    return [nb.cells[i].source for i in cells_tagged(nb, "exercise")]


def test_the_notebook_shows_each_buggy_loop_as_it_is_checked():
    functions = {
        node.name: ast.dump(node)
        for source in exercise_cells()
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef)
    }
    for loop in LOOPS.values():
        helper = ast.parse(textwrap.dedent(inspect.getsource(loop))).body[0]
        assert functions[loop.__name__] == ast.dump(helper), loop.__name__


# ------------------------------------------------------------------ loop C: one backward


def c_one_backward_of_the_mean(model, optimizer, batches, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        loss = sum(F.mse_loss(model(x), y) for x, y in window) / len(window)
        loss.backward()
        optimizer.step()


def c_one_backward_on_the_whole_window(model, optimizer, batches, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        inputs = torch.cat([x for x, _ in window])
        targets = torch.cat([y for _, y in window])
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def c_one_backward_divided_by_k(model, optimizer, batches, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        (sum(F.mse_loss(model(x), y) for x, y in window) / k).backward()
        optimizer.step()


def c_one_backward_of_the_sum(model, optimizer, batches, k=4):
    for window in windows(batches, k):
        optimizer.zero_grad()
        sum(F.mse_loss(model(x), y) for x, y in window).backward()
        optimizer.step()


@pytest.mark.parametrize(
    "loop",
    [c_one_backward_of_the_mean, c_one_backward_on_the_whole_window],
    ids=lambda f: f.__name__,
)
def test_loop_d_accepts_one_backward_of_the_windows_mean_loss_with_its_cost(loop, strict_checks):
    result = check_repair_c(loop)
    assert result.passed, result.message
    assert "every micro-batch's graph in memory" in result.message
    assert "not accumulation" in result.message


@pytest.mark.parametrize(
    ("loop", "hint"),
    [
        (c_one_backward_divided_by_k, "divided by k=4, not by its real length 2"),
        (c_one_backward_of_the_sum, "not divided at all"),
    ],
    ids=["divided_by_k", "sum"],
)
def test_loop_d_with_one_backward_still_names_a_wrong_division(loop, hint):
    result = check_repair_c(loop)
    assert not result.passed and hint in result.message, result.message
    assert "One backward() per window" in result.message


def test_one_backward_is_accepted_for_loop_d_only():
    def b_one_backward(model, optimizer, batches, scheduler, k=4):
        for window in windows(batches, k):
            optimizer.zero_grad()
            (sum(F.mse_loss(model(x), y) for x, y in window) / len(window)).backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
            optimizer.step()
            scheduler.step()

    result = check_repair_b(b_one_backward)
    assert not result.passed and "window-length" in result.message


def test_loop_a_passed_with_a_detached_tensor_is_not_called_a_number():
    result = check_repair_a(a_detach)
    assert result.passed
    assert "a number, not a tensor" not in result.message
    assert "without keeping any iteration's graph" in result.message
