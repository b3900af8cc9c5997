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
    """One call of a traced sequence: ``"backward"`` (of ``loss(w)``), ``"step"`` or
    ``"zero_grad"``."""

    name: str
    loss: Callable[[torch.Tensor], torch.Tensor] | None = None

    def __post_init__(self):
        if self.name not in ("backward", "step", "zero_grad"):
            raise ValueError(
                _("a call is backward, step or zero_grad, got {name!r}").format(name=self.name)
            )
        if (self.name == "backward") != (self.loss is not None):
            raise ValueError(_("a backward call needs its loss, and only a backward call has one"))


def run_trace(start: float, optimizer_kind: type, calls: Sequence[Call], **settings) -> GradLog:
    """Run ``calls`` on a scalar parameter that starts at ``start``, with
    ``optimizer_kind([w], **settings)``, and return the :class:`GradLog` of the run."""
    w = torch.nn.Parameter(torch.tensor(float(start)))
    optimizer = optimizer_kind([w], **settings)
    with GradLog(w, optimizer) as log:
        for call in calls:
            if call.name == "backward":
                call.loss(w).backward()
            elif call.name == "step":
                optimizer.step()
            else:
                optimizer.zero_grad()
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


def _show(value: float | None) -> str:
    return "None" if value is None else f"{value:.4g}"


def _hint(call: str, column: str, given, before: TraceRow, after: TraceRow, lr, beta) -> str:
    """Why row ``after`` holds what it holds in ``column``, asked about the mistake that gives
    ``given``."""
    w, grad, state = after.weight, after.grad, after.state
    if call == "backward":
        added = after.grad - (before.grad or 0.0)
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
    **settings,
) -> Callable[[object], CheckResult]:
    """A checker for the trace table of ``calls`` (see :func:`run_trace`). The checker keeps
    the real run's rows as ``expected_rows`` (one tuple per call) and its ``columns``."""
    log = run_trace(start, optimizer_kind, calls, **settings)
    columns = [name for name, values in log.columns()]
    lr, beta = settings.get("lr"), settings.get("momentum", 0)
    expected = [(row.weight, row.grad, row.state)[: len(columns)] for row in log.rows[1:]]
    example = "(" + ", ".join(columns) + ")"

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
                        _hint(call, column, g, log.rows[number - 1], log.rows[number], lr, beta)
                    )
                    return wrong(
                        _("row {row} ({call}), {column}: {given} is not it. {hint}").format(
                            row=number,
                            call=CALL_LABELS[call],
                            column=column,
                            given=_show(g),
                            hint=hint[0].upper() + hint[1:],
                        )
                    )
        return correct(
            _(
                "every row is right: backward() adds into .grad, step() reads it and moves w, "
                "zero_grad() sets it to None, and nothing else touches them."
            )
        )

    check.__doc__ = doc
    check.expected_rows = expected
    check.columns = columns
    return check
