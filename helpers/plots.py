"""Figures the notebooks show. Each function returns a matplotlib Figure (not pyplot's
current figure), so a notebook cell displays it once by ending with it."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from matplotlib.figure import Figure

from helpers.figures import DescribedFigure
from helpers.grads import CALL_LABELS, GradLog
from helpers.training import History
from helpers.translation import N_, _, translate

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


def plot_trace(log: GradLog) -> DescribedFigure:
    """What a parameter, its ``.grad`` and the optimizer's state hold after each call that a
    :class:`~helpers.grads.GradLog` recorded: one panel each, one column per call, the
    value written at each point and the panel a call changed shaded. ``None`` is drawn as the
    word None, with no point, so that it shows apart from zero. Works on any loop: wrap it in
    ``with GradLog(param, optimizer) as log:`` and pass ``log``."""
    if not isinstance(log, GradLog):
        raise TypeError(
            _(
                "plot_trace takes the GradLog of a `with GradLog(param, optimizer) as log:` "
                "block, got {kind}"
            ).format(kind=type(log).__name__)
        )
    if len(log.rows) < 2:
        raise ValueError(
            _(
                "the GradLog recorded no call: run backward(), step() or zero_grad() inside "
                "`with GradLog(param, optimizer) as log:`, then pass log"
            )
        )
    rows, norm = log.rows, log.measure == "norm"
    quantities = log.columns()

    def draw(label) -> Figure:
        fig = Figure(
            figsize=(max(FIGSIZE[0], 0.5 + 1.1 * len(rows)), 1.3 * len(quantities) + 0.6),
            dpi=80,
            layout="constrained",
        )
        axes = fig.subplots(len(quantities), 1, sharex=True, squeeze=False)[:, 0]
        changes = log.changes()
        for ax, (name, values) in zip(axes, quantities, strict=True):
            known = [v for v in values if v is not None]
            low, high = min([0.0, *known]), max([0.0, *known])
            margin = (high - low) * 0.35 or 1.0
            ax.set_ylim(low - margin, high + margin)
            for i, value in enumerate(values):
                if name in changes[i]:  # this call wrote here
                    ax.axvspan(i - 0.45, i + 0.45, color="#fff0b3", zorder=0)
                if value is None:
                    ax.text(i, 0, "None", ha="center", va="center", color="#777", fontsize=9)
                else:
                    ax.plot([i], [value], "o", color="#1f5fa8")
                    ax.annotate(
                        f"{value:.4g}",
                        (i, value),
                        textcoords="offset points",
                        xytext=(0, 7),
                        ha="center",
                        fontsize=9,
                    )
            segments = [(i, v) for i, v in enumerate(values) if v is not None]
            for (i, a), (j, b) in itertools.pairwise(segments):
                if j == i + 1:
                    ax.plot([i, j], [a, b], color="#1f5fa8", alpha=0.4)
            ax.axhline(0, color="#bbb", linewidth=0.8, zorder=0)
            shown = name.replace("_", "\n")  # momentum_buffer on two lines
            ax.set_ylabel(f"|{shown}|" if norm else shown, rotation=0, ha="right", va="center")
            ax.grid(alpha=0.3, axis="y")
        axes[-1].set_xticks(
            range(len(rows)), [label(CALL_LABELS[r.call]) for r in rows], fontsize=9
        )
        axes[-1].set_xlim(-0.6, len(rows) - 0.4)
        axes[0].set_title(label(N_("after each call (shaded: what the call changed)")))
        return fig

    return DescribedFigure(draw, describe_trace(log))


def describe_trace(log: GradLog) -> str:
    """:func:`plot_trace`'s figure in words: each quantity's value after each call."""
    calls = ", ".join(translate(CALL_LABELS[r.call]) for r in log.rows)
    columns = log.columns()
    if log.state_key:
        title = _("Figure: w, w.grad and {state} after each call ({calls}).")
    else:
        title = _("Figure: w and w.grad after each call ({calls}).")
    lines = [title.format(state=log.state_key, calls=calls)]
    for name, values in columns:
        shown = " -> ".join("None" if v is None else f"{v:.4g}" for v in values)
        name = f"|{name}|" if log.measure == "norm" else name
        lines.append(f"{name}: {shown}")
    return "\n".join(lines)
