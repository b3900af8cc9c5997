"""The rules: each turns what the auditor observed into a :class:`Finding`, or None.

They take plain numbers and lists, so each can be tested alone; :mod:`loop_auditor.auditor`
gathers the observations and calls them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from loop_auditor.findings import Finding, allow_hint
from loop_auditor.language import _


def _list(sizes: Sequence[int]) -> str:
    return ", ".join(map(str, sizes[:12])) + (", ..." if len(sizes) > 12 else "")


def _at(step: int | None) -> str:
    return _("step {step}").format(step=step) if step is not None else _("the end of the loop")


def _window(k: int) -> str:
    """The accumulation count, named only when there is accumulation (then it was given)."""
    return _(" (accumulation_steps={k})").format(k=k) if k > 1 else ""


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
            _(
                "in step {step} a call of the closure used .grad that still held gradients an "
                "earlier call or step() had already used ({stale} of {total} parameters), so "
                "they were added to this call's. {closure} may call the closure several times "
                "in one step(): call optimizer.zero_grad() inside the closure, before "
                "loss.backward()."
            ).format(step=step, stale=stale, total=total, closure=closure),
            step,
        )
    return Finding(
        "missing-zero-grad",
        _(
            "step {step} used .grad that still held gradients an earlier step() had already "
            "used ({stale} of {total} parameters), so it applied old windows again{window}. "
            "Call optimizer.zero_grad() after every step()."
        ).format(step=step, stale=stale, total=total, window=_window(k)),
        step,
    )


def reset_after_last_backward(step: int, all_none: bool, closure: str = "") -> Finding:
    """Every gradient the window's backward passes wrote was reset before the step (or,
    with ``closure``, before the optimizer used what its closure returned)."""
    effect = (
        _("every .grad was None, so step() skipped every parameter")
        if all_none
        else _(
            "every .grad was zeros: plain SGD stays put, but weight decay (and momentum or "
            "Adam state from earlier steps) still move the parameters"
        )
    )
    if closure:
        return Finding(
            "zero-grad-before-step",
            _(
                "the gradients were reset after the closure's backward() and before step "
                "{step} used them: {effect}, and that backward() was wasted. Call "
                "optimizer.zero_grad() at the start of the closure, before loss.backward()."
            ).format(step=step, effect=effect),
            step,
        )
    return Finding(
        "zero-grad-before-step",
        _(
            "the gradients were reset after the last backward() and before step {step}: "
            "{effect}, and that backward() was wasted. Zero the gradients after step() (or "
            "before the next backward()), never between backward() and step()."
        ).format(step=step, effect=effect),
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
            _(
                "the gradients of {n} backward pass(es) were reset before any step() used "
                "them, and then a full window followed: a short last window "
                "(accumulation_steps={k}) was zeroed away, for example by a zero_grad() at the "
                "start of the next epoch. Step once more on the short window, scaled by its "
                "real size."
            ).format(n=n, k=k),
            step,
        )
    if closure:
        where, fix = _("inside the closure, between its backward() calls"), _("at its start")
    elif k > 1:
        where = _("inside the accumulation window{window} or between losses").format(
            window=_window(k)
        )
        fix = _("per window, right after step()")
    else:
        where, fix = _("between the losses of one step"), _("per step, right after step()")
    return Finding(
        "zero-grad-before-step",
        _(
            "the gradients of {n} backward pass(es) were reset before {at} could use them: a "
            "zero_grad() {where}, so that step saw only the last {kept} of {total}. Zero the "
            "gradients once {fix}."
        ).format(
            n=n,
            at=_at(step),
            where=where,
            kept=len(kept) if kept else _("none"),
            total=n + len(kept),
            fix=fix,
        )
        + allow_hint("zero-grad-before-step"),
        step,
    )


def step_without_grad(
    step: int, all_none: bool, reused: bool = False, closure: str = ""
) -> Finding:
    """A step with no backward pass since the last one; ``reused`` when .grad still held the
    gradients the last step had used; ``closure`` when a call of its closure ran none."""
    if reused:
        effect = _(
            "it applied the gradients the previous step had already used a second time (a "
            "step() called twice, or a backward() that never ran)"
        )
    elif all_none:
        effect = _("every .grad was None, so nothing was updated")
    else:
        effect = _(
            "every .grad was zeros, yet weight decay and momentum still moved the parameters"
        )
    if closure:
        return Finding(
            "step-without-grad",
            _(
                "in step {step} a call of the closure ran no backward(): {effect}. Call "
                "loss.backward() inside the closure, before it returns the loss."
            ).format(step=step, effect=effect),
            step,
        )
    return Finding(
        "step-without-grad",
        _(
            "step {step} ran with no backward() since the last step: {effect}. Call "
            "loss.backward() before each optimizer.step(), on a loss that depends on these "
            "parameters, and step once per window."
        ).format(step=step, effect=effect),
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
            _(
                "step {step} used the gradients of {passes} backward pass(es) that {other} had "
                "already stepped on: that loss ran through this network on its way to the "
                "other network, and the gradient it left in this network's .grad was added to "
                "that of this network's own loss (a GAN generator's loss leaving its gradient "
                "in the discriminator's .grad). Zero this optimizer's gradients right before "
                "this network's own first backward(), not right after its step(): that loss's "
                "backward() comes in between. Or requires_grad_(False) on this network while "
                "that loss backpropagates."
            ).format(step=step, passes=passes, other=other),
            step,
        )
    if reached_first is False:
        return Finding(
            "cross-network-leak",
            _(
                "step {step} used the gradients of {passes} backward pass(es) that {other} had "
                "already stepped on: that loss flowed back through this network's output into "
                "its parameters, and its gradient was added to that of this network's own loss "
                "(a GAN discriminator's loss reaching the generator through G(z)). Detach this "
                "network's output where that loss uses it (D(fake.detach())), or zero this "
                "optimizer's gradients right before this network's own backward()."
            ).format(step=step, passes=passes, other=other),
            step,
        )
    return Finding(
        "cross-network-leak",
        _(
            "step {step} used the gradients of {passes} backward pass(es) that also reached "
            "the parameters of {other}, which had already stepped on them: the loss of one "
            "network flowed into this network's parameters, and its gradient was added to that "
            "of this network's own loss (a GAN whose discriminator loss reaches the generator "
            "through G(z), or G's loss leaving its gradient in D's .grad). Cut the path: "
            "D(fake.detach()) for the discriminator's loss, or requires_grad_(False) on the "
            "network that must not learn from this loss; or zero this optimizer's gradients "
            "before this network's own backward()."
        ).format(step=step, passes=passes, other=other),
        step,
    )


def leftover_at_end(passes: int, steps: int, k: int) -> Finding:
    return Finding(
        "leftover-gradients",
        (
            _(
                "the loop ended with {passes} backward pass(es) after the last step (step "
                "{steps}) whose gradients no step() used: a short tail window "
                "(accumulation_steps={k}) was dropped. After the loop, step once more on the "
                "tail, scaled by its real size."
            )
            if k > 1
            else _(
                "the loop ended with {passes} backward pass(es) after the last step (step "
                "{steps}) whose gradients no step() used. Call optimizer.step() after the last "
                "backward()."
            )
        ).format(passes=passes, steps=steps, k=k),
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
        _(
            " If each micro-batch calls backward() {per_batch} times (one per loss), declare "
            "the backward passes per window: accumulation_steps={common}."
        ).format(per_batch=common // k, common=common)
        if common > k and common % k == 0
        else ""
    )
    if full not in counts:
        every = (
            _("after every micro-batch")
            if k == 1
            else _("once every {k} micro-batches").format(k=k)
        )
        fix = (
            _("declare the accumulation your loop has (accumulation_steps={common})").format(
                common=common
            )
            if len(counts) == 1
            else _("fix the counter that decides when to step")
        )
        return Finding(
            "window-length",
            _(
                "the optimizer steps used windows of {sizes} backward passes, never a full "
                "window of accumulation_steps={k}: the loop steps on another schedule than "
                "declared. Step {every}, or {fix}.{several}"
            ).format(sizes=_list(sizes), k=k, every=every, fix=fix, several=several),
            windows[0][0],
        )
    for i, (step, n) in enumerate(windows):
        if n > full:
            why = _(
                "step {step} used {n}, more than a full window: the backward passes of a "
                "window that was never stepped ran into the next one (an epoch's short tail "
                "left in .grad, or a counter that skipped a step). Step on the short window "
                "at the end of each epoch, scaled by its size, or zero it on purpose"
            ).format(step=step, n=n)
        elif n < full and i == 0:
            why = _(
                "the first window had {n} and later ones {full}: an off-by-one counter "
                "(`if i % k == 0: step()` with i counting from 0) steps after the first "
                "micro-batch. Step when (i + 1) % k == 0"
            ).format(n=n, full=full)
        elif n < full and sizes[i - 1] != full:
            why = _(
                "step {step} used {n} right after another short window: only the last "
                "window of an epoch may be short, so the counter that decides when to step "
                "is wrong (reset inside the epoch, or counting something else). Step every "
                "{full} backward passes"
            ).format(step=step, n=n, full=full)
        else:
            continue
        given = f"accumulation_steps={k}" if declared else _("no accumulation_steps declared")
        return Finding(
            "window-length",
            _(
                "the optimizer steps used windows of {sizes} backward passes, with {given}: "
                "{why}.{several}"
            ).format(sizes=_list(sizes), given=given, why=why, several=several),
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
    before = _("step {step}").format(step=step) if step else _("the end")
    return Finding(
        "scheduler-per-micro-batch",
        _(
            "{scheduler} ran {extra} times between two optimizer steps (before {before}), so "
            "the learning rate moved {extra} times for one optimizer step. Step it where its "
            "schedule counts: once per epoch, after the epoch's loop, if it is defined in "
            "epochs (StepLR(step_size=1) stepped each epoch, CosineAnnealingLR(T_max=epochs)); "
            "once, right after each optimizer.step(), if it is defined in optimizer steps "
            "(warmup, OneCycleLR)."
        ).format(scheduler=scheduler, extra=extra, before=before),
        step,
    )


def clip_per_micro_batch(step: int) -> Finding:
    return Finding(
        "clip-per-micro-batch",
        _(
            "gradients were clipped and then another backward() added to them before step "
            "{step}: each clip shrinks the partial sum so far, so the earlier micro-batches "
            "count less than the later ones and the window's gradient points elsewhere than "
            "the clipped full-window gradient. Clip once, after the window's last backward(), "
            "just before step()."
        ).format(step=step),
        step,
    )


def unscale_after_clip(step: int, function: str, scale: float) -> Finding:
    return Finding(
        "unscale-after-clip",
        _(
            "{function} ran before step {step} on gradients still multiplied by the "
            "GradScaler's scale ({scale}), so the threshold meant nothing. Call "
            "scaler.unscale_(optimizer) once per window, then clip, then "
            "scaler.step(optimizer)."
        ).format(function=function, step=step, scale=f"{scale:g}"),
        step,
    )


def graph_kept_alive(step: int | None, old_steps: Sequence[int]) -> Finding | None:
    """Graphs backpropagated at ``old_steps`` (at least three different ones) still alive."""
    if len(old_steps) < 3:
        return None
    where = _("at step {step}").format(step=step) if step else _("when the loop ended")
    return Finding(
        "graph-kept-alive",
        _(
            "the graphs of losses from {count} earlier steps (the first before step {first}) "
            "were still alive {where}: something keeps every iteration's loss (for example "
            "`total_loss += loss`), so the graphs pile up. Keep loss.item() (or "
            "loss.detach()) for logging instead."
        ).format(count=len(old_steps), first=old_steps[0] + 1, where=where),
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
            _(
                "{count} parameter(s) received gradients in backward() but belong to no "
                "param group of any optimizer, so no step() updates them: {shown}. Give them "
                "to the optimizer that trains their model (build it after the model is "
                "complete, from model.parameters(), or add_param_group() for new layers), or "
                "requires_grad_(False) for frozen ones."
            ).format(count=len(names), shown=shown),
            step,
        )
    return Finding(
        "params-not-in-optimizer",
        _(
            "{count} parameter(s) of the model received gradients but belong to no param "
            "group of the optimizer, so step() never updates them: {shown}. Build the "
            "optimizer after the model is complete (from model.parameters()), "
            "add_param_group() for new layers, or requires_grad_(False) for frozen ones."
        ).format(count=len(names), shown=shown),
        step,
    )
