"""Checkers for notebook 07, accumulation in today's training stacks."""

from __future__ import annotations

import contextlib
import copy

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.optimizer import register_optimizer_step_post_hook

from helpers.checks import (
    NOT_ANSWERED,
    CheckResult,
    LearnerCodeError,
    as_function,
    call_learner,
    checker,
    correct,
    is_unanswered,
    number_checker,
    wrong,
)
from helpers.stacks import make_rank_windows, make_token_model, token_count, token_loss_sum

check_scale_factor = number_checker(
    2 / 80,
    {
        1 / 80: "1/80 forgets that DDP averages the two ranks' gradients (it divides their "
        "sum by 2): multiply by the world size too, 2 / 80.",
        1 / 30: "1/30 is rank 0's own count: the step needs the window's tokens on both "
        "ranks, all-reduced: 30 + 50 = 80.",
        1 / 50: "1/50 is rank 1's own count: all-reduce the count, 30 + 50 = 80 tokens.",
        2 / 30: "2/30 uses rank 0's own count: all-reduce it first, 30 + 50 = 80.",
        80.0: "80 multiplies by the count: the gradients are of summed losses, divide them "
        "by the tokens (and undo DDP's average with the world size): 2 / 80.",
        0.5: "0.5 only divides by the world size, which DDP has already done: the sums "
        "still need dividing by the 80 tokens, and the average undone: 2 / 80.",
    },
    "The ranks backwarded sums; DDP averaged them (sum / 2); the mean over tokens is the sum "
    "divided by all 80 tokens.",
    doc="Exercise 07.1: 2 ranks counted 30 and 50 tokens and backwarded their token-loss "
    "sums; DDP averaged the gradients: multiply by world / tokens = 2 / 80.",
)

check_reduce_scatters = number_checker(
    4,
    {
        32: "32 is every micro-batch reduce-scattering every group (8 x 4): "
        "set_requires_gradient_sync(False) skips it for the first 7.",
        1: "one synchronized backward, yes, but FSDP2 reduce-scatters group by group: 4 "
        "groups, 4 reduce-scatters.",
        8: "8 is one per micro-batch: with the sync off, only the last backward "
        "reduce-scatters, once per group.",
        28: "28 counts the 7 micro-batches with the sync off (7 x 4): they reduce-scatter "
        "nothing, the gradients stay unsharded and add up.",
        7: "7 counts the micro-batches with the sync off: those are the ones that do not "
        "reduce-scatter.",
    },
    "Only the backward with the sync on reduce-scatters, and it does so once per group.",
    doc="Exercise 07.3: 4 fully_shard groups, k = 8, set_requires_gradient_sync(False) on "
    "the first 7 micro-batches: 4 reduce-scatters per optimizer step.",
)


# ----------------------------------------------------------- 07.2: scale after accumulating
WINDOW_CALL = "scale_after_window(model, optimizer, micro_batches, world_size, all_reduce)"
LR = 0.5
MAX_NORM = 0.4  # above one window's gradient norm, below another's: clipping shows


class EmulatedDDP(nn.Module):
    """Rank 0 of a DDP run emulated in one process. The other ranks run the same loop on
    their own micro-batches (``others``: per other rank, its micro-batches in order), at the
    same weights and with the same gradients at the window's start (DDP keeps them equal).
    A backward whose forward ran outside ``no_sync()`` replaces each gradient by the mean
    over the ranks, accumulated ones included, as DDP's all-reduce does."""

    def __init__(self, module: nn.Module, others: list[list] | None = None):
        super().__init__()
        self.module = module
        self.others = others or []
        self.backwards = 0
        self.synced_backwards = 0
        self._sync = True
        self._params = list(module.parameters())
        for p in self._params:
            p.register_post_accumulate_grad_hook(self._after_accumulate)
        self.start_window()

    def start_window(self) -> None:
        self._flags: list[bool] = []  # per forward: does its backward synchronize?
        self._seen = [0] * len(self._params)  # backward passes each gradient has seen
        self._other_grads: list[list[torch.Tensor]] = []

    def forward(self, *args, **kwargs):
        if not self._flags:  # the window's first forward: the others hold rank 0's gradients
            self._other_grads = [
                [
                    torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
                    for p in self._params
                ]
                for _ in self.others
            ]
        self._other_backward(len(self._flags))
        self._flags.append(self._sync)
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        before, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = before

    def _other_backward(self, micro: int) -> None:
        """Every other rank backwards its micro-batch ``micro``'s token-loss sum."""
        for rank, batches in enumerate(self.others):
            if micro < len(batches):
                tokens, targets = batches[micro]
                twin = copy.deepcopy(self.module)
                grads = torch.autograd.grad(
                    token_loss_sum(twin, tokens, targets), list(twin.parameters())
                )
                for held, grad in zip(self._other_grads[rank], grads, strict=True):
                    held.add_(grad)

    def _after_accumulate(self, param: torch.Tensor) -> None:
        index = next(i for i, p in enumerate(self._params) if p is param)
        n = self._seen[index]
        self._seen[index] += 1
        sync = self._flags[n] if n < len(self._flags) else True
        if index == 0:
            self.backwards += 1
            self.synced_backwards += bool(sync and self.others)
        if sync and self.others:
            held = [param.grad.detach()] + [grads[index] for grads in self._other_grads]
            mean = torch.stack(held).mean(0)
            for grads in self._other_grads:
                grads[index].copy_(mean)
            with torch.no_grad():
                param.grad.copy_(mean)


class _AllReduce:
    """``torch.distributed.all_reduce`` (a sum, in place) emulated: adds the other ranks'
    ``extra`` to the tensor and records when it ran."""

    def __init__(self, extra: int, emulated: EmulatedDDP):
        self.extra, self.emulated, self.calls = extra, emulated, []

    def __call__(self, tensor, op=None, **kwargs):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(
                "all_reduce(tensor) sums a tensor in place, like torch.distributed.all_reduce: "
                f"pass the count as a tensor, got {type(tensor).__name__}"
            )
        self.calls.append(self.emulated.backwards)
        tensor.add_(self.extra)


def _rank_data(windows_per_rank: int = 2):
    """Per rank, ``windows_per_rank`` windows of 3 micro-batches (uneven token counts)."""
    data = [make_rank_windows(seed=7 + 50 * w) for w in range(windows_per_rank)]
    return [[data[w][rank] for w in range(windows_per_rank)] for rank in range(2)]


def _reference(world: int, variant: str = "correct") -> torch.Tensor:
    """One process on the ranks' windows (``world`` of them), window by window: summed token
    losses over all ranks divided by all their tokens, clipped, one SGD step. ``variant``
    puts in one mistake, to name it by the weights it gives."""
    ranks = _rank_data()[:world]
    model = make_token_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    params = list(model.parameters())
    leftover = None
    for w in range(len(ranks[0])):
        batches = [b for rank in ranks for b in rank[w]]
        tokens = int(sum(token_count(t) for _, t in batches))
        local = int(sum(token_count(t) for _, t in ranks[0][w]))
        if variant == "mean loss":
            per_rank = [
                sum(F.cross_entropy(model(x), t, ignore_index=-100) for x, t in rank[w])
                for rank in ranks
            ]
            total = sum(per_rank)
        else:
            total = sum(token_loss_sum(model, x, t) for x, t in batches)
        grads = [g / world for g in torch.autograd.grad(total, params)]  # DDP's mean
        if variant == "no zero_grad" and leftover is not None:
            grads = [g + old for g, old in zip(grads, leftover, strict=True)]
        factor = {
            "no world factor": 1 / tokens,
            "local count": world / local,
            "divided by k": 1 / len(ranks[0][w]),
        }.get(variant, world / tokens)
        if variant == "clip before scaling":
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            nn.utils.clip_grad_norm_(params, MAX_NORM)
            for p in params:
                p.grad.mul_(factor)
        else:
            for p, g in zip(params, grads, strict=True):
                p.grad = g * factor
            if variant != "no clip":
                nn.utils.clip_grad_norm_(params, MAX_NORM)
        optimizer.step()
        leftover = [p.grad.clone() for p in params]
    return torch.cat([p.detach().flatten() for p in params])


WINDOW_VARIANTS = {
    "no world factor": "the gradients were divided by the all-reduced count, but DDP had "
    "already averaged them over the ranks (divided their sum by the world size): multiply "
    "by world_size / count.",
    "local count": "the gradients were scaled by this rank's own token count: call "
    "all_reduce(count) first, so the count is the window's over all ranks.",
    "mean loss": "each micro-batch's mean token loss was backwarded: backward the sum of its "
    "token losses (reduction='sum'), then divide once by the window's count.",
    "clip before scaling": "the gradients were clipped before they were scaled: the sums are "
    "about count times the mean, so clipping them is not clipping the window's gradient. "
    "Scale first, then clip, then step.",
    "no clip": f"the gradient was not clipped (or not to {MAX_NORM:g}): clip after scaling, "
    f"nn.utils.clip_grad_norm_(model.parameters(), {MAX_NORM:g}).",
    "no zero_grad": "the second window added to the first one's gradients: zero the "
    "gradients at the start of each window (optimizer.zero_grad()).",
    "divided by k": "the gradients were divided by the number of micro-batches: they are "
    "sums of token losses, divide by the window's token count.",
}


NO_PROCESS_GROUP = (
    "the check runs in one process, with no process group: call the all_reduce it passes "
    "in, all_reduce(count), not torch.distributed.all_reduce."
)


def _run_window(function, world: int) -> tuple[torch.Tensor, dict]:
    ranks = _rank_data()[:world]
    module = make_token_model()
    model = EmulatedDDP(module, others=None if world == 1 else [])
    optimizer = torch.optim.SGD(module.parameters(), lr=LR)
    steps = []
    optimizer.register_step_post_hook(lambda *_: steps.append(model.backwards))
    report = {"steps": [], "all_reduce": [], "backwards": [], "synced": []}
    for w in range(len(ranks[0])):
        others = [rank[w] for rank in ranks[1:]]
        model.others = others
        model.start_window()
        extra = int(sum(token_count(t) for batches in others for _, t in batches))
        all_reduce = _AllReduce(extra, model)
        before_backwards, before_synced, before_steps = (
            model.backwards,
            model.synced_backwards,
            len(steps),
        )
        try:
            call_learner(function, model, optimizer, iter(ranks[0][w]), world, all_reduce)
        except LearnerCodeError as error:
            if "process group" in str(error.error):
                raise LearnerCodeError(error.error, NO_PROCESS_GROUP) from None
            raise
        report["steps"].append(len(steps) - before_steps)
        report["all_reduce"].append([c - before_backwards for c in all_reduce.calls])
        report["backwards"].append(model.backwards - before_backwards)
        report["synced"].append(model.synced_backwards - before_synced)
    return torch.cat([p.detach().flatten() for p in module.parameters()]), report


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-4, atol=1e-6)


@checker
def check_scale_after_window(scale_after_window) -> CheckResult:
    """Exercise 07.2: one rank's window, scaled after accumulating. Run as rank 0 of 1 and
    of 2 (the other rank emulated), two windows each, against one process."""
    if is_unanswered(scale_after_window):
        return wrong(NOT_ANSWERED)
    function = as_function(scale_after_window, WINDOW_CALL)
    for world in (1, 2):
        weights, report = _run_window(function, world)
        k = 3
        if any(n != k for n in report["backwards"]):
            return wrong(
                f"the window ran {report['backwards']} backward passes for windows of {k} "
                "micro-batches: backward each micro-batch's token-loss sum once."
            )
        if any(n != 1 for n in report["steps"]):
            return wrong(
                f"optimizer.step() ran {report['steps']} times per window: step once, after "
                "scaling and clipping."
            )
        if any(not calls for calls in report["all_reduce"]):
            return wrong(
                "all_reduce was never called: the count must be the window's over all ranks, "
                "all_reduce(count) (it sums in place) before scaling."
            )
        if any(calls[0] < k for calls in report["all_reduce"]):
            return wrong(
                "all_reduce ran before the window's last backward: scaling after accumulating "
                "needs no count until the end. Backward each micro-batch's token-loss sum "
                "while counting its tokens, then all_reduce the count, then scale."
            )
        expected = _reference(world)
        if not _close(weights, expected):
            for variant, hint in WINDOW_VARIANTS.items():
                if _close(weights, _reference(world, variant)):
                    return wrong(f"as rank 0 of {world}: {hint}")
            return wrong(
                f"as rank 0 of {world}, the weights after two windows differ from one process "
                "on all ranks' micro-batches: backward each token-loss sum, all_reduce the "
                f"count, multiply the gradients by world_size / count, clip to {MAX_NORM:g}, step."
            )
        synced = report["synced"]
    note = ""
    if any(n > 1 for n in synced):
        note = (
            f" (Your window synchronized {max(synced)} backward passes: the gradients are "
            "right, but no_sync() on all but the last micro-batch sends them once.)"
        )
    return correct(
        "the same weights as one process, on 1 rank and on 2 with uneven token counts: sums "
        "backwarded, the count all-reduced at the end, the gradients scaled once." + note
    )


# ------------------------------------------------------ 07.4: repair optimizer-in-backward
REPAIR_CALL = "train(model, micro_batches, k)"
REPAIR_LR = 0.5


def repair_data():
    from helpers.pitfalls import make_teacher_batches

    return make_teacher_batches(n_batches=7, batch_size=4, features=4, seed=5)


def _repair_model():
    from helpers.models import make_mlp

    return make_mlp((4, 8, 1), seed=2)


def _repair_reference(variant: str = "correct") -> torch.Tensor:
    model = _repair_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=REPAIR_LR)
    batches, k = repair_data(), 3
    for start in range(0, len(batches), k):
        window = batches[start : start + k]
        if variant != "no zero_grad":
            optimizer.zero_grad()
        for inputs, targets in window:
            divisor = k if variant == "divided by k" else len(window)
            (F.mse_loss(model(inputs), targets) / divisor).backward()
        if variant != "no clip":
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


REPAIR_VARIANTS = {
    "divided by k": "the short last window (1 micro-batch) was divided by k = 3: divide by "
    "len(window), as the loop does.",
    "no clip": "the window's gradient was not clipped to 1.0 before the step.",
    "no zero_grad": "the gradients were not zeroed between windows: with one optimizer for "
    "the model, call optimizer.zero_grad() at the start of each window.",
}


@checker
def check_repaired_window(train) -> CheckResult:
    """Exercise 07.4: the loop stepped the optimizer in backward; repaired, it accumulates
    each window, clips and steps once per window."""
    if is_unanswered(train):
        return wrong(NOT_ANSWERED)
    function = as_function(train, REPAIR_CALL)
    model = _repair_model()
    steps: list[int] = []
    handle = register_optimizer_step_post_hook(lambda *_: steps.append(1))
    try:
        call_learner(function, model, repair_data(), 3)
    finally:
        handle.remove()
    hooks = sum(
        len(getattr(p, "_post_accumulate_grad_hooks", None) or {}) for p in model.parameters()
    )
    if hooks or len(steps) > 7:
        return wrong(
            f"the optimizer still steps inside backward ({len(steps)} step() calls, one per "
            "parameter per backward, for 7 micro-batches): each hook steps as soon as a "
            "gradient arrives, so nothing is accumulated. Remove the post-accumulate-grad "
            "hooks; one optimizer over model.parameters(), stepped once per window."
        )
    if len(steps) != 3:
        return wrong(
            f"{len(steps)} optimizer steps for 7 micro-batches in windows of 3: step once "
            "per window, the short last one included (3 steps)."
        )
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    if not torch.allclose(weights, _repair_reference(), rtol=1e-4, atol=1e-6):
        for variant, hint in REPAIR_VARIANTS.items():
            if torch.allclose(weights, _repair_reference(variant), rtol=1e-4, atol=1e-6):
                return wrong(hint)
        return wrong(
            "3 steps, but the weights differ from the accumulated windows: zero the "
            "gradients, backward each loss / len(window), clip to 1.0, step."
        )
    return correct(
        "one optimizer step per window on the accumulated, clipped gradient: the same "
        "weights as the ordinary loop."
    )
