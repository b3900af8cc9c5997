"""Figures the notebooks show. Each function returns a matplotlib Figure (not pyplot's
current figure), so a notebook cell displays it once by ending with it."""

from __future__ import annotations

from collections.abc import Mapping

from matplotlib.figure import Figure

from helpers.training import History
from helpers.translation import _

FIGSIZE = (6.4, 3.2)


def _show_figures_inline() -> None:
    """Let a notebook cell display a returned Figure as a PNG (pyplot is never imported)."""
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    if get_ipython() is not None:
        set_matplotlib_formats("png")


_show_figures_inline()


def plot_series(
    series: Mapping[str, list[float]],
    *,
    ylabel: str,
    xlabel: str = "optimizer step",
    title: str = "",
    log_y: bool = False,
) -> Figure:
    """One line per named list of values, against the step number (from 1)."""
    if not isinstance(series, Mapping) or not series:
        raise ValueError(_("series must be a non-empty dict of {label: list of numbers}"))
    fig = Figure(figsize=FIGSIZE, dpi=80, layout="constrained")
    ax = fig.subplots()
    for label, values in series.items():
        ax.plot(range(1, len(values) + 1), list(values), label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if log_y:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return fig


def plot_loss_curves(
    histories: Mapping[str, History],
    *,
    title: str = "",
    log_y: bool = False,
    ylabel: str = "batch loss",
) -> Figure:
    """Batch loss after each step, one line per run; ``log_y`` for runs that blow up."""
    if not isinstance(histories, Mapping) or not histories:
        raise ValueError(_("histories must be a non-empty dict of {label: History}"))
    for label, history in histories.items():
        if not isinstance(history, History):
            raise TypeError(
                _("histories[{label!r}] must be a History, got {kind}").format(
                    label=label, kind=type(history).__name__
                )
            )
    series = {label: history.losses for label, history in histories.items()}
    return plot_series(series, ylabel=ylabel, title=title, log_y=log_y)


def plot_function_and_gradient(x, y, grad, *, name: str = "f(x)") -> Figure:
    """A function and the gradient autograd computed for it, side by side on one axis."""
    values = [t.detach().cpu().flatten() for t in (x, y, grad)]
    if len({len(v) for v in values}) != 1:
        raise ValueError(_("x, y and grad must have the same number of elements"))
    fig = Figure(figsize=FIGSIZE, dpi=80, layout="constrained")
    ax = fig.subplots()
    ax.plot(values[0], values[1], label=name)
    ax.plot(values[0], values[2], label=f"gradient of {name} from autograd", linestyle="--")
    ax.set_xlabel("x")
    ax.legend()
    ax.grid(alpha=0.3)
    return fig


def plot_step_memory(points) -> Figure:
    """Stacked bars per micro-batch size: gradient buffers and everything else a step needed."""
    if not points:
        raise ValueError(_("points must be a non-empty list of StepMemory"))
    fig = Figure(figsize=FIGSIZE, dpi=80, layout="constrained")
    ax = fig.subplots()
    labels = [str(point.batch_size) for point in points]
    grads = [point.grad_bytes / 2**20 for point in points]
    other = [max(point.other_bytes, 0) / 2**20 for point in points]
    ax.bar(labels, grads, label="gradient buffers")
    ax.bar(labels, other, bottom=grads, label="activations and temporaries")
    ax.set_xlabel("micro-batch size")
    ax.set_ylabel("peak memory of one step (MiB)")
    ax.legend()
    ax.grid(alpha=0.3, axis="y")
    return fig


def plot_tail_errors(errors: Mapping[str, Mapping[int, float]]) -> Figure:
    """Gradient error of the last window against k, one line per loss scaling."""
    if not errors:
        raise ValueError(_("errors must be a non-empty dict of {scaling: {k: error}}"))
    fig = Figure(figsize=FIGSIZE, dpi=80, layout="constrained")
    ax = fig.subplots()
    for label, by_k in errors.items():
        ax.plot(list(by_k), list(by_k.values()), marker="o", label=label)
    ax.set_xlabel("accumulation steps k")
    ax.set_ylabel("last window's gradient error")
    ax.legend()
    ax.grid(alpha=0.3)
    return fig
