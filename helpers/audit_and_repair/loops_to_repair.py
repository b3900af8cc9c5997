"""Notebook 06's five training loops to repair (A to E; A, B and C on its main path) and the
correct loop for each, with what the repair checkers (:mod:`helpers.audit_and_repair.checkers_06`)
need to run and judge them: how each is called, the windows its steps use, the max_norm it clips
at, and what :func:`helpers.loop_runs.audited_run` gets for it."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from helpers.accumulation import windows

# ---------------------------------------------------------------- the loops to repair


def loop_a(model, optimizer, batches):
    running_loss = 0.0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss
    return running_loss / len(batches)


def loop_b(model, optimizer, micro_batches, scheduler, accumulation_steps=4):
    optimizer.zero_grad()
    for i, (inputs, targets) in enumerate(micro_batches):
        loss = F.mse_loss(model(inputs), targets) / accumulation_steps
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
        scheduler.step()


def loop_c(model, optimizer, micro_batches, accumulation_steps=4):
    optimizer.zero_grad()
    for i, (inputs, targets) in enumerate(micro_batches):
        loss = F.mse_loss(model(inputs), targets) / accumulation_steps
        loss.backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    if len(micro_batches) % accumulation_steps != 0:  # the last, short window
        optimizer.step()
        optimizer.zero_grad()


def loop_d(model, optimizer, batches):
    model[-1] = nn.Linear(16, 1)  # a fresh head for the new task
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def loop_e(model, optimizer, batches, scaler):
    for inputs, targets in batches:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets)
        scaler.scale(loss).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()


# ---------------------------------------------------------------- the correct loops


def repaired_a(model, optimizer, batches):
    running_loss = 0.0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    return running_loss / len(batches)


def repaired_b(model, optimizer, micro_batches, scheduler, accumulation_steps=4):
    for window in windows(micro_batches, accumulation_steps):
        optimizer.zero_grad()
        for inputs, targets in window:
            loss = F.mse_loss(model(inputs), targets) / len(window)
            loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        optimizer.step()
        scheduler.step()


def repaired_c(model, optimizer, micro_batches, accumulation_steps=4):
    for window in windows(micro_batches, accumulation_steps):
        optimizer.zero_grad()
        for inputs, targets in window:
            loss = F.mse_loss(model(inputs), targets) / len(window)
            loss.backward()
        optimizer.step()


def repaired_d(model, optimizer, batches):
    model[-1] = nn.Linear(16, 1)
    optimizer.add_param_group({"params": model[-1].parameters()})
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def repaired_e(model, optimizer, batches, scaler):
    for inputs, targets in batches:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(inputs).float(), targets)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)
        scaler.update()


LOOPS = {"A": loop_a, "B": loop_b, "C": loop_c, "D": loop_d, "E": loop_e}
REPAIRED = {"A": repaired_a, "B": repaired_b, "C": repaired_c, "D": repaired_d, "E": repaired_e}
CALLS = {
    "A": "loop_a(model, optimizer, batches)",
    "B": "loop_b(model, optimizer, micro_batches, scheduler)",
    "C": "loop_c(model, optimizer, micro_batches)",
    "D": "loop_d(model, optimizer, batches)",
    "E": "loop_e(model, optimizer, batches, scaler)",
}
N_BATCHES, K = 10, 4
WINDOWS = {  # the backward passes each step of the correct loop uses
    "A": [1] * N_BATCHES,
    "B": [4, 4, 2],
    "C": [4, 4, 2],
    "D": [1] * N_BATCHES,
    "E": [1] * N_BATCHES,
}
MAX_NORM = {"B": 5.0, "E": 1.0}


def loop_options(name: str) -> dict:
    """What audited_run gets for loop ``name``: fresh each run (a scheduler and a scaler
    keep state)."""
    if name == "B":
        return {
            "accumulation_steps": K,
            "make_scheduler": lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, 0.9),
        }
    if name == "C":
        return {"accumulation_steps": K}
    if name == "E":
        return {"scaler": torch.amp.GradScaler("cpu", init_scale=2.0**10)}
    return {}
