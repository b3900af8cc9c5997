"""Checkers for notebook 00, setup check."""

from __future__ import annotations

import torch

from helpers.checks import AnswerKindError, CheckResult, checker, correct, is_unanswered, wrong
from helpers.translation import _


@checker
def check_forced_device(answer: object) -> CheckResult:
    """Exercise 00.1: a laptop with an NVIDIA GPU, JupyterLab started with
    ``GM_DEVICE=cpu jupyter lab``: which device does ``pick_device()`` return? Expected
    ``"cpu"``: the variable overrides the GPU that would be found."""
    if is_unanswered(answer):
        return wrong(_("Not answered yet: replace `...` with a string such as 'cuda'."))
    if isinstance(answer, torch.device):
        answer = answer.type
    if not isinstance(answer, str):
        kind = "None" if answer is None else type(answer).__name__
        raise AnswerKindError(
            _("answer must be a string such as 'cuda', got {kind}").format(kind=kind)
        )
    given = answer.strip().lower()
    if given == "cpu":
        return correct(
            _(
                "GM_DEVICE wins over the GPU pick_device() would find: it returns 'cpu'. You are "
                "ready for the course."
            )
        )
    if given in ("cuda", "gpu", "nvidia") or given.startswith("cuda:"):
        return wrong(
            _(
                "pick_device() would find the GPU, but it reads GM_DEVICE first, and GM_DEVICE=cpu "
                "forces another device: which one?"
            )
        )
    if given == "mps":
        return wrong(
            _(
                "mps is Apple silicon's GPU, and this laptop has an NVIDIA one; besides, GM_DEVICE "
                "names the device to use: which one does it name?"
            )
        )
    return wrong(_("PyTorch's devices are named 'cpu', 'cuda' or 'mps': use one of those names."))
