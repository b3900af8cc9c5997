"""Trace-table exercises: the learner fills in what ``w``, ``w.grad`` and the optimizer's state
hold after each call of a short sequence, and :func:`trace_checker` checks the table row by
row against a real run of that sequence, recorded by :class:`~helpers.grads.GradLog`.

A row is ``(w, w.grad)``, or ``(w, w.grad, buffer)`` where the optimizer keeps a momentum
buffer; a cell is a number, or ``None`` where the tensor is ``None``; ``...`` is a cell not
filled in yet. The first wrong row gets a hint that names its row and call, asks about the
misconception that gives the value written there, then says what the call does.
"""

from __future__ import annotations

import decimal
import numbers
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from helpers.checks import (
    NOT_ANSWERED,
    AnswerKindError,
    CheckResult,
    ask_first,
    checker,
    correct,
    number_matches,
    wrong,
)
from helpers.grads import CALL_LABELS, GradLog, TraceRow
from helpers.translation import _


@dataclass(frozen=True)
class Call:
    """One call of a traced sequence: ``"backward"`` (of ``loss(w)``), ``"step"``,
    ``"zero_grad"``, ``"clip"`` (``clip_grad_norm_`` with ``max_norm``) or ``"unscale_"`` (a
    GradScaler's, in a trace run with ``scale``)."""

    name: str
    loss: Callable[[torch.Tensor], torch.Tensor] | None = None
    max_norm: float | None = None

    def __post_init__(self):
        if self.name not in CALLS:
            raise ValueError(
                _("a call is one of {names}, got {name!r}").format(
                    names=", ".join(CALLS), name=self.name
                )
            )
        if (self.name == "backward") != (self.loss is not None):
            raise ValueError(_("a backward call needs its loss, and only a backward call has one"))
        if (self.name == "clip") != (self.max_norm is not None):
            raise ValueError(_("a clip call needs its max_norm, and only a clip call has one"))


CALLS = ("backward", "step", "zero_grad", "clip", "unscale_")


def run_trace(
    start: float,
    optimizer_kind: type,
    calls: Sequence[Call],
    *,
    scale: float | None = None,
    **settings,
) -> GradLog:
    """Run ``calls`` on a scalar parameter that starts at ``start``, with
    ``optimizer_kind([w], **settings)``, and return the :class:`GradLog` of the run. With
    ``scale``, a GradScaler of that initial scale scales each backward's loss, and a step is
    ``scaler.step(optimizer)`` then ``scaler.update()``."""
    w = torch.nn.Parameter(torch.tensor(float(start)))
    optimizer = optimizer_kind([w], **settings)
    scaler = None if scale is None else torch.amp.GradScaler("cpu", init_scale=scale)
    if scaler is None and any(call.name == "unscale_" for call in calls):
        raise ValueError(_("an unscale_ call needs a trace run with scale=..."))
    with GradLog(w, optimizer) as log:
        for call in calls:
            if call.name == "backward":
                loss = call.loss(w)
                (loss if scaler is None else scaler.scale(loss)).backward()
            elif call.name == "step" and scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            elif call.name == "step":
                optimizer.step()
            elif call.name == "zero_grad":
                optimizer.zero_grad()
            elif call.name == "clip":
                torch.nn.utils.clip_grad_norm_([w], call.max_norm)
                log.record("clip")
            else:
                scaler.unscale_(optimizer)
                log.record("unscale_")
    return log


def _cell(value: object, row: int, column: str) -> float | type(Ellipsis) | None:
    if value is None or value is Ellipsis:
        return value
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, (numbers.Real, decimal.Decimal)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        raise AnswerKindError(
            _(
                "row {row}, {column}: write a number or None, not the string {value!r} (no quotes)"
            ).format(row=row, column=column, value=value)
        )
    raise AnswerKindError(
        _("row {row}, {column}: write a number or None, got {kind}").format(
            row=row, column=column, kind=type(value).__name__
        )
    )


def _same(given: float | None, expected: float | None) -> bool:
    if given is None or expected is None:
        return given is expected
    return number_matches(given, expected, rel_tol=1e-3)


def _sentence(hint: str) -> str:
    """The hint as a sentence after the row's verdict: its first word capitalized, unless it
    is a name such as zero_grad() or w (which keep their case)."""
    if re.match(r"[a-z]{2,}\b(?![_(.])", hint):
        return hint[0].upper() + hint[1:]
    return hint


def _show(value: float | None) -> str:
    return "None" if value is None else f"{value:.4g}"


def _hint(call: Call, column: str, given, before: TraceRow, after: TraceRow, lr, beta, scale):
    """Why row ``after`` holds what it holds in ``column``, asked about the mistake that gives
    ``given``."""
    w, grad, state = after.weight, after.grad, after.state
    if call.name in ("clip", "unscale_") and column != "w.grad":
        return _("does {call} change w? It touches only .grad; w stays {w}.").format(
            call=CALL_LABELS[call.name], w=_show(w)
        )
    if call.name == "clip":
        if abs(before.grad) <= call.max_norm:
            return _(
                "does clip_grad_norm_() change a gradient whose norm is within max_norm? "
                "|{before}| ≤ {max_norm}, so .grad stays {grad}."
            ).format(before=_show(before.grad), max_norm=call.max_norm, grad=_show(grad))
        return _(
            "does clip_grad_norm_() leave a norm above max_norm? It scales .grad down to norm "
            "{max_norm}, keeping its sign: {before} becomes {grad}."
        ).format(max_norm=call.max_norm, before=_show(before.grad), grad=_show(grad))
    if call.name == "unscale_":
        return _(
            "what does unscale_() do to .grad? It divides it by the scale, {scale}: "
            "{before} / {scale} = {grad}."
        ).format(scale=_show(scale), before=_show(before.grad), grad=_show(grad))
    call = call.name
    if call == "backward":
        added = after.grad - (before.grad or 0.0)
        if column == "w.grad" and scale is not None and given is not None:
            if _same(given, (before.grad or 0.0) + added / scale):
                return _(
                    "does the backward of scaler.scale(loss) add the plain gradient? The "
                    "scaled loss is {scale} × loss, so it adds {scale} × {plain} = {added}."
                ).format(scale=_show(scale), plain=_show(added / scale), added=_show(added))
        if column == "w.grad":
            if before.grad is not None and given is not None and _same(given, added):
                return _(
                    "does backward() replace .grad? It adds this call's gradient, {added}, "
                    "to the {before} already there: {grad}."
                ).format(added=_show(added), before=_show(before.grad), grad=_show(grad))
            return _(
                "what does this backward() add? Its gradient at w = {w} is {added}, added to "
                "what .grad held ({before}): {grad}."
            ).format(w=_show(w), added=_show(added), before=_show(before.grad), grad=_show(grad))
        if column == "w":
            return _(
                "does backward() change the weights? It only adds gradients into .grad; "
                "w stays {w}."
            ).format(w=_show(w))
        return _(
            "does backward() touch the optimizer? It writes only .grad; the buffer stays {state}."
        ).format(state=_show(state))
    if call == "zero_grad":
        if column == "w.grad":
            if given == 0:
                return _(
                    "does zero_grad() write zeros? By default (set_to_none=True) it sets "
                    ".grad to None."
                )
            return _(
                "does zero_grad() leave a value in .grad? It sets .grad to None (its default, "
                "set_to_none=True)."
            )
        if column == "w":
            return _("does zero_grad() change w? It touches only .grad; w stays {w}.").format(
                w=_show(w)
            )
        return _(
            "does zero_grad() reset the optimizer? It touches only .grad; the momentum "
            "buffer stays {state}."
        ).format(state=_show(state))
    # step
    if column == "w.grad":
        return _("does step() empty .grad? It only reads it; .grad stays {grad}.").format(
            grad=_show(grad)
        )
    used = state if state is not None else before.grad
    if column == "w":
        if given is not None and _same(given, before.weight + lr * used):
            return _(
                "does step() add the gradient? It subtracts: w - lr × {used} = {before} - "
                "{lr} × {used} = {w}."
            ).format(used=_show(used), before=_show(before.weight), lr=lr, w=_show(w))
        if state is not None and before.state is not None and given is not None:
            if _same(given, before.weight - lr * before.state):
                return _(
                    "does step() move w by the buffer it held before this step? It first "
                    "stores the new buffer, {state}, then moves w by it."
                ).format(state=_show(state))
        if state is not None:
            return _(
                "which direction does step() take with momentum? The buffer's, not .grad's: "
                "{before} - {lr} × {state} = {w}."
            ).format(before=_show(before.weight), lr=lr, state=_show(state), w=_show(w))
        return _(
            "which gradient does step() use? What .grad holds now: w - lr × .grad = "
            "{before} - {lr} × {grad} = {w}."
        ).format(before=_show(before.weight), lr=lr, grad=_show(before.grad), w=_show(w))
    if before.state is None:
        return _(
            "what does the first step() put in the momentum buffer? .grad itself: {state}."
        ).format(state=_show(state))
    if given is not None and _same(given, before.grad):
        return _(
            "does the buffer forget the past? It keeps it: momentum × buffer + .grad = "
            "{beta} × {old} + {grad} = {state}."
        ).format(beta=beta, old=_show(before.state), grad=_show(before.grad), state=_show(state))
    return _(
        "what does step() keep in the buffer? momentum × buffer + .grad = {beta} × {old} + "
        "{grad} = {state}."
    ).format(beta=beta, old=_show(before.state), grad=_show(before.grad), state=_show(state))


def trace_checker(
    start: float,
    optimizer_kind: type,
    calls: Sequence[Call],
    *,
    doc: str,
    scale: float | None = None,
    **settings,
) -> Callable[[object], CheckResult]:
    """A checker for the trace table of ``calls`` (see :func:`run_trace`). The checker keeps
    the real run's rows as ``expected_rows`` (one tuple per call) and its ``columns``."""
    log = run_trace(start, optimizer_kind, calls, scale=scale, **settings)
    columns = [name for name, values in log.columns()]
    lr, beta = settings.get("lr"), settings.get("momentum", 0)
    expected = [(row.weight, row.grad, row.state)[: len(columns)] for row in log.rows[1:]]
    example = "(" + ", ".join(columns) + ")"
    names = {call.name for call in calls}
    if "unscale_" in names:
        why_right = _(
            "every row is right: the backward of a scaled loss adds scale × the gradient, "
            "unscale_() divides .grad by the scale, and step() uses what .grad holds then."
        )
    elif beta:
        why_right = _(
            "every row is right: backward() adds into .grad, step() folds .grad into the "
            "momentum buffer (momentum × buffer + .grad) and moves w by the buffer, and "
            "zero_grad() empties .grad but leaves the buffer."
        )
    elif "clip" in names:
        why_right = _(
            "every row is right: backward() adds into .grad, clip_grad_norm_() scales the sum "
            "down to max_norm, and step() uses what .grad holds then."
        )
    else:
        why_right = _(
            "every row is right: backward() adds into .grad, step() reads it and moves w, "
            "zero_grad() sets it to None, and nothing else touches them."
        )

    @checker
    def check(rows: object) -> CheckResult:
        if rows is Ellipsis:
            return wrong(NOT_ANSWERED)
        if not isinstance(rows, (list, tuple)):
            raise AnswerKindError(
                _("rows must be a list with one row {example} per call, got {kind}").format(
                    example=example, kind="None" if rows is None else type(rows).__name__
                )
            )
        table = []
        for number, row in enumerate(rows, 1):
            if not isinstance(row, (list, tuple)) or len(row) != len(columns):
                size = len(row) if isinstance(row, (list, tuple)) else 1
                raise AnswerKindError(
                    _("row {row} needs {n_columns} values {example}, it has {size}").format(
                        row=number, n_columns=len(columns), example=example, size=size
                    )
                )
            table.append([_cell(v, number, c) for v, c in zip(row, columns, strict=True)])
        if all(cell is Ellipsis for row in table for cell in row):
            return wrong(NOT_ANSWERED)
        if len(table) != len(expected):
            return wrong(
                _(
                    "the code makes {n_calls} calls and your table has {n_rows} rows: write "
                    "one row per call, in order"
                ).format(n_calls=len(expected), n_rows=len(table))
            )
        for number, (given, right) in enumerate(zip(table, expected, strict=True), 1):
            call = log.rows[number].call
            for column, g, r in zip(columns, given, right, strict=True):
                if g is Ellipsis:
                    if number == 1:
                        return wrong(
                            _("row 1 ({call}) still holds ...: fill in every cell").format(
                                call=CALL_LABELS[call]
                            )
                        )
                    return wrong(
                        _(
                            "rows 1 to {done} are right. Row {row} ({call}) still holds ...: "
                            "fill it in"
                        ).format(done=number - 1, row=number, call=CALL_LABELS[call])
                    )
                if not _same(g, r):
                    hint = ask_first(
                        _hint(
                            calls[number - 1],
                            column,
                            g,
                            log.rows[number - 1],
                            log.rows[number],
                            lr,
                            beta,
                            scale,
                        )
                    )
                    return wrong(
                        _("row {row} ({call}), {column}: {given} is not it. {hint}").format(
                            row=number,
                            call=CALL_LABELS[call],
                            column=column,
                            given=_show(g),
                            hint=_sentence(hint),
                        )
                    )
        return correct(why_right)

    check.__doc__ = doc
    check.expected_rows = expected
    check.columns = columns
    return check
