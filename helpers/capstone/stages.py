"""The capstone's first three stages, each run in this process on one rank's data: (1) one
process without AMP, on whole micro-batches of equal size; (2) then padded tokens of uneven
sizes and a short last window; (3) then bfloat16 autocast and a GradScaler, with one
micro-batch that overflows. Stage 4, two DDP ranks, is :func:`helpers.capstone.checkers_09.
check_capstone`. Each stage runs the learner's ``train_ddp(model, optimizer, scheduler,
scaler, micro_batches, accumulation_steps)`` and the same loop done right (:func:`reference`),
from the same model and tools."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from helpers.capstone.capstone_run import (
    MAX_NORM,
    OVERFLOW,
    VOCAB,
    K,
    add_overflow,
    capstone_data,
    make_model,
    make_tools,
    token_count,
    window_slices,
)
from helpers.models import flat_weights
from helpers.spies import ClipSpy, ScalerSpy
from helpers.training_stacks.stacks import PAD
from helpers.translation import _

STAGES = (1, 2, 3)  # stage 4 runs on two DDP ranks


def stage_data(stage: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The micro-batches ``(tokens, targets)`` of ``stage``: for stage 1, 9 micro-batches of 2
    sequences of 6 tokens and no padding (windows of 3, 3 and 3); for stages 2 and 3, rank 0's
    10 capstone micro-batches, padded and of uneven sizes (windows of 3, 3, 3 and 1)."""
    check_stage(stage)
    if stage == 1:
        generator = torch.Generator().manual_seed(7)
        return [
            (
                torch.randint(0, VOCAB, (2, 6), generator=generator),
                torch.randint(0, VOCAB, (2, 6), generator=generator),
            )
            for _ in range(3 * K)
        ]
    return capstone_data(0)


def check_stage(stage: object) -> None:
    if not isinstance(stage, int) or isinstance(stage, bool) or stage not in STAGES:
        raise ValueError(_("stage must be 1, 2, 3 or 4, got {stage!r}").format(stage=stage))


def stage_tools(stage: int, model: nn.Module):
    """The capstone's optimizer, scheduler and scaler; before stage 3 the scaler is disabled
    (``scale`` returns the loss as it is, ``step`` is ``optimizer.step``), so a loop that does
    not use it yet is right."""
    optimizer, scheduler, scaler = make_tools(model)
    if stage < 3:
        scaler = torch.amp.GradScaler("cpu", enabled=False)
    return optimizer, scheduler, scaler


def _stage_run(stage: int):
    """What a stage's run starts from, the reference's and the learner's alike: the data, a
    fresh model and its tools, the overflow hook of stage 3 (else None), and the list the
    learning rate of each step taken goes into."""
    data = stage_data(stage)
    model = make_model()
    optimizer, scheduler, scaler = stage_tools(stage, model)
    handle = add_overflow(model, data[OVERFLOW[1]][0]) if stage == 3 else None
    lrs: list[float] = []
    optimizer.register_step_pre_hook(lambda o, *_: lrs.append(o.param_groups[0]["lr"]))
    return data, model, optimizer, scheduler, scaler, handle, lrs


def _stage_outcome(data, model: nn.Module, scaler, lrs: list[float]) -> dict:
    return {
        "weights": flat_weights(model),
        "lrs": lrs,
        "scale": scaler.get_scale(),
        "windows": len(window_slices(len(data))),
    }


# The mistakes a stage's reference can make, as in capstone_run.VARIANTS.
STAGE_VARIANTS = {
    1: ("correct", "no clip"),
    2: (
        "correct",
        "micro-batch mean / window",
        "micro-batch mean / k",
        "no last window",
        "no clip",
    ),
    3: (
        "correct",
        "micro-batch mean / window",
        "micro-batch mean / k",
        "no last window",
        "loss in bfloat16",
        "no clip",
    ),
}


def reference(stage: int, variant: str = "correct") -> dict:
    """The stage's loop done right (or with one mistake, ``variant``, of
    :data:`STAGE_VARIANTS`): the final ``weights``, the ``lrs`` of the steps taken, the
    ``scale`` at the end and the number of ``windows``."""
    check_stage(stage)
    if variant not in STAGE_VARIANTS[stage]:
        raise ValueError(
            _("variant must be one of {variants}, got {variant!r}").format(
                variants=", ".join(STAGE_VARIANTS[stage]), variant=variant
            )
        )
    data, model, optimizer, scheduler, scaler, handle, lrs = _stage_run(stage)
    slices = window_slices(len(data))
    if variant == "no last window" and len(slices[-1]) < K:
        slices = slices[:-1]
    for window in slices:
        count = sum(token_count(data[i][1]) for i in window)
        optimizer.zero_grad()
        for i in window:
            tokens, targets = data[i]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=stage == 3):
                logits = model(tokens)
            scores = logits if variant == "loss in bfloat16" else logits.float()
            summed = F.cross_entropy(scores, targets, ignore_index=PAD, reduction="sum")
            mean = summed / max(token_count(targets), 1)
            if variant == "micro-batch mean / window":
                loss = mean / len(window)
            elif variant == "micro-batch mean / k":
                loss = mean / K
            else:
                loss = summed / count
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if variant != "no clip":
            nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
    if handle is not None:
        handle.remove()
    return _stage_outcome(data, model, scaler, lrs)


def run_stage(function: Callable, stage: int) -> dict:
    """Run the learner's ``function`` on the stage's data, under the loop auditor and the
    spies; what it left and did, as :func:`reference` returns it, with the auditor's
    ``findings`` (code, message), the scaler's ``calls`` and the clips' ``max_norms``. An
    exception from ``function`` is raised as :class:`helpers.checks.LearnerCodeError`."""
    from helpers.audit import LoopAuditor
    from helpers.checks import NONE_GRAD_IN_A_WINDOW, NONE_IN_AN_AMP_WINDOW, call_learner

    check_stage(stage)
    data, model, optimizer, scheduler, scaler, handle, lrs = _stage_run(stage)
    spy = ScalerSpy(scaler, optimizer) if stage == 3 else None
    options = {"scaler": scaler} if stage == 3 else {}
    try:
        with ClipSpy() as clips:
            with LoopAuditor(model, optimizer, accumulation_steps=K, **options) as audit:
                call_learner(
                    function,
                    model,
                    optimizer,
                    scheduler,
                    scaler,
                    data,
                    K,
                    meanings=NONE_IN_AN_AMP_WINDOW if stage == 3 else NONE_GRAD_IN_A_WINDOW,
                )
    finally:
        if handle is not None:
            handle.remove()
    return {
        **_stage_outcome(data, model, scaler, lrs),
        "findings": [(f.code, f.message) for f in audit.findings],
        "calls": spy.calls if spy is not None else None,
        "max_norms": clips.norms,
    }
