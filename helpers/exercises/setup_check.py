"""Checkers for notebook 00, setup check."""

from __future__ import annotations

import torch

from helpers.checks import AnswerKindError, CheckResult, checker, correct, is_unanswered, wrong
from helpers.device import pick_device


@checker
def check_device_answer(answer: object) -> CheckResult:
    """Exercise 00.1: name the device (``"cpu"``, ``"cuda"`` or ``"mps"``) the check found."""
    if is_unanswered(answer):
        return wrong("Not answered yet: replace `...` with a string such as 'cpu'.")
    if isinstance(answer, torch.device):
        answer = answer.type
    if not isinstance(answer, str):
        kind = "None" if answer is None else type(answer).__name__
        raise AnswerKindError(f"answer must be a string such as 'cpu', got {kind}")
    found = pick_device().type
    given = answer.strip().lower()
    if given == found or (found == "cuda" and given.startswith("cuda:")):
        return correct(f"this notebook computes on {found!r}. You are ready for the course.")
    if given in ("gpu", "nvidia"):
        return wrong(
            f"PyTorch names NVIDIA GPUs 'cuda', and this machine's device is {found!r}: "
            "read the 'device' line of the report above."
        )
    if given in ("cpu", "cuda", "mps"):
        return wrong(
            f"{given!r} is a device PyTorch knows, but not the one found here: read the "
            "'device' line of the report above."
        )
    return wrong("PyTorch's devices are named 'cpu', 'cuda' or 'mps': use one of those names.")
