"""Exercise 08.2 of notebook 08: write the scale-after-accumulating window. The checker runs
the learner's window as the only rank and as rank 0 of 2 (the other rank emulated), with a
read-once loader and a stand-in all_reduce, and names the mistake from the weights, the
count all-reduced and the norm clipping saw."""

from __future__ import annotations

import contextlib
import copy
import functools

import torch
from torch import nn
from torch.nn import functional as F

from helpers.checks import (
    NONE_FROM_ALL_REDUCE,
    NOT_ANSWERED,
    CheckResult,
    LearnerCodeError,
    as_function,
    call_learner,
    checker,
    correct,
    is_unanswered,
    wrong,
)
from helpers.training_stacks.stacks import (
    make_rank_windows,
    make_token_model,
    token_count,
    token_loss_sum,
)
from helpers.training_stacks.window_records import CheckStop, close, grad_norm, near, watch_clipping
from helpers.translation import N_, _, translate

WINDOW_CALL = "scale_after_window(model, optimizer, micro_batches, world_size, all_reduce)"
LR = 0.5
MAX_NORM = 0.4  # above one window's gradient norm, below another's: clipping shows


# The hints are marked with N_ and translated where they are shown (translate or _hint).
READ_TWICE = N_(
    "micro_batches was read a second time: it can be read only once (like a DataLoader that "
    "streams), so the second pass got nothing. Count the tokens in the same loop as the "
    "backward passes: count += (targets != -100).sum() after each backward."
)
NOT_A_SUM = N_(
    "all_reduce(count, op={op}): the count must be summed over the ranks (op=ReduceOp.SUM, "
    "the default), so call all_reduce(count) and multiply the gradients by world_size / count."
)


class _ReadOnce:
    """A window's micro-batches as a loader that streams: they can be read only once. A
    second pass raises :class:`CheckStop` (and is recorded, should the learner catch it)."""

    def __init__(self, batches):
        self._batches = iter(batches)
        self.exhausted = False
        self.read_twice = False

    def __iter__(self):
        if self.exhausted:
            self.read_twice = True
            raise CheckStop(translate(READ_TWICE))
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
                _(
                    "all_reduce(tensor) sums a tensor in place, like "
                    "torch.distributed.all_reduce: pass the count as a tensor, got {kind}"
                ).format(kind=type(tensor).__name__)
            )
        if not _is_sum(op):
            self.problem = translate(NOT_A_SUM).format(op=str(op).rsplit(".", 1)[-1])
            raise CheckStop(self.problem)
        self.calls.append(
            {
                "forwards": self.emulated.forwards,
                "value": float(tensor.detach().double().sum()),
            }
        )
        tensor.add_(self.extra)
        return _Work() if async_op else None


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
            norms.append(grad_norm(params))
            if variant != "no clip":
                nn.utils.clip_grad_norm_(params, MAX_NORM)
        optimizer.step()
        leftover = [p.grad.clone() for p in params]
    return torch.cat([p.detach().flatten() for p in params]), tuple(norms)


WINDOW_VARIANTS = {
    "no world factor": N_(
        "the gradients were divided by the all-reduced count, but DDP had "
        "already averaged them over the ranks (divided their sum by the world size): multiply "
        "by world_size / count."
    ),
    "local count": N_(
        "the gradients were scaled by this rank's own token count: call "
        "all_reduce(count) first, then compute world_size / count from the count it leaves "
        "(the window's over all ranks)."
    ),
    "mean loss": N_(
        "each micro-batch's mean token loss was backwarded: backward the sum of its "
        "token losses (reduction='sum'), then divide once by the window's count."
    ),
    "clip before scaling": N_(
        "the gradients were clipped before they were scaled: the sums are "
        "about count times the mean, so clipping them is not clipping the window's gradient. "
        "Scale first, then clip, then step."
    ),
    "no clip": N_(
        "the gradient was not clipped (or not to {max_norm:g}): clip after scaling, "
        "nn.utils.clip_grad_norm_(model.parameters(), {max_norm:g})."
    ),
    "no zero_grad": N_(
        "the second window added to the first one's gradients: zero the "
        "gradients at the start of each window (optimizer.zero_grad())."
    ),
    "divided by k": N_(
        "the gradients were divided by the number of micro-batches: they are "
        "sums of token losses, divide by the window's token count."
    ),
}


def _hint(message: str) -> str:
    """A hint marked with N_ above, in the language of the messages, its values filled in."""
    return translate(message).format(max_norm=MAX_NORM)


NO_PROCESS_GROUP = N_(
    "the check runs in one process, with no process group: call the all_reduce it passes "
    "in, all_reduce(count), not torch.distributed.all_reduce."
)
NEVER_SYNCED = N_(
    "no backward of the window synchronized: with every micro-batch under model.no_sync(), "
    "DDP never averages the gradients over the ranks, so each rank steps on its own. Leave "
    "the last micro-batch's forward and backward outside no_sync() (or use no no_sync())."
)
BYPASSED_DDP = N_(
    "the forward passes went around the DDP model (model.module(...)?): its backward then "
    "never synchronizes. Call model(tokens), the model the check passes in."
)
PER_TENSOR_CLIP = N_(
    "clip_grad_norm_ was called on parameters one at a time: that clips each to norm "
    "{max_norm:g}, not the window's whole gradient. Clip them together, "
    "nn.utils.clip_grad_norm_(model.parameters(), {max_norm:g})."
)


def _run_window(function, world: int) -> tuple[torch.Tensor, dict]:
    ranks = _rank_data()[:world]
    module = make_token_model()
    model = EmulatedDDP(module, others=None if world == 1 else [])
    optimizer = torch.optim.SGD(module.parameters(), lr=LR)
    steps, step_norms = [], []
    optimizer.register_step_pre_hook(lambda *_: step_norms.append(grad_norm(module.parameters())))
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
            with watch_clipping(clips) as watched:
                call_learner(
                    function,
                    model,
                    optimizer,
                    loader,
                    world,
                    all_reduce,
                    meanings=NONE_FROM_ALL_REDUCE,
                )
        except LearnerCodeError as error:
            if isinstance(error.error, CheckStop):
                raise CheckStop(error.error.hint) from None
            if "process group" in str(error.error):
                raise LearnerCodeError(error.error, translate(NO_PROCESS_GROUP)) from None
            raise
        for problem in (translate(READ_TWICE) if loader.read_twice else None, all_reduce.problem):
            if problem:  # raised in the learner's code, and caught there
                raise CheckStop(problem)
        report["watched"] = report["watched"] and watched
        report["steps"].append(len(steps) - before_steps)
        report["all_reduce"].append(list(all_reduce.calls))
        report["backwards"].append(model.backwards - before_backwards)
        report["forwards"].append(model.forwards)
        report["synced"].append(model.synced_backwards - before_synced)
        report["clips"].append(clips)
        report["step_norms"].append(step_norms[-1] if len(steps) > before_steps else None)
    return torch.cat([p.detach().flatten() for p in module.parameters()]), report


def _check_all_reduce(report: dict, counts: list[dict], k: int) -> str | None:
    """The hint for an all_reduce called other than once per window, on the window's whole
    count, after the window's forward passes; None if it was."""
    calls = report["all_reduce"]
    if any(not window for window in calls):
        return _(
            "all_reduce was never called: the count must be the window's over all ranks, "
            "all_reduce(count) (it sums in place) before scaling."
        )
    if any(len(window) > 1 for window in calls):
        return _(
            "all_reduce ran {times} times in one window: it "
            "sums in place, so each call adds the other ranks' counts again. Call "
            "all_reduce(count) once per window, after counting its micro-batches."
        ).format(times=max(len(window) for window in calls))
    for window, count in zip(calls, counts, strict=True):
        call = window[0]
        if call["forwards"] < k:
            return _(
                "all_reduce ran before the window's last backward (with {forwards} "
                "of its {k} forward passes done): scaling after accumulating needs no count until "
                "the end. Backward each micro-batch's token-loss sum while counting its "
                "tokens, then all_reduce the count, then scale."
            ).format(forwards=call["forwards"], k=k)
        if near(call["value"], count["padded"], 1e-6) and count["padded"] != count["local"]:
            return _(
                "the count all-reduced was {value:g}, every target position padding "
                "included (t.numel()), but only {local} are tokens: count "
                "(targets != -100).sum(), the positions the loss does not ignore."
            ).format(value=call["value"], local=count["local"])
        if not near(call["value"], count["local"], 1e-6):
            return _(
                "all_reduce got a count of {value:g}, but this rank's window holds "
                "{local} tokens: add (targets != -100).sum() for every micro-batch, "
                "then all_reduce the whole count."
            ).format(value=call["value"], local=count["local"])
    return None


def _diagnose_by_norm(world: int, report: dict, counts: list[dict], k: int) -> str | None:
    """Name the mistake from the norm clipping saw in each window against the true one
    (clipping makes every too large gradient the same, so the weights cannot tell)."""
    if not report["watched"]:
        return None
    true_norms = _reference(world)[1]
    n_params = len(list(make_token_model().parameters()))
    for clips, step_norm, true, count in zip(
        report["clips"], report["step_norms"], true_norms, counts, strict=True
    ):
        if not clips:
            return _hint(WINDOW_VARIANTS["no clip"])
        if any(clip["tensors"] < n_params for clip in clips):
            return _hint(PER_TENSOR_CLIP)
        last = clips[-1]
        if not near(last["max_norm"], MAX_NORM, 1e-6):
            return _(
                "the gradient was clipped to {clipped:g}, not to {max_norm:g}: "
                "nn.utils.clip_grad_norm_(model.parameters(), {max_norm:g})."
            ).format(clipped=last["max_norm"], max_norm=MAX_NORM)
        left = last["norm"] * min(1.0, last["max_norm"] / (last["norm"] + 1e-6))
        if step_norm is not None and not near(step_norm, left, 1e-4):
            return _hint(WINDOW_VARIANTS["clip before scaling"])
        ratio = last["norm"] / true
        if near(ratio, 1.0, 1e-4):
            continue
        n, g, local = count["global"] / world, count["global"], count["local"]
        named = {
            n: _(
                "the gradient clipping saw was {ratio:.3g} times too large, count / "
                "world_size = {g} / {world}: it was not scaled. Multiply the gradients by "
                "world_size / count before clipping."
            ).format(ratio=ratio, g=g, world=world),
            n * n: _(
                "the gradient clipping saw was {ratio:.3g} times too large, (count / "
                "world_size)² with count = {g}: the factor is inverted. Multiply by "
                "world_size / count, not count / world_size."
            ).format(ratio=ratio, g=g),
            n / k: _(
                "the gradient clipping saw was {ratio:.3g} times too large, count / "
                "(world_size * k) with count = {g}: {hint}"
            ).format(ratio=ratio, g=g, hint=_hint(WINDOW_VARIANTS["divided by k"])),
            g / local: _(
                "the gradient clipping saw was {ratio:.3g} times too large, the "
                "window's count over this rank's ({g} / {local}): {hint}"
            ).format(ratio=ratio, g=g, local=local, hint=_hint(WINDOW_VARIANTS["local count"])),
        }
        if world > 1:
            named[world] = _(
                "the gradient clipping saw was {world} (world_size) times too large: DDP "
                "averages the ranks' gradients, so multiply by world_size once: "
                "world_size / count."
            ).format(world=world)
            named[1 / world] = _(
                "the gradient clipping saw was {world} (world_size) times too small: {hint}"
            ).format(world=world, hint=_hint(WINDOW_VARIANTS["no world factor"]))
        for value, hint in named.items():
            if near(ratio, value):
                return hint
        return None  # some other mistake: named by the weights, if it can be
    return None


@checker
def check_scale_after_window(scale_after_window) -> CheckResult:
    """Exercise 08.2: one rank's window, scaled after accumulating. Run as rank 0 of 1 and
    of 2 (the other rank emulated), two windows each, against one process."""
    if is_unanswered(scale_after_window):
        return wrong(NOT_ANSWERED)
    function = as_function(scale_after_window, WINDOW_CALL)
    k = 3
    for world in (1, 2):
        try:
            weights, report = _run_window(function, world)
        except CheckStop as stop:
            return wrong(stop.hint)
        if any(n != k for n in report["backwards"]):
            return wrong(
                _(
                    "the window ran {backwards} backward passes for windows of {k} "
                    "micro-batches: backward each micro-batch's token-loss sum once."
                ).format(backwards=report["backwards"], k=k)
            )
        if any(n != 1 for n in report["steps"]):
            return wrong(
                _(
                    "optimizer.step() ran {steps} times per window: step once, after "
                    "scaling and clipping."
                ).format(steps=report["steps"])
            )
        if any(f < b for f, b in zip(report["forwards"], report["backwards"], strict=True)):
            return wrong(_as_rank(world, translate(BYPASSED_DDP)))
        counts = _counts(world)
        hint = _check_all_reduce(report, counts, k)
        if hint:
            return wrong(hint)
        if close(weights, _reference(world)[0]):
            synced = report["synced"]
            continue
        if world > 1 and not any(report["synced"]):
            return wrong(_as_rank(world, translate(NEVER_SYNCED)))
        hint = _diagnose_by_norm(world, report, counts, k)
        if hint:
            return wrong(_as_rank(world, hint))
        for variant, hint in WINDOW_VARIANTS.items():
            if close(weights, _reference(world, variant)[0]):
                return wrong(_as_rank(world, _hint(hint)))
        return wrong(
            _(
                "as rank 0 of {world}, the weights after two windows differ from one process "
                "on all ranks' micro-batches: backward each token-loss sum, all_reduce the "
                "count, multiply the gradients by world_size / count, clip to {max_norm:g}, "
                "step."
            ).format(world=world, max_norm=MAX_NORM)
        )
    message = _(
        "the same weights as one process, on 1 rank and on 2 with uneven token counts: sums "
        "backwarded, the count all-reduced at the end, the gradients scaled once."
    )
    if all(n == 1 for n in synced):
        message += _(
            " (With no_sync() on all but the last micro-batch, your window all-reduced the "
            "gradients once: the same gradient, fewer all-reduces.)"
        )
    return correct(message)


def _as_rank(world: int, hint: str) -> str:
    return _("as rank 0 of {world}: {hint}").format(world=world, hint=hint)
