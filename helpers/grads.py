"""Looking at ``.grad``: what each parameter holds, and a log of every change to it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from helpers.report import pad, width
from helpers.translation import N_, _


def grad_state(tensor: torch.Tensor) -> str:
    """``"None"``, ``"zeros"`` or ``"nonzero"``: what ``tensor.grad`` holds."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(_("expected a tensor, got {kind}").format(kind=type(tensor).__name__))
    if tensor.grad is None:
        return "None"
    return "zeros" if not tensor.grad.any() else "nonzero"


def grad_states(parts: Mapping[str, nn.Module | torch.Tensor]) -> dict[str, str]:
    """What each named part holds: one state per tensor, or per module when all its
    parameters agree (else ``"mixed"``)."""
    if not isinstance(parts, Mapping) or not parts:
        raise ValueError(_("parts must be a non-empty dict of {name: module or tensor}"))
    states = {}
    for name, part in parts.items():
        if isinstance(part, nn.Module):
            found = {grad_state(p) for p in part.parameters()}
            if not found:
                raise ValueError(_("{name!r} has no parameters").format(name=name))
            states[name] = found.pop() if len(found) == 1 else "mixed"
        else:
            states[name] = grad_state(part)
    return states


def describe_grad(param: torch.Tensor) -> str:
    """``.grad`` as short text: the values of a small tensor, else its norm."""
    grad = param.grad
    if grad is None:
        return "None"
    if grad.numel() <= 4:
        return "[" + ", ".join(f"{v:.4g}" for v in grad.detach().flatten().tolist()) + "]"
    return f"tensor with norm {grad.detach().norm().item():.4g}"


# How a trace names each call (the axis of plot_trace, the row names of trace exercises).
CALL_LABELS = {
    "start": N_("start"),
    "backward": "backward()",
    "step": "step()",
    "zero_grad": "zero_grad()",
    "clip": "clip_grad_norm_()",
    "unscale_": "scaler.unscale_()",
}


@dataclass(frozen=True)
class TraceRow:
    """What one parameter holds after one call: its value, its ``.grad`` and the optimizer's
    state for it (``None`` where there is none). For a parameter of one element these are its
    values; for a larger one, their norms (:attr:`GradLog.measure` says which)."""

    call: str  # "start", or a call: a key of CALL_LABELS
    weight: float
    grad: float | None
    state: float | None


def _measure(tensor: torch.Tensor | None) -> float | None:
    if tensor is None:
        return None
    tensor = tensor.detach()
    return tensor.item() if tensor.numel() == 1 else tensor.double().norm().item()


class GradLog:
    """Records every change to one parameter's ``.grad`` inside a ``with`` block.

    Each ``backward()`` that accumulates into the parameter is logged by a
    ``register_post_accumulate_grad_hook``; with an ``optimizer``, its ``step()`` (through
    ``register_step_post_hook``) and ``zero_grad()`` calls are logged too. Everything is
    removed on exit. ``log.events`` is a list of lines; ``log.rows`` holds the same calls as
    numbers (:class:`TraceRow`), after a first row ``"start"`` for what the parameter held when
    the block began, and ``log.table()`` prints them as a trace table."""

    def __init__(self, param: torch.Tensor, optimizer: torch.optim.Optimizer | None = None):
        if not isinstance(param, torch.Tensor) or not param.requires_grad or not param.is_leaf:
            raise ValueError(
                _("param must be a leaf tensor that requires grad (a model parameter)")
            )
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                _("optimizer must be a torch.optim.Optimizer, got {optimizer!r}").format(
                    optimizer=optimizer
                )
            )
        if optimizer is not None and not any(
            p is param for group in optimizer.param_groups for p in group["params"]
        ):
            raise ValueError(
                _(
                    "param is not one of the optimizer's parameters: pass a parameter the "
                    "optimizer was built with, such as next(model.parameters())"
                )
            )
        self.param = param
        self.optimizer = optimizer
        self.events: list[str] = []
        self.rows: list[TraceRow] = []
        self._handles = []

    @property
    def measure(self) -> str:
        """``"value"`` for a parameter of one element, ``"norm"`` for a larger one."""
        return "value" if self.param.numel() == 1 else "norm"

    @property
    def state_key(self) -> str | None:
        """The optimizer state the rows hold: ``"momentum_buffer"`` for SGD with momentum,
        ``"exp_avg"`` for Adam and AdamW, else ``None`` (no column for it)."""
        if self.optimizer is None:
            return None
        if isinstance(self.optimizer, torch.optim.SGD):
            momentum = any(group.get("momentum", 0) for group in self.optimizer.param_groups)
            return "momentum_buffer" if momentum else None
        return "exp_avg" if "betas" in self.optimizer.defaults else None

    def _state(self) -> float | None:
        if self.state_key is None:
            return None
        return _measure(self.optimizer.state.get(self.param, {}).get(self.state_key))

    def _log(self, event: str) -> None:
        self.events.append(f"{event:<10} .grad = {describe_grad(self.param)}")
        self.rows.append(
            TraceRow(event, _measure(self.param), _measure(self.param.grad), self._state())
        )

    def record(self, call: str) -> None:
        """Log a call the log does not see by itself (``"clip"``, ``"unscale_"``), made just
        before, inside the ``with`` block."""
        if call not in CALL_LABELS or call == "start":
            raise ValueError(
                _("a recorded call is one of {names}, got {call!r}").format(
                    names=", ".join(c for c in CALL_LABELS if c != "start"), call=call
                )
            )
        self._log(call)

    def columns(self) -> list[tuple[str, list[float | None]]]:
        """Each traced quantity by name, ``w``, ``w.grad`` and the optimizer's state (its key)
        where it keeps one, with its value after every row."""
        found = [("w", [r.weight for r in self.rows]), ("w.grad", [r.grad for r in self.rows])]
        if self.state_key:
            found.append((self.state_key, [r.state for r in self.rows]))
        return found

    def changes(self) -> list[set[str]]:
        """For each row, the names (as :meth:`columns` gives them) of what its call changed;
        the first row, the start, changed nothing."""
        columns = self.columns()
        return [
            {name for name, values in columns if index and values[index] != values[index - 1]}
            for index in range(len(self.rows))
        ]

    def table(self) -> str:
        """The rows as a table: one line per call, with ``w``, ``w.grad`` and the optimizer's
        state (its key, such as ``momentum_buffer``), or their norms for a larger parameter."""
        if not self.rows:
            raise ValueError(
                _(
                    "nothing was recorded: run backward(), step() or zero_grad() inside "
                    "`with GradLog(param, optimizer) as log:`"
                )
            )
        columns = self.columns()
        names = [name for name, values in columns]
        if self.measure == "norm":
            names = [f"|{name}|" for name in names]
        table = [[_("call"), *names]]
        for index, row in enumerate(self.rows):
            call = _("start") if row.call == "start" else row.call  # the others are names
            shown = (
                "None" if values[index] is None else f"{values[index]:.4g}"
                for _n, values in columns
            )
            table.append([call, *shown])
        widths = [max(width(line[i]) for line in table) + 2 for i in range(len(table[0]))]
        return "\n".join(
            "".join(pad(text, size) for text, size in zip(line, widths, strict=True)).rstrip()
            for line in table
        )

    def __enter__(self) -> GradLog:
        self.rows.append(
            TraceRow("start", _measure(self.param), _measure(self.param.grad), self._state())
        )
        self._handles.append(
            self.param.register_post_accumulate_grad_hook(lambda _: self._log("backward"))
        )
        if self.optimizer is not None:
            optimizer = self.optimizer
            self._handles.append(optimizer.register_step_post_hook(lambda *_: self._log("step")))
            original = optimizer.zero_grad

            def zero_grad(*args, **kwargs):
                original(*args, **kwargs)
                self._log("zero_grad")

            optimizer.zero_grad = zero_grad
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self.optimizer is not None:
            del self.optimizer.zero_grad  # back to the class's method


class StepGradients:
    """Inside a ``with`` block, records the gradient every ``optimizer.step()`` used (all
    parameters flattened into one tensor, zeros where a grad is None), through
    ``register_step_pre_hook``. ``.at_steps`` is the list of those tensors."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                _("optimizer must be a torch.optim.Optimizer, got {optimizer!r}").format(
                    optimizer=optimizer
                )
            )
        self.optimizer = optimizer
        self.at_steps: list[torch.Tensor] = []
        self._handle = None

    def _record(self, *_) -> None:
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        self.at_steps.append(
            torch.cat(
                [
                    (p.grad if p.grad is not None else torch.zeros_like(p)).detach().flatten()
                    for p in params
                ]
            ).cpu()
        )

    def __enter__(self) -> StepGradients:
        self._handle = self.optimizer.register_step_pre_hook(self._record)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()
