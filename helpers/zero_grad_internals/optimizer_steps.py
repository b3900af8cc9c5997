"""What an optimizer step does with a gradient of None versus a gradient of zeros."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from helpers.arguments import positive_int
from helpers.report import pad, width
from helpers.translation import _

OPTIMIZERS: dict[str, Callable[[list], torch.optim.Optimizer]] = {
    "SGD": lambda params: torch.optim.SGD(params, lr=0.1),
    "SGD momentum=0.9": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "SGD weight_decay=0.1": lambda params: torch.optim.SGD(params, lr=0.1, weight_decay=0.1),
    "Adam": lambda params: torch.optim.Adam(params, lr=0.1),
    "AdamW weight_decay=0.1": lambda params: torch.optim.AdamW(params, lr=0.1, weight_decay=0.1),
}
"""The optimizers the notebook compares, all with lr = 0.1."""

GRAD_MODES = ("None", "zeros")


def make_optimizer(name: str, params) -> torch.optim.Optimizer:
    if name not in OPTIMIZERS:
        raise ValueError(
            _("unknown optimizer {name!r}: use one of {names}").format(
                name=name, names=", ".join(OPTIMIZERS)
            )
        )
    return OPTIMIZERS[name](params)


@dataclass(frozen=True)
class SecondStep:
    """One parameter after a real step and a second step with no real gradient."""

    optimizer: str
    second_grad: str
    after_first: float
    after_second: float
    state_step: int | None
    buffer: float | None

    @property
    def moved(self) -> bool:
        return self.after_second != self.after_first


def _state_summary(optimizer: torch.optim.Optimizer, param) -> tuple[int | None, float | None]:
    state = optimizer.state.get(param, {})
    step = state.get("step")
    buffer = state.get("momentum_buffer", state.get("exp_avg"))
    return (
        int(step) if step is not None else None,
        float(buffer.item()) if isinstance(buffer, torch.Tensor) else None,
    )


def second_step(optimizer_name: str, second_grad: str) -> SecondStep:
    """Start a one-element parameter at 1.0, take a step with the gradient of ``0.5 * p``
    (0.5), then set ``.grad`` to None or to zeros and step again."""
    if second_grad not in GRAD_MODES:
        raise ValueError(
            _("second_grad must be 'None' or 'zeros', got {second_grad!r}").format(
                second_grad=second_grad
            )
        )
    param = nn.Parameter(torch.tensor([1.0]))
    optimizer = make_optimizer(optimizer_name, [param])
    (0.5 * param).sum().backward()
    optimizer.step()
    after_first = param.item()
    if second_grad == "None":
        param.grad = None
    else:
        param.grad = torch.zeros_like(param)
    optimizer.step()
    step, buffer = _state_summary(optimizer, param)
    return SecondStep(optimizer_name, second_grad, after_first, param.item(), step, buffer)


def format_second_steps(rows: list[SecondStep]) -> str:
    """The rows as an aligned text table."""
    # (header, the column's least width, its alignment): a translated header may widen it
    columns = [
        (_("optimizer"), 23, "<"),
        (_("2nd grad"), 8, "<"),
        (_("p after 1"), 9, ">"),
        (_("p after 2"), 9, ">"),
        (_("moved"), 5, ">"),
        (_("state step"), 10, ">"),
        (_("buffer"), 8, ">"),
    ]
    widths = [max(least, width(header)) for header, least, _align in columns]
    lines = [" ".join(pad(h, w, a) for (h, _least, a), w in zip(columns, widths, strict=True))]
    for row in rows:
        cells = (
            row.optimizer,
            row.second_grad,
            f"{row.after_first:.4f}",
            f"{row.after_second:.4f}",
            _("yes") if row.moved else _("no"),
            "-" if row.state_step is None else str(row.state_step),
            "-" if row.buffer is None else f"{row.buffer:.4f}",
        )
        lines.append(
            " ".join(
                pad(c, w, a) for c, (_h, _least, a), w in zip(cells, columns, widths, strict=True)
            )
        )
    return "\n".join(lines)


FREEZE_METHODS = (
    "zero its grads",
    "set its grads to None",
    "requires_grad_(False), zero_grad(set_to_none=False)",
    "requires_grad_(False), zero_grad()",
)
"""Ways to try to freeze a layer. ``requires_grad_(False)`` stops new gradients, but a
``.grad`` already there stays: kept as zeros by ``zero_grad(set_to_none=False)``, the
optimizer goes on stepping it."""


def frozen_layer_drift(
    model: nn.Module,
    layer: nn.Module,
    batches: list,
    *,
    optimizer_name: str = "AdamW weight_decay=0.1",
    warmup_steps: int = 5,
    frozen_steps: int = 20,
) -> dict[str, float]:
    """Train a copy of ``model`` normally for ``warmup_steps``, then try to freeze ``layer``
    for ``frozen_steps`` by each method in ``FREEZE_METHODS``; return how far the frozen
    layer's parameters moved during the frozen phase (largest absolute change)."""
    positive_int(warmup_steps, "warmup_steps")
    positive_int(frozen_steps, "frozen_steps")
    if not any(layer is module for module in model.modules()):
        raise ValueError(_("layer must be one of model's submodules"))
    layer_index = next(i for i, module in enumerate(model.modules()) if module is layer)
    drift = {}
    for method in FREEZE_METHODS:
        trained = copy.deepcopy(model)
        frozen = list(trained.modules())[layer_index]
        optimizer = make_optimizer(optimizer_name, list(trained.parameters()))
        set_to_none = method != "requires_grad_(False), zero_grad(set_to_none=False)"
        for step in range(warmup_steps + frozen_steps):
            if step == warmup_steps:
                start = [p.detach().clone() for p in frozen.parameters()]
                if method.startswith("requires_grad_(False)"):
                    frozen.requires_grad_(False)
            inputs, targets = batches[step % len(batches)]
            optimizer.zero_grad(set_to_none=set_to_none)
            nn.functional.mse_loss(trained(inputs), targets).backward()
            if step >= warmup_steps and method == "zero its grads":
                for p in frozen.parameters():
                    p.grad.zero_()
            elif step >= warmup_steps and method == "set its grads to None":
                for p in frozen.parameters():
                    p.grad = None
            optimizer.step()
        drift[method] = max(
            (p.detach() - s).abs().max().item()
            for p, s in zip(frozen.parameters(), start, strict=True)
        )
    return drift


PLACEMENTS = ("before forward", "after forward", "after step", "between backward and step")


def train_with_zero_grad_at(
    model: nn.Module,
    batches: list,
    placement: str,
    *,
    set_to_none: bool,
    steps: int,
    lr: float = 0.1,
    momentum: float = 0.9,
) -> torch.Tensor:
    """Train a copy of ``model`` with SGD (momentum 0.9), calling ``optimizer.zero_grad`` at
    ``placement`` in every iteration; return its weights after ``steps`` steps (flattened)."""
    if placement not in PLACEMENTS:
        raise ValueError(
            _("unknown placement {placement!r}: use one of {names}").format(
                placement=placement, names=", ".join(PLACEMENTS)
            )
        )
    positive_int(steps, "steps")
    trained = copy.deepcopy(model)
    optimizer = torch.optim.SGD(trained.parameters(), lr=lr, momentum=momentum)

    def zero_grad_if(here: str) -> None:
        if placement == here:
            optimizer.zero_grad(set_to_none=set_to_none)

    for step in range(steps):
        inputs, targets = batches[step % len(batches)]
        zero_grad_if("before forward")
        loss = nn.functional.mse_loss(trained(inputs), targets)
        zero_grad_if("after forward")
        loss.backward()
        zero_grad_if("between backward and step")
        optimizer.step()
        zero_grad_if("after step")
    return torch.cat([p.detach().flatten() for p in trained.parameters()])
