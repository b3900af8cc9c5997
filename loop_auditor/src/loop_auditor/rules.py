"""The rules: each turns what the auditor observed into a :class:`Finding`, or None.

They take plain numbers and lists, so each can be tested alone; :mod:`loop_auditor.auditor`
gathers the observations and calls them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from loop_auditor.findings import Finding, allow_hint


def _list(sizes: Sequence[int]) -> str:
    return ", ".join(map(str, sizes[:12])) + (", ..." if len(sizes) > 12 else "")


def _at(step: int | None) -> str:
    return f"step {step}" if step is not None else "the end of the loop"


def _window(k: int) -> str:
    """The accumulation count, named only when there is accumulation (then it was given)."""
    return f" (accumulation_steps={k})" if k > 1 else ""


def missing_zero_grad(
    step: int, stale: int, total: int, k: int, closure: str = ""
) -> Finding | None:
    """``stale`` of ``total`` parameters still held gradients an earlier step had used.
    ``closure``: the optimizer's class when a call of its step's closure used them."""
    if not stale:
        return None
    if closure:
        return Finding(
            "missing-zero-grad",
            f"in step {step} a call of the closure used .grad that still held gradients an "
            f"earlier call or step() had already used ({stale} of {total} parameters), so "
            f"they were added to this call's. {closure} may call the closure several times in "
            f"one step(): call optimizer.zero_grad() inside the closure, before "
            f"loss.backward().",
            step,
        )
    return Finding(
        "missing-zero-grad",
        f"step {step} used .grad that still held gradients an earlier step() had already used "
        f"({stale} of {total} parameters), so it applied old windows again{_window(k)}. Call "
        f"optimizer.zero_grad() after every step().",
        step,
    )


def reset_after_last_backward(step: int, all_none: bool, closure: str = "") -> Finding:
    """Every gradient the window's backward passes wrote was reset before the step (or,
    with ``closure``, before the optimizer used what its closure returned)."""
    effect = (
        "every .grad was None, so step() skipped every parameter"
        if all_none
        else "every .grad was zeros: plain SGD stays put, but weight decay (and momentum or "
        "Adam state from earlier steps) still move the parameters"
    )
    if closure:
        return Finding(
            "zero-grad-before-step",
            f"the gradients were reset after the closure's backward() and before step {step} "
            f"used them: {effect}, and that backward() was wasted. Call optimizer.zero_grad() "
            f"at the start of the closure, before loss.backward().",
            step,
        )
    return Finding(
        "zero-grad-before-step",
        f"the gradients were reset after the last backward() and before step {step}: "
        f"{effect}, and that backward() was wasted. Zero the gradients after step() (or "
        f"before the next backward()), never between backward() and step().",
        step,
    )


def discarded_passes(
    step: int | None, lost: Sequence[int], kept: Sequence[int], k: int, closure: str = ""
) -> Finding | None:
    """Backward passes (ids in order) whose gradients were reset before a step used them,
    while ``kept`` survived to the step. All lost before all kept, with a full window kept,
    is a short window zeroed away (``leftover-gradients``); otherwise the reset sat inside
    the window (``zero-grad-before-step``); with ``closure``, inside the closure."""
    if not lost:
        return None
    n = len(lost)
    if k > 1 and kept and max(lost) < min(kept) and len(kept) >= k:
        return Finding(
            "leftover-gradients",
            f"the gradients of {n} backward pass(es) were reset before any step() used them, "
            f"and then a full window followed: a short last window (accumulation_steps={k}) "
            f"was zeroed away, for example by a zero_grad() at the start of the next epoch. "
            f"Step once more on the short window, scaled by its real size.",
            step,
        )
    if closure:
        where, fix = "inside the closure, between its backward() calls", "at its start"
    elif k > 1:
        where = f"inside the accumulation window{_window(k)} or between losses"
        fix = "per window, right after step()"
    else:
        where, fix = "between the losses of one step", "per step, right after step()"
    return Finding(
        "zero-grad-before-step",
        f"the gradients of {n} backward pass(es) were reset before {_at(step)} could use "
        f"them: a zero_grad() {where}, so that step saw only the last "
        f"{len(kept) if kept else 'none'} of {n + len(kept)}. Zero the gradients once {fix}."
        + allow_hint("zero-grad-before-step"),
        step,
    )


def step_without_grad(
    step: int, all_none: bool, reused: bool = False, closure: str = ""
) -> Finding:
    """A step with no backward pass since the last one; ``reused`` when .grad still held the
    gradients the last step had used; ``closure`` when a call of its closure ran none."""
    if reused:
        effect = (
            "it applied the gradients the previous step had already used a second time (a "
            "step() called twice, or a backward() that never ran)"
        )
    elif all_none:
        effect = "every .grad was None, so nothing was updated"
    else:
        effect = "every .grad was zeros, yet weight decay and momentum still moved the parameters"
    if closure:
        return Finding(
            "step-without-grad",
            f"in step {step} a call of the closure ran no backward(): {effect}. Call "
            f"loss.backward() inside the closure, before it returns the loss.",
            step,
        )
    return Finding(
        "step-without-grad",
        f"step {step} ran with no backward() since the last step: {effect}. Call "
        f"loss.backward() before each optimizer.step(), on a loss that depends on these "
        f"parameters, and step once per window.",
        step,
    )


def cross_network_leak(
    step: int, passes: int, other: str, reached_first: bool | None = None
) -> Finding:
    """This optimizer's step used ``passes`` backward pass(es) that ``other`` had already
    stepped on, together with passes that came after that step. ``reached_first``: whether
    those passes reached this optimizer's parameters before ``other``'s (this network lies
    between that loss and the other network: G's loss through D), or after them (the other
    network's loss flowed back through this one's output: D's loss into G); None: unknown."""
    if reached_first:
        return Finding(
            "cross-network-leak",
            f"step {step} used the gradients of {passes} backward pass(es) that {other} had "
            f"already stepped on: that loss ran through this network on its way to the other "
            f"network, and what it left in this network's .grad was added to this network's "
            f"own loss (a GAN generator's loss left in the discriminator's .grad). Zero this "
            f"optimizer's gradients right before its own first backward(), not right after its "
            f"step(): that loss's backward() comes in between. Or requires_grad_(False) on "
            f"this network while that loss backpropagates.",
            step,
        )
    if reached_first is False:
        return Finding(
            "cross-network-leak",
            f"step {step} used the gradients of {passes} backward pass(es) that {other} had "
            f"already stepped on: that loss flowed back through this network's output into "
            f"its parameters and was added to its own loss (a GAN discriminator's loss reaching "
            f"the generator through G(z)). Detach this network's output where that loss uses "
            f"it (D(fake.detach())), or zero this optimizer's gradients right before its own "
            f"backward().",
            step,
        )
    return Finding(
        "cross-network-leak",
        f"step {step} used the gradients of {passes} backward pass(es) that also reached "
        f"the parameters of {other}, which had already stepped on them: the loss of one "
        f"network flowed "
        f"into this network's parameters and was added to its own loss (a GAN whose "
        f"discriminator loss reaches the generator through G(z), or G's loss left in D's "
        f".grad). Cut the path: D(fake.detach()) for the discriminator's loss, or "
        f"requires_grad_(False) on the network that must not learn from this loss; or zero "
        f"this optimizer's gradients before its own backward().",
        step,
    )


def leftover_at_end(passes: int, steps: int, k: int) -> Finding:
    return Finding(
        "leftover-gradients",
        f"the loop ended with {passes} backward pass(es) after the last step (step {steps}) "
        f"whose gradients no step() used"
        + (
            f": a short tail window (accumulation_steps={k}) was dropped. After the loop, "
            f"step once more on the tail, scaled by its real size."
            if k > 1
            else ". Call optimizer.step() after the last backward()."
        ),
        None,
    )


def window_length(
    windows: Sequence[tuple[int, int]], k: int, declared: bool = True
) -> Finding | None:
    """``windows``: (step, backward passes it used), in order. A full window has ``k``
    passes when ``k`` was declared; otherwise as many as most windows have (a GAN
    discriminator's real and fake losses: 2). Only a short window right after a full one is
    allowed: the tail of an epoch."""
    if len(windows) < 2:
        return None
    sizes = [n for _, n in windows]
    counts = Counter(sizes)
    common = max(counts, key=lambda n: (counts[n], n))
    full = k if declared else common
    several = (
        f" If each micro-batch calls backward() {common // k} times (one per loss), declare "
        f"the backward passes per window: accumulation_steps={common}."
        if common > k and common % k == 0
        else ""
    )
    if full not in counts:
        every = "after every micro-batch" if k == 1 else f"once every {k} micro-batches"
        fix = (
            f"declare the accumulation your loop has (accumulation_steps={common})"
            if len(counts) == 1
            else "fix the counter that decides when to step"
        )
        return Finding(
            "window-length",
            f"the optimizer steps used windows of {_list(sizes)} backward passes, never a full "
            f"window of accumulation_steps={k}: the loop steps on another schedule than "
            f"declared. Step {every}, or {fix}.{several}",
            windows[0][0],
        )
    for i, (step, n) in enumerate(windows):
        if n > full:
            why = (
                f"step {step} used {n}, more than a full window: the backward passes of a "
                f"window that was never stepped ran into the next one (an epoch's short tail "
                f"left in .grad, or a counter that skipped a step). Step on the short window "
                f"at the end of each epoch, scaled by its size, or zero it on purpose"
            )
        elif n < full and i == 0:
            why = (
                f"the first window had {n} and later ones {full}: an off-by-one counter "
                f"(`if i % k == 0: step()` with i counting from 0) steps after the first "
                f"micro-batch. Step when (i + 1) % k == 0"
            )
        elif n < full and sizes[i - 1] != full:
            why = (
                f"step {step} used {n} right after another short window: only the last "
                f"window of an epoch may be short, so the counter that decides when to step "
                f"is wrong (reset inside the epoch, or counting something else). Step every "
                f"{full} backward passes"
            )
        else:
            continue
        given = f"accumulation_steps={k}" if declared else "no accumulation_steps declared"
        return Finding(
            "window-length",
            f"the optimizer steps used windows of {_list(sizes)} backward passes, with "
            f"{given}: {why}.{several}",
            step,
        )
    return None


def scheduler_per_micro_batch(
    step: int | None, extra: int, scheduler: str = "scheduler.step()"
) -> Finding | None:
    """The scheduler(s) stepped ``extra`` times between two optimizer steps; ``scheduler``
    names their step() calls."""
    if extra <= 1:
        return None
    before = f"step {step}" if step else "the end"
    return Finding(
        "scheduler-per-micro-batch",
        f"{scheduler} ran {extra} times between two optimizer steps (before {before}), so the "
        f"learning rate moved {extra} times for one optimizer step. Step it where its "
        f"schedule counts: once per epoch, after the epoch's loop, if it is defined in epochs "
        f"(StepLR(step_size=1) stepped each epoch, CosineAnnealingLR(T_max=epochs)); once, "
        f"right after each optimizer.step(), if it is defined in optimizer steps (warmup, "
        f"OneCycleLR).",
        step,
    )


def clip_per_micro_batch(step: int) -> Finding:
    return Finding(
        "clip-per-micro-batch",
        f"gradients were clipped and then another backward() added to them before step "
        f"{step}: each clip shrinks the partial sum so far, so the earlier micro-batches count "
        f"less than the later ones and the window's gradient points elsewhere than the "
        f"clipped full-window gradient. Clip once, after the window's last backward(), just "
        f"before step().",
        step,
    )


def unscale_after_clip(step: int, function: str, scale: float) -> Finding:
    return Finding(
        "unscale-after-clip",
        f"{function} ran before step {step} on gradients still multiplied by the GradScaler's "
        f"scale ({scale:g}), so the threshold meant nothing. Call scaler.unscale_(optimizer) "
        f"once per window, then clip, then scaler.step(optimizer).",
        step,
    )


def graph_kept_alive(step: int | None, old_steps: Sequence[int]) -> Finding | None:
    """Graphs backpropagated at ``old_steps`` (at least three different ones) still alive."""
    if len(old_steps) < 3:
        return None
    where = f"at step {step}" if step else "when the loop ended"
    return Finding(
        "graph-kept-alive",
        f"the graphs of losses from {len(old_steps)} earlier steps (the first before step "
        f"{old_steps[0] + 1}) were still alive {where}: something keeps every iteration's "
        f"loss (for example `total_loss += loss`), so the graphs pile up. Keep loss.item() "
        f"(or loss.detach()) for logging instead.",
        step,
    )


def params_not_in_optimizer(
    step: int | None, names: Sequence[str], model_known: bool = True
) -> Finding | None:
    """Parameters that received gradients outside the optimizer's param groups.
    ``model_known`` False: no optimizer trains the rest of their model (or no model holds
    them), so the message names no model and no optimizer."""
    if not names:
        return None
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    if not model_known:
        return Finding(
            "params-not-in-optimizer",
            f"{len(names)} parameter(s) received gradients in backward() but belong to no "
            f"param group of any optimizer, so no step() updates them: {shown}. Give them to "
            f"the optimizer that trains their model (build it after the model is complete, "
            f"from model.parameters(), or add_param_group() for new layers), or "
            f"requires_grad_(False) for frozen ones.",
            step,
        )
    return Finding(
        "params-not-in-optimizer",
        f"{len(names)} parameter(s) of the model received gradients but belong to no param "
        f"group of the optimizer, so step() never updates them: {shown}. Build the optimizer "
        f"after the model is complete (from model.parameters()), add_param_group() for new "
        f"layers, or requires_grad_(False) for frozen ones.",
        step,
    )
