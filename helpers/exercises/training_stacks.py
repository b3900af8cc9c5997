"""Checkers for notebook 07, accumulation in today's training stacks."""

from __future__ import annotations

import contextlib
import copy
import functools

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook

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
        40.0: "40 is count / world, the inverse of the factor: the gradients are of summed "
        "losses, divide them by the 80 tokens and undo DDP's average: world / count = 2 / 80.",
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


class _CheckStop(Exception):
    """Raised by the check's stand-ins (the loader, ``all_reduce``) to stop a learner's window
    with a hint; the check reports ``hint`` itself, not "your function raised"."""

    def __init__(self, hint: str):
        super().__init__(hint)
        self.hint = hint


READ_TWICE = (
    "micro_batches was read a second time: it can be read only once (like a DataLoader that "
    "streams), so the second pass got nothing. Count the tokens in the same loop as the "
    "backward passes: count += (targets != -100).sum() after each backward."
)
NOT_A_SUM = (
    "all_reduce(count, op={op}): the count must be summed over the ranks (op=ReduceOp.SUM, "
    "the default), so call all_reduce(count) and multiply the gradients by world_size / count."
)


class _ReadOnce:
    """A window's micro-batches as a loader that streams: they can be read only once. A
    second pass raises :class:`_CheckStop` (and is recorded, should the learner catch it)."""

    def __init__(self, batches):
        self._batches = iter(batches)
        self.exhausted = False
        self.read_twice = False

    def __iter__(self):
        if self.exhausted:
            self.read_twice = True
            raise _CheckStop(READ_TWICE)
        return self

    def __next__(self):
        try:
            return next(self._batches)
        except StopIteration:
            self.exhausted = True
            raise


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

    @property
    def forwards(self) -> int:
        """The forward passes of the window so far."""
        return len(self._flags)

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
        if sync and self.others and self._other_grads:
            held = [param.grad.detach()] + [grads[index] for grads in self._other_grads]
            mean = torch.stack(held).mean(0)
            for grads in self._other_grads:
                grads[index].copy_(mean)
            with torch.no_grad():
                param.grad.copy_(mean)


class _Work:
    """What ``all_reduce(..., async_op=True)`` returns: the sum is already done."""

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _is_sum(op) -> bool:
    return op is None or str(op).rsplit(".", 1)[-1].upper() == "SUM"


class _AllReduce:
    """``torch.distributed.all_reduce`` (a sum, in place) emulated: adds the other ranks'
    ``extra`` to the tensor and records when it ran (the window's forward passes so far) and
    the count it was given. Returns a finished work with ``async_op=True``, as torch does."""

    def __init__(self, extra: int, emulated: EmulatedDDP):
        self.extra, self.emulated = extra, emulated
        self.calls: list[dict] = []
        self.problem: str | None = None

    def __call__(self, tensor, op=None, group=None, async_op=False, **kwargs):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(
                "all_reduce(tensor) sums a tensor in place, like torch.distributed.all_reduce: "
                f"pass the count as a tensor, got {type(tensor).__name__}"
            )
        if not _is_sum(op):
            self.problem = NOT_A_SUM.format(op=str(op).rsplit(".", 1)[-1])
            raise _CheckStop(self.problem)
        self.calls.append(
            {
                "forwards": self.emulated.forwards,
                "value": float(tensor.detach().double().sum()),
            }
        )
        tensor.add_(self.extra)
        return _Work() if async_op else None


@contextlib.contextmanager
def _watch_clipping(record: list):
    """Record, for each ``clip_grad_norm_`` call, the norm it saw, its max_norm and the
    number of tensors it clipped together and their gradient before clipping (torch's
    clip_grad_norm_ hands them to ``_clip_grads_with_norm_``, looked up at call time). Yields
    whether it is watching."""
    from torch.nn.utils import clip_grad

    original = getattr(clip_grad, "_clip_grads_with_norm_", None)
    if original is None:  # another torch: no record, the check then names mistakes by weights
        yield False
        return

    def clip_with_norm(parameters, max_norm, total_norm, foreach=None):
        tensors = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        grads = [t.grad.detach().flatten() for t in tensors if t.grad is not None]
        record.append(
            {
                "kind": "clip",
                "norm": float(total_norm),
                "max_norm": float(max_norm),
                "tensors": len(tensors),
                "grad": torch.cat(grads).clone() if grads else None,
            }
        )
        return original(tensors, max_norm, total_norm, foreach)

    clip_grad._clip_grads_with_norm_ = clip_with_norm
    try:
        yield True
    finally:
        clip_grad._clip_grads_with_norm_ = original


def _grad_norm(params) -> float:
    grads = [p.grad.detach().double() for p in params if p.grad is not None]
    return float(torch.sqrt(sum((g * g).sum() for g in grads))) if grads else 0.0


def _rank_data(windows_per_rank: int = 2):
    """Per rank, ``windows_per_rank`` windows of 3 micro-batches (uneven token counts)."""
    data = [make_rank_windows(seed=7 + 50 * w) for w in range(windows_per_rank)]
    return [[data[w][rank] for w in range(windows_per_rank)] for rank in range(2)]


def _counts(world: int) -> list[dict]:
    """Per window: this rank's (rank 0's) token count, its targets' numel (padding counted
    too) and the count over all ``world`` ranks."""
    ranks = _rank_data()[:world]
    return [
        {
            "local": int(sum(token_count(t) for _, t in ranks[0][w])),
            "padded": int(sum(t.numel() for _, t in ranks[0][w])),
            "global": int(sum(token_count(t) for rank in ranks for _, t in rank[w])),
        }
        for w in range(len(ranks[0]))
    ]


@functools.cache
def _reference(world: int, variant: str = "correct") -> tuple[torch.Tensor, tuple[float, ...]]:
    """One process on the ranks' windows (``world`` of them), window by window: summed token
    losses over all ranks divided by all their tokens, clipped, one SGD step. ``variant``
    puts in one mistake, to name it by the weights it gives. Returns the weights and, per
    window, the norm clipping sees."""
    ranks = _rank_data()[:world]
    model = make_token_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    params = list(model.parameters())
    leftover, norms = None, []
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
            norms.append(_grad_norm(params))
            if variant != "no clip":
                nn.utils.clip_grad_norm_(params, MAX_NORM)
        optimizer.step()
        leftover = [p.grad.clone() for p in params]
    return torch.cat([p.detach().flatten() for p in params]), tuple(norms)


WINDOW_VARIANTS = {
    "no world factor": "the gradients were divided by the all-reduced count, but DDP had "
    "already averaged them over the ranks (divided their sum by the world size): multiply "
    "by world_size / count.",
    "local count": "the gradients were scaled by this rank's own token count: call "
    "all_reduce(count) first, then compute world_size / count from the count it leaves "
    "(the window's over all ranks).",
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
NEVER_SYNCED = (
    "no backward of the window synchronized: with every micro-batch under model.no_sync(), "
    "DDP never averages the gradients over the ranks, so each rank steps on its own. Leave "
    "the last micro-batch's forward and backward outside no_sync() (or use no no_sync())."
)
BYPASSED_DDP = (
    "the forward passes went around the DDP model (model.module(...)?): its backward then "
    "never synchronizes. Call model(tokens), the model the check passes in."
)
PER_TENSOR_CLIP = (
    f"clip_grad_norm_ was called on parameters one at a time: that clips each to norm "
    f"{MAX_NORM:g}, not the window's whole gradient. Clip them together, "
    f"nn.utils.clip_grad_norm_(model.parameters(), {MAX_NORM:g})."
)


def _run_window(function, world: int) -> tuple[torch.Tensor, dict]:
    ranks = _rank_data()[:world]
    module = make_token_model()
    model = EmulatedDDP(module, others=None if world == 1 else [])
    optimizer = torch.optim.SGD(module.parameters(), lr=LR)
    steps, step_norms = [], []
    optimizer.register_step_pre_hook(lambda *_: step_norms.append(_grad_norm(module.parameters())))
    optimizer.register_step_post_hook(lambda *_: steps.append(model.backwards))
    report = {
        "steps": [],
        "all_reduce": [],
        "backwards": [],
        "forwards": [],
        "synced": [],
        "clips": [],
        "step_norms": [],
        "watched": True,
    }
    for w in range(len(ranks[0])):
        others = [rank[w] for rank in ranks[1:]]
        model.others = others
        model.start_window()
        extra = int(sum(token_count(t) for batches in others for _, t in batches))
        all_reduce = _AllReduce(extra, model)
        loader = _ReadOnce(ranks[0][w])
        before_backwards, before_synced, before_steps = (
            model.backwards,
            model.synced_backwards,
            len(steps),
        )
        clips: list[dict] = []
        try:
            with _watch_clipping(clips) as watched:
                call_learner(function, model, optimizer, loader, world, all_reduce)
        except LearnerCodeError as error:
            if isinstance(error.error, _CheckStop):
                raise _CheckStop(error.error.hint) from None
            if "process group" in str(error.error):
                raise LearnerCodeError(error.error, NO_PROCESS_GROUP) from None
            raise
        for problem in (READ_TWICE if loader.read_twice else None, all_reduce.problem):
            if problem:  # raised in the learner's code, and caught there
                raise _CheckStop(problem)
        report["watched"] = report["watched"] and watched
        report["steps"].append(len(steps) - before_steps)
        report["all_reduce"].append(list(all_reduce.calls))
        report["backwards"].append(model.backwards - before_backwards)
        report["forwards"].append(model.forwards)
        report["synced"].append(model.synced_backwards - before_synced)
        report["clips"].append(clips)
        report["step_norms"].append(step_norms[-1] if len(steps) > before_steps else None)
    return torch.cat([p.detach().flatten() for p in module.parameters()]), report


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def _near(a: float, b: float, rel: float = 1e-3) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b))


def _check_all_reduce(report: dict, counts: list[dict], k: int) -> str | None:
    """The hint for an all_reduce called other than once per window, on the window's whole
    count, after the window's forward passes; None if it was."""
    calls = report["all_reduce"]
    if any(not window for window in calls):
        return (
            "all_reduce was never called: the count must be the window's over all ranks, "
            "all_reduce(count) (it sums in place) before scaling."
        )
    if any(len(window) > 1 for window in calls):
        return (
            f"all_reduce ran {max(len(window) for window in calls)} times in one window: it "
            "sums in place, so each call adds the other ranks' counts again. Call "
            "all_reduce(count) once per window, after counting its micro-batches."
        )
    for window, count in zip(calls, counts, strict=True):
        call = window[0]
        if call["forwards"] < k:
            return (
                f"all_reduce ran before the window's last backward (after {call['forwards']} "
                f"of its {k} forward passes): scaling after accumulating needs no count until "
                "the end. Backward each micro-batch's token-loss sum while counting its "
                "tokens, then all_reduce the count, then scale."
            )
        if _near(call["value"], count["padded"], 1e-6) and count["padded"] != count["local"]:
            return (
                f"the count all-reduced was {call['value']:g}, every target position padding "
                f"included (t.numel()), but only {count['local']} are tokens: count "
                "(targets != -100).sum(), the positions the loss does not ignore."
            )
        if not _near(call["value"], count["local"], 1e-6):
            return (
                f"all_reduce got a count of {call['value']:g}, but this rank's window holds "
                f"{count['local']} tokens: add (targets != -100).sum() for every micro-batch, "
                "then all_reduce the whole count."
            )
    return None


def _diagnose_by_norm(world: int, report: dict, counts: list[dict], k: int) -> str | None:
    """Name the mistake from the norm clipping saw in each window against the true one
    (clipping makes every too large gradient the same, so the weights cannot tell)."""
    if not report["watched"]:
        return None
    _, true_norms = _reference(world)
    n_params = len(list(make_token_model().parameters()))
    for clips, step_norm, true, count in zip(
        report["clips"], report["step_norms"], true_norms, counts, strict=True
    ):
        if not clips:
            return WINDOW_VARIANTS["no clip"]
        if any(clip["tensors"] < n_params for clip in clips):
            return PER_TENSOR_CLIP
        last = clips[-1]
        if not _near(last["max_norm"], MAX_NORM, 1e-6):
            return (
                f"the gradient was clipped to {last['max_norm']:g}, not to {MAX_NORM:g}: "
                f"nn.utils.clip_grad_norm_(model.parameters(), {MAX_NORM:g})."
            )
        left = last["norm"] * min(1.0, last["max_norm"] / (last["norm"] + 1e-6))
        if step_norm is not None and not _near(step_norm, left, 1e-4):
            return WINDOW_VARIANTS["clip before scaling"]
        ratio = last["norm"] / true
        if _near(ratio, 1.0, 1e-4):
            continue
        n, g, local = count["global"] / world, count["global"], count["local"]
        named = {
            n: f"the gradient clipping saw was {ratio:.3g} times too large, count / "
            f"world_size = {g} / {world}: it was not scaled. Multiply the gradients by "
            "world_size / count before clipping.",
            n * n: f"the gradient clipping saw was {ratio:.3g} times too large, (count / "
            f"world_size)² with count = {g}: the factor is inverted. Multiply by "
            "world_size / count, not count / world_size.",
            n / k: f"the gradient clipping saw was {ratio:.3g} times too large, count / "
            f"(world_size * k) with count = {g}: {WINDOW_VARIANTS['divided by k']}",
            g / local: f"the gradient clipping saw was {ratio:.3g} times too large, the "
            f"window's count over this rank's ({g} / {local}): " + WINDOW_VARIANTS["local count"],
        }
        if world > 1:
            named[world] = (
                f"the gradient clipping saw was {world} (world_size) times too large: DDP "
                "averages the ranks' gradients, so multiply by world_size once: "
                "world_size / count."
            )
            named[1 / world] = (
                f"the gradient clipping saw was {world} (world_size) times too small: "
                + WINDOW_VARIANTS["no world factor"]
            )
        for value, hint in named.items():
            if _near(ratio, value):
                return hint
        return None  # some other mistake: named by the weights, if it can be
    return None


@checker
def check_scale_after_window(scale_after_window) -> CheckResult:
    """Exercise 07.2: one rank's window, scaled after accumulating. Run as rank 0 of 1 and
    of 2 (the other rank emulated), two windows each, against one process."""
    if is_unanswered(scale_after_window):
        return wrong(NOT_ANSWERED)
    function = as_function(scale_after_window, WINDOW_CALL)
    k = 3
    for world in (1, 2):
        try:
            weights, report = _run_window(function, world)
        except _CheckStop as stop:
            return wrong(stop.hint)
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
        if any(f < b for f, b in zip(report["forwards"], report["backwards"], strict=True)):
            return wrong(f"as rank 0 of {world}: {BYPASSED_DDP}")
        counts = _counts(world)
        hint = _check_all_reduce(report, counts, k)
        if hint:
            return wrong(hint)
        if _close(weights, _reference(world)[0]):
            synced = report["synced"]
            continue
        if world > 1 and not any(report["synced"]):
            return wrong(f"as rank 0 of {world}: {NEVER_SYNCED}")
        hint = _diagnose_by_norm(world, report, counts, k)
        if hint:
            return wrong(f"as rank 0 of {world}: {hint}")
        for variant, hint in WINDOW_VARIANTS.items():
            if _close(weights, _reference(world, variant)[0]):
                return wrong(f"as rank 0 of {world}: {hint}")
        return wrong(
            f"as rank 0 of {world}, the weights after two windows differ from one process "
            "on all ranks' micro-batches: backward each token-loss sum, all_reduce the "
            f"count, multiply the gradients by world_size / count, clip to {MAX_NORM:g}, step."
        )
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
REPAIR_K = 3


def repair_data():
    """7 micro-batches; with :func:`_repair_model` and k = 3 the windows' gradients have norms
    of about 0.76 (not clipped at 1.0), 1.76 and 1.63 (clipped): a loss scaled by any factor
    changes the first step, clipping or no clipping (or to another norm) the second; the
    second window's partial sums pass 1.0 too, so clipping inside the loop shows."""
    from helpers.pitfalls import make_teacher_batches

    return make_teacher_batches(n_batches=7, batch_size=4, features=4, seed=2)


def _repair_model():
    from helpers.models import make_mlp

    return make_mlp((4, 8, 1), seed=3)


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@functools.cache
def _repair_reference(variant: str = "correct") -> torch.Tensor:
    """The ordinary loop's weights, or with ``variant``'s mistake put in."""
    model = _repair_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=REPAIR_LR)
    batches, k = repair_data(), REPAIR_K
    max_norm = 0.5 if variant == "clip 0.5" else 1.0
    for start in range(0, len(batches), k):
        window = batches[start : start + k]
        if variant != "no zero_grad":
            optimizer.zero_grad()
        for inputs, targets in window:
            if variant == "zero_grad in the loop":
                optimizer.zero_grad()
            divisor = {"divided by k": k, "not divided": 1}.get(variant, len(window))
            (F.mse_loss(model(inputs), targets) / divisor).backward()
            if variant == "clip in the loop":
                nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if variant not in ("no clip", "clip in the loop"):
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
    return _flat(model)


REPAIR_VARIANTS = {
    "not divided": "the losses were not divided by len(window): the window's gradient is "
    "then the sum of its micro-batches' gradients, len(window) times their mean. Backward "
    "loss / len(window), as the loop does.",
    "divided by k": "the short last window (1 micro-batch) was divided by k = 3: divide by "
    "len(window), as the loop does.",
    "no clip": "the window's gradient was not clipped to 1.0 before the step.",
    "clip 0.5": "the window's gradient was clipped to 0.5: clip it to 1.0, as the loop does.",
    "clip in the loop": "the gradient was clipped after each micro-batch's backward, inside "
    "the loop: clip once per window, after its last backward, just before the step.",
    "zero_grad in the loop": "zero_grad() ran before each micro-batch's backward, inside the "
    "loop, so only the window's last gradient was left: zero once per window, before the "
    "micro-batch loop.",
    "no zero_grad": "the gradients were not zeroed between windows: with one optimizer for "
    "the model, call optimizer.zero_grad() at the start of each window.",
}


@functools.cache
def _repair_first_gradient() -> torch.Tensor:
    """The first window's accumulated gradient at the start weights, before clipping."""
    model = _repair_model()
    window = repair_data()[:REPAIR_K]
    for inputs, targets in window:
        (F.mse_loss(model(inputs), targets) / len(window)).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _diagnose_repair_clipping(clips: list[dict]) -> str | None:
    """Name the mistake from what clip_grad_norm_ saw: clipped inside the micro-batch loop,
    to another norm, or (in the first window, at the same weights as the ordinary loop) a
    gradient parallel to the right one but of another size: the losses were scaled."""
    by_window: dict[int, list[dict]] = {}
    for clip in clips:
        if clip["after"] > 0:
            by_window.setdefault((clip["after"] - 1) // REPAIR_K, []).append(clip)
    if any(len({clip["after"] for clip in window}) > 1 for window in by_window.values()):
        return REPAIR_VARIANTS["clip in the loop"]
    for window in by_window.values():
        if not _near(window[-1]["max_norm"], 1.0, 1e-6):
            return (
                f"the window's gradient was clipped to {window[-1]['max_norm']:g}: clip it to "
                "1.0, as the loop does."
            )
    first = by_window.get(0, [{}])[-1].get("grad")
    right = _repair_first_gradient()
    if first is None or first.shape != right.shape:
        return None
    ratio = float(first.norm() / right.norm())
    parallel = float(F.cosine_similarity(first.double(), right.double(), dim=0)) > 1 - 1e-6
    if not parallel or _near(ratio, 1.0, 1e-4):
        return None
    if _near(ratio, REPAIR_K, 1e-4):
        return REPAIR_VARIANTS["not divided"]
    batch = len(repair_data()[0][1])
    if _near(ratio, batch, 1e-4):
        return (
            f"clipping saw a gradient {batch} times the ordinary loop's, the micro-batch size: "
            "the losses were summed over the samples (reduction='sum'?). Backward the mean "
            "loss / len(window), F.mse_loss(model(inputs), targets) / len(window)."
        )
    return (
        f"clipping saw the first window's gradient {ratio:.3g} times the ordinary loop's "
        "(the same direction): the losses were scaled by something other than "
        "1 / len(window). Backward F.mse_loss(model(inputs), targets) / len(window)."
    )


class _Stamped(list):
    """A list whose appended records get ``after``: the forward passes run so far."""

    def __init__(self, forwards):
        super().__init__()
        self._forwards = forwards

    def append(self, record: dict) -> None:
        super().append(dict(record, after=self._forwards()))


def _in_backward() -> bool:
    """True while the autograd engine runs a backward pass (its graph task has an id)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


@checker
def check_repaired_window(train) -> CheckResult:
    """Exercise 07.4: the loop stepped the optimizer in backward; repaired, it accumulates
    each window, clips and steps once per window. Judged by the weights against the ordinary
    loop; the steps (when they ran: during a backward, after which micro-batch) name the
    mistake."""
    if is_unanswered(train):
        return wrong(NOT_ANSWERED)
    function = as_function(train, REPAIR_CALL)
    model = _repair_model()
    start = _flat(model)
    forwards, steps = [0], []

    def count_forward(*_):
        forwards[0] += 1

    def record_step(optimizer, *_):
        steps.append({"after": forwards[0], "in_backward": _in_backward(), "id": id(optimizer)})

    handles = [
        model.register_forward_hook(count_forward),
        register_optimizer_step_pre_hook(record_step),
    ]
    clips = _Stamped(lambda: forwards[0])
    try:
        with _watch_clipping(clips):
            call_learner(function, model, repair_data(), REPAIR_K)
    finally:
        for handle in handles:
            handle.remove()
    weights = _flat(model)
    if _close(weights, _repair_reference()):
        return correct(
            "one optimizer step per window on the accumulated, clipped gradient: the same "
            "weights as the ordinary loop."
        )
    inside = sum(step["in_backward"] for step in steps)
    if inside:
        return wrong(
            f"the optimizer still steps inside backward ({inside} step() calls ran during "
            "backward passes, for 7 micro-batches): each hook steps as soon as a gradient "
            "arrives, so nothing is accumulated. Remove the hooks that step; one optimizer "
            "over model.parameters(), stepped once per window."
        )
    after = sorted({step["after"] for step in steps})  # per-parameter optimizers: one moment
    windows = [min(end, 7) for end in range(REPAIR_K, 7 + REPAIR_K, REPAIR_K)]
    if len(after) != len(windows) and (steps or _close(weights, start)):
        return wrong(
            f"{len(after)} optimizer steps for 7 micro-batches in windows of 3: step once "
            "per window, the short last one included (3 steps)."
        )
    if steps and after != windows:
        return wrong(
            f"the optimizer stepped after micro-batches {after}: step at the end of each "
            f"window, after micro-batches {windows}."
        )
    twice = len(steps) - len({(step["after"], step["id"]) for step in steps})
    if twice:
        return wrong(
            f"an optimizer stepped more than once at the end of a window ({twice} extra "
            "step() calls): step each optimizer once per window."
        )
    if _close(weights, start):
        return wrong(
            "the weights did not move: at each step the gradients were gone (None or zero). "
            "A hook that frees .grad, or zero_grad() after the backward calls? Keep the "
            "gradients until the step; zero them at the start of the next window."
        )
    hint = _diagnose_repair_clipping(clips)
    if hint:
        return wrong(hint)
    for variant, hint in REPAIR_VARIANTS.items():
        if _close(weights, _repair_reference(variant)):
            return wrong(hint)
    return wrong(
        "the weights differ from the accumulated windows: zero the gradients, backward each "
        "loss / len(window), clip to 1.0, step SGD (lr 0.5), once per window."
    )
