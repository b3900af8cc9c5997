"""Interactive explorers. The numbers come from tested helpers; the widgets only wire
controls to them (works with ipywidgets 7, which Colab ships, and 8)."""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
import torch
from IPython.display import display
from torch import nn

from helpers.accumulation import SCALINGS, tail_window_error
from helpers.data import Batch
from helpers.plots import plot_loss_curves
from helpers.report import below, pad
from helpers.training import compare_zero_grad, trainable_parameters
from helpers.translation import N_, _, translate

# The keys of the results the explorers print (the runs of compare_zero_grad, the report of
# tail_window_error), marked for translation: printed with translate(key); the results keep
# them as they are. The plots stay in English (matplotlib's fonts may lack Chinese glyphs).
SHOWN_KEYS = (
    N_("with zero_grad"),
    N_("without zero_grad"),
    N_("effective batch"),
    N_("windows"),
    N_("micro-batches in the last window"),
    N_("samples in the last window"),
    N_("gradient error"),
    N_("step memory (MiB)"),
)


def _run_now(widget: widgets.interactive) -> widgets.interactive:
    """ipywidgets 8 runs an interactive's function when it is made, ipywidgets 7 (Colab's) only
    when it is displayed: run it now if it has not run, so ``.result`` is there in both."""
    if widget.result is None:
        widget.update()
    return widget


def zero_grad_explorer(model: nn.Module, batches: Sequence[Batch]) -> widgets.interactive:
    """Sliders for the learning rate and the number of steps, a switch for showing the run
    with ``zero_grad`` beside the one without; the plot and a summary update on release.

    The returned widget's ``.result`` holds the last summary: final losses by run."""
    trainable_parameters(model)

    def update(lr: float, steps: int, show_correct_run: bool) -> dict[str, float]:
        runs = compare_zero_grad(model, batches, steps=steps, lr=lr)
        shown = runs if show_correct_run else {"without zero_grad": runs["without zero_grad"]}
        display(plot_loss_curves(shown, title=f"lr = {lr:.3g}, {steps} steps", log_y=True))
        summary = {label: history.losses[-1] for label, history in runs.items()}
        print(
            _(", ").join(
                _("{label}: last loss {loss:.4g}").format(label=translate(label), loss=loss)
                for label, loss in summary.items()
            )
        )
        return summary

    return _run_now(
        widgets.interactive(
            update,
            {"manual": False},
            lr=widgets.FloatLogSlider(
                value=0.01,
                base=10,
                min=-3,
                max=0,
                step=0.1,
                description="lr",
                continuous_update=False,
            ),
            steps=widgets.IntSlider(
                value=200,
                min=10,
                max=300,
                step=10,
                description=_("steps"),
                continuous_update=False,
            ),
            show_correct_run=widgets.Checkbox(
                value=True, description=_("show the run with zero_grad")
            ),
        )
    )


def square_gradient_slider() -> widgets.interactive:
    """A slider for w that prints d(w**2)/dw computed by autograd: if it moves, widgets work.

    The returned widget's ``.result`` is the last gradient computed."""

    def update(w: float) -> float:
        tensor = torch.tensor(float(w), requires_grad=True)
        (tensor**2).backward()
        print(f"w = {w:.1f}   d(w**2)/dw = {tensor.grad.item():.1f}")
        return tensor.grad.item()

    return _run_now(
        widgets.interactive(
            update, w=widgets.FloatSlider(value=1.0, min=-3.0, max=3.0, step=0.5, description="w")
        )
    )


def accumulation_explorer(model: nn.Module, inputs, labels, memory_points) -> widgets.interactive:
    """Micro-batch size, accumulation steps and loss scaling; shows the effective batch, the
    last window's gradient error against one big batch (``tail_window_error``) and the
    measured step memory at that micro-batch size (``memory_points``, a list of StepMemory).

    The returned widget's ``.result`` is the last report."""
    trainable_parameters(model)
    memory = {point.batch_size: point.step_bytes for point in memory_points}
    if not memory:
        raise ValueError(_("memory_points is empty: measure some micro-batch sizes first"))

    def update(micro_batch_size: int, accumulation_steps: int, scaling: str) -> dict:
        report = tail_window_error(
            model, inputs, labels, micro_batch_size, accumulation_steps, scaling
        )
        report["step memory (MiB)"] = memory[micro_batch_size] / 2**20
        for key, value in report.items():
            if key == "gradient error" and value < 1e-5:
                value = below(value, 1e-5)  # float rounding: the same bound on every machine
            shown = f"{value:.3g}" if isinstance(value, float) else f"{value}"
            print(f"{pad(translate(key), 33)} {shown}")
        return report

    return _run_now(
        widgets.interactive(
            update,
            micro_batch_size=widgets.SelectionSlider(
                options=sorted(memory), description=_("micro-batch"), continuous_update=False
            ),
            accumulation_steps=widgets.IntSlider(
                value=4, min=1, max=8, description="k", continuous_update=False
            ),
            scaling=widgets.ToggleButtons(options=list(SCALINGS), description=_("scaling")),
        )
    )
