"""The capstone's stages 1 to 3 (helpers.capstone.stages), run in the test's process: each
stage's reference, the check's verdicts on the right loop of each stage, however written,
and on the mistakes a learner makes at that stage, each named; a stage that does not exist
is a ❌, not an error."""

import contextlib

import pytest
import torch
from answers import second_try
from torch import nn
from torch.nn import functional as F

from helpers.capstone import capstone_run, stages
from helpers.capstone.checkers_09 import check_capstone


def window_loop(
    weight="tokens", amp=False, clip=True, scheduler_each=False, last=True, clip_each=False
):
    """A capstone loop for one process: each micro-batch's loss weighted as ``weight`` says,
    with autocast and the scaler when ``amp``."""

    def train_ddp(model, optimizer, scheduler, scaler, micro_batches, accumulation_steps):
        starts = list(range(0, len(micro_batches), accumulation_steps))
        if not last and len(micro_batches) % accumulation_steps:
            starts = starts[:-1]
        for start in starts:
            window = micro_batches[start : start + accumulation_steps]
            tokens = sum((t != -100).sum() for _, t in window)
            optimizer.zero_grad()
            for inputs, targets in window:
                autocast = torch.autocast("cpu", dtype=torch.bfloat16)
                with autocast if amp else contextlib.nullcontext():
                    summed = F.cross_entropy(model(inputs), targets, reduction="sum")
                mean = summed / (targets != -100).sum()
                loss = {
                    "tokens": summed / tokens,
                    "window": mean / len(window),
                    "k": mean / accumulation_steps,
                }[weight]
                (scaler.scale(loss) if amp else loss).backward()
                if clip_each:
                    nn.utils.clip_grad_norm_(model.parameters(), capstone_run.MAX_NORM)
                if scheduler_each:
                    scheduler.step()
            if amp:
                scaler.unscale_(optimizer)
            if clip and not clip_each:
                nn.utils.clip_grad_norm_(model.parameters(), capstone_run.MAX_NORM)
            if amp:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            if not scheduler_each:
                scheduler.step()

    return train_ddp


@pytest.mark.parametrize(
    ("stage", "train_ddp"),
    [
        (1, window_loop()),
        (1, window_loop("window")),  # equal micro-batches, no padding: the same mean
        (1, window_loop("k")),
        (2, window_loop()),
        (3, window_loop(amp=True)),
    ],
)
def test_each_stage_accepts_its_right_loop_however_written(stage, train_ddp):
    result = check_capstone(train_ddp, stage=stage)
    assert result.passed, result.message


@pytest.mark.parametrize(
    ("stage", "train_ddp", "hint"),
    [
        (1, window_loop(clip=False), "clipped at the wrong norm, or not at all"),
        (1, window_loop(scheduler_each=True), "scheduler"),
        (2, window_loop("window"), "divided by the number of micro-batches in the window"),
        (2, window_loop("k"), "divided by accumulation_steps"),
        (2, window_loop(last=False), "the short last one included? It stepped 3 times"),
        (3, window_loop(), "go through the scaler"),
    ],
)
def test_each_stage_names_its_mistakes(stage, train_ddp, hint):
    first = check_capstone(train_ddp, stage=stage)
    question = first.message.split("?")[0]
    assert not first.passed and "Answer again" in first.message, first.message
    result = check_capstone(train_ddp, stage=stage)  # the second try: the whole hint
    assert result.message.startswith(question)
    assert not result.passed and hint in result.message, result.message


def test_clipping_per_micro_batch_before_the_scaler_stage_names_no_scaler():
    result = second_try(check_capstone, window_loop(clip_each=True), stage=1)
    assert not result.passed and "Clip once, after the window's last backward()" in result.message
    assert "scaler" not in result.message, result.message


def test_the_stages_grow_harder():
    """Stage 1's loop that divides by the window's length fails stage 2, and stage 2's loop
    without the scaler fails stage 3: each stage adds what the one before did not test."""
    assert check_capstone(window_loop("window"), stage=1).passed
    assert not check_capstone(window_loop("window"), stage=2).passed
    assert check_capstone(window_loop(), stage=2).passed
    assert not check_capstone(window_loop(), stage=3).passed


def test_the_stage_references_skip_the_overflow_only_with_amp():
    windows = [len(capstone_run.window_slices(len(stages.stage_data(s)))) for s in stages.STAGES]
    assert windows == [3, 4, 4]
    for stage, steps in zip(stages.STAGES, [3, 4, 3], strict=True):  # stage 3 skips one
        assert len(stages.reference(stage)["lrs"]) == steps
    assert (
        stages.reference(3)["scale"] == capstone_run.make_tools(nn.Linear(1, 1))[2].get_scale() / 2
    )


@pytest.mark.parametrize("stage", [0, 5, "1", True])
def test_a_stage_that_does_not_exist_is_a_cross(stage):
    result = check_capstone(window_loop(), stage=stage)
    assert not result.passed and "stage must be 1, 2, 3 or 4" in result.message


@pytest.mark.parametrize("answer", [..., None, print])
def test_a_stage_given_no_function_answers_with_a_message(answer):
    assert not check_capstone(answer, stage=1).passed


def test_bad_input_to_the_stage_helpers_is_refused():
    with pytest.raises(ValueError, match="stage must be"):
        stages.stage_data(4)
    with pytest.raises(ValueError, match="variant must be one of"):
        stages.reference(1, "loss in bfloat16")
