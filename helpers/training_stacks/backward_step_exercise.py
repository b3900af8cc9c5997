"""Exercise 08.4 of notebook 08: repair a loop that steps the optimizer inside backward
(optimizer-in-backward), so that it accumulates each window, clips and steps once."""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook

from helpers.checks import (
    NOT_ANSWERED,
    CheckResult,
    as_function,
    call_learner,
    checker,
    correct,
    is_unanswered,
    wrong,
)
from helpers.models import flat_weights
from helpers.training_stacks.window_records import close, near, watch_clipping
from helpers.translation import N_, _, translate

REPAIR_CALL = "train(model, micro_batches, k)"
REPAIR_LR = 0.5
REPAIR_K = 3


def repair_data():
    """7 micro-batches; with :func:`_repair_model` and k = 3 the windows' gradients have norms
    of about 0.76 (not clipped at 1.0), 1.76 and 1.63 (clipped): a loss scaled by any factor
    changes the first step, clipping or no clipping (or to another norm) the second; the
    second window's partial sums pass 1.0 too, so clipping inside the loop shows."""
    from helpers.data import make_teacher_batches

    return make_teacher_batches(n_batches=7, batch_size=4, features=4, seed=2)


def _repair_model():
    from helpers.models import make_mlp

    return make_mlp((4, 8, 1), seed=3)


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
    return flat_weights(model)


# Marked with N_: translated where they are shown.
REPAIR_VARIANTS = {
    "not divided": N_(
        "the losses were not divided by len(window): the window's gradient is "
        "then the sum of its micro-batches' gradients, len(window) times their mean. Backward "
        "loss / len(window), as the loop does."
    ),
    "divided by k": N_(
        "the short last window (1 micro-batch) was divided by k = 3: divide by "
        "len(window), as the loop does."
    ),
    "no clip": N_("the window's gradient was not clipped to 1.0 before the step."),
    "clip 0.5": N_("the window's gradient was clipped to 0.5: clip it to 1.0, as the loop does."),
    "clip in the loop": N_(
        "the gradient was clipped after each micro-batch's backward, inside "
        "the loop: clip once per window, after its last backward, just before the step."
    ),
    "zero_grad in the loop": N_(
        "zero_grad() ran before each micro-batch's backward, inside the "
        "loop, so only the window's last gradient was left: zero once per window, before the "
        "micro-batch loop."
    ),
    "no zero_grad": N_(
        "the gradients were not zeroed between windows: with one optimizer for "
        "the model, call optimizer.zero_grad() at the start of each window."
    ),
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
        return translate(REPAIR_VARIANTS["clip in the loop"])
    for window in by_window.values():
        if not near(window[-1]["max_norm"], 1.0, 1e-6):
            return _(
                "the window's gradient was clipped to {max_norm:g}: clip it to "
                "1.0, as the loop does."
            ).format(max_norm=window[-1]["max_norm"])
    first = by_window.get(0, [{}])[-1].get("grad")
    right = _repair_first_gradient()
    if first is None or first.shape != right.shape:
        return None
    ratio = float(first.norm() / right.norm())
    parallel = float(F.cosine_similarity(first.double(), right.double(), dim=0)) > 1 - 1e-6
    if not parallel or near(ratio, 1.0, 1e-4):
        return None
    if near(ratio, REPAIR_K, 1e-4):
        return translate(REPAIR_VARIANTS["not divided"])
    batch = len(repair_data()[0][1])
    if near(ratio, batch, 1e-4):
        return _(
            "clipping saw a gradient {batch} times the ordinary loop's, the micro-batch size: "
            "the losses were summed over the samples (reduction='sum'?). Backward the mean "
            "loss / len(window), F.mse_loss(model(inputs), targets) / len(window)."
        ).format(batch=batch)
    return _(
        "clipping saw the first window's gradient {ratio:.3g} times the ordinary loop's "
        "(the same direction): the losses were scaled by something other than "
        "1 / len(window). Backward F.mse_loss(model(inputs), targets) / len(window)."
    ).format(ratio=ratio)


def _optimizer_setting_hint(settings: set[tuple]) -> str | None:
    """An optimizer other than the loop's plain SGD (lr 0.5), named: another class, another
    learning rate, momentum or weight decay."""
    for kind, lr, momentum, decay in sorted(settings, key=str):
        if kind != "SGD":
            return _("the loop steps {kind}: it steps plain SGD (lr {lr:g}); keep it.").format(
                kind=kind, lr=REPAIR_LR
            )
        if momentum:
            return _(
                "the optimizer has momentum={momentum:g}: each step then also moves along "
                "the earlier steps' direction. The loop steps plain SGD, "
                "torch.optim.SGD(model.parameters(), lr={lr:g})."
            ).format(momentum=momentum, lr=REPAIR_LR)
        if decay:
            return _(
                "the optimizer has weight_decay={decay:g}: the loop steps plain SGD, "
                "torch.optim.SGD(model.parameters(), lr={lr:g})."
            ).format(decay=decay, lr=REPAIR_LR)
        if not isinstance(lr, torch.Tensor) and not near(float(lr), REPAIR_LR, 1e-9):
            return _(
                "the learning rate is {lr:g}: the loop steps SGD with lr {repair_lr:g}."
            ).format(lr=lr, repair_lr=REPAIR_LR)
    return None


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
    """Exercise 08.4: the loop stepped the optimizer in backward; repaired, it accumulates
    each window, clips and steps once per window. Judged by the weights against the ordinary
    loop; the steps (when they ran: during a backward, after which micro-batch) name the
    mistake."""
    if is_unanswered(train):
        return wrong(NOT_ANSWERED)
    function = as_function(train, REPAIR_CALL)
    model = _repair_model()
    start = flat_weights(model)
    forwards, steps = [0], []

    def count_forward(*args):
        forwards[0] += 1

    def record_step(optimizer, *args):
        group = optimizer.param_groups[0]  # (class, lr, momentum, weight decay)
        settings = (type(optimizer).__name__, group.get("lr"), group.get("momentum", 0))
        steps.append(
            {
                "after": forwards[0],
                "in_backward": _in_backward(),
                "id": id(optimizer),
                "settings": (*settings, group.get("weight_decay", 0)),
            }
        )

    handles = [
        model.register_forward_hook(count_forward),
        register_optimizer_step_pre_hook(record_step),
    ]
    clips = _Stamped(lambda: forwards[0])
    try:
        with watch_clipping(clips):
            call_learner(function, model, repair_data(), REPAIR_K)
    finally:
        for handle in handles:
            handle.remove()
    weights = flat_weights(model)
    if close(weights, _repair_reference()):
        return correct(
            _(
                "one optimizer step per window on the accumulated, clipped gradient: the same "
                "weights as the ordinary loop."
            )
        )
    inside = sum(step["in_backward"] for step in steps)
    if inside:
        return wrong(
            _(
                "the optimizer still steps inside backward ({inside} step() calls ran during "
                "backward passes, for 7 micro-batches): each hook steps as soon as a gradient "
                "arrives, so nothing is accumulated. Remove the hooks that step; one optimizer "
                "over model.parameters(), stepped once per window."
            ).format(inside=inside)
        )
    after = sorted({step["after"] for step in steps})  # per-parameter optimizers: one moment
    windows = [min(end, 7) for end in range(REPAIR_K, 7 + REPAIR_K, REPAIR_K)]
    if len(after) != len(windows) and (steps or close(weights, start)):
        return wrong(
            _(
                "{steps} optimizer steps for 7 micro-batches in windows of 3: step once "
                "per window, the short last one included (3 steps)."
            ).format(steps=len(after))
        )
    if steps and after != windows:
        return wrong(
            _(
                "the optimizer stepped after micro-batches {after}: step at the end of each "
                "window, after micro-batches {windows}."
            ).format(after=after, windows=windows)
        )
    twice = len(steps) - len({(step["after"], step["id"]) for step in steps})
    if twice:
        return wrong(
            _(
                "an optimizer stepped more than once at the end of a window ({twice} extra "
                "step() calls): step each optimizer once per window."
            ).format(twice=twice)
        )
    setting = _optimizer_setting_hint({step["settings"] for step in steps})
    if setting:
        return wrong(setting)
    if close(weights, start):
        return wrong(
            _(
                "the weights did not move: at each step the gradients were gone (None or zero). "
                "A hook that frees .grad, or zero_grad() after the backward calls? Keep the "
                "gradients until the step; zero them at the start of the next window."
            )
        )
    hint = _diagnose_repair_clipping(clips)
    if hint:
        return wrong(hint)
    for variant, hint in REPAIR_VARIANTS.items():
        if close(weights, _repair_reference(variant)):
            return wrong(translate(hint))
    return wrong(
        _(
            "the weights differ from the accumulated windows: zero the gradients, backward each "
            "loss / len(window), clip to 1.0, step SGD (lr 0.5), once per window."
        )
    )
