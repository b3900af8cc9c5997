"""Figures the notebooks show. Each function returns a matplotlib Figure (not pyplot's
current figure), so a notebook cell displays it once by ending with it."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from matplotlib.figure import Figure

from helpers.figures import DescribedFigure
from helpers.grads import CALL_LABELS, GradLog
from helpers.timeline import TIMELINE_CALLS, WINDOW, CallTimeline
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
) -> DescribedFigure:
    """One line per named list of values, against the step number (from 1). Its description
    gives each line's first and last values."""
    if not isinstance(series, Mapping) or not series:
        raise ValueError(_("series must be a non-empty dict of {label: list of numbers}"))

    def draw(label) -> Figure:
        fig = Figure(figsize=FIGSIZE, dpi=80, layout="constrained")
        ax = fig.subplots()
        for name, values in series.items():
            ax.plot(range(1, len(values) + 1), list(values), label=name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if log_y:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.legend()
        ax.grid(alpha=0.3)
        return fig

    return DescribedFigure(draw, describe_series(series, ylabel=ylabel, xlabel=xlabel, title=title))


def describe_series(
    series: Mapping[str, list[float]], *, ylabel: str, xlabel: str, title: str = ""
) -> str:
    """:func:`plot_series`'s figure in words: each line's value at its first and last step."""
    head = _("Figure: {ylabel} against {xlabel}").format(ylabel=ylabel, xlabel=xlabel)
    lines = [head + (f" ({title})" if title else "") + "."]
    for name, values in series.items():
        values = list(values)
        if not values:
            lines.append(_("{name}: no values").format(name=name))
            continue
        lines.append(
            _("{name}: {first:.3g} at {xlabel} 1, {last:.3g} at {xlabel} {n}").format(
                name=name, first=values[0], last=values[-1], xlabel=xlabel, n=len(values)
            )
        )
    return "\n".join(lines)


def plot_loss_curves(
    histories: Mapping[str, History],
    *,
    title: str = "",
    log_y: bool = False,
    ylabel: str = "batch loss",
) -> DescribedFigure:
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


def plot_function_and_gradient(x, y, grad, *, name: str = "f(x)") -> DescribedFigure:
    """A function and the gradient autograd computed for it, side by side on one axis."""
    values = [t.detach().cpu().flatten() for t in (x, y, grad)]
    if len({len(v) for v in values}) != 1:
        raise ValueError(_("x, y and grad must have the same number of elements"))

    def draw(label) -> Figure:
        fig = Figure(figsize=FIGSIZE, dpi=80, layout="constrained")
        ax = fig.subplots()
        ax.plot(values[0], values[1], label=name)
        ax.plot(values[0], values[2], label=f"gradient of {name} from autograd", linestyle="--")
        ax.set_xlabel("x")
        ax.legend()
        ax.grid(alpha=0.3)
        return fig

    # rounded to 6 decimals: kernels differ in the last bits (x² at x = 0 may come out 1e-14)
    xs, ys, grads = ([round(x, 6) + 0.0 for x in v.tolist()] for v in values)
    description = _(
        "Figure: {name} and its gradient from autograd, for x from {x0:.3g} to {x1:.3g}.\n"
        "{name} ranges from {y0:.3g} to {y1:.3g}; its gradient from {g0:.3g} to {g1:.3g}"
    ).format(name=name, x0=xs[0], x1=xs[-1], y0=min(ys), y1=max(ys), g0=min(grads), g1=max(grads))
    return DescribedFigure(draw, description)


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


def _timeline_of(timeline: object, function: str) -> CallTimeline:
    if not isinstance(timeline, CallTimeline):
        raise TypeError(
            _(
                "{function} takes the CallTimeline of a `with CallTimeline(optimizer) as "
                "timeline:` block, got {kind}"
            ).format(function=function, kind=type(timeline).__name__)
        )
    if not timeline.events:
        raise ValueError(
            _(
                "the CallTimeline recorded no call: run the loop inside `with "
                "CallTimeline(optimizer) as timeline:`, then pass timeline"
            )
        )
    return timeline


def plot_timeline(timeline: CallTimeline) -> DescribedFigure:
    """A loop's calls in the order it made them, as a :class:`~helpers.timeline.CallTimeline`
    recorded them: one lane per kind of call, one column per call, each backward numbered by
    its micro-batch, each window shaded from its first backward to its step. Backward passes
    that no step followed are shaded red. Works on any loop: wrap it in ``with
    CallTimeline(optimizer) as timeline:`` and pass ``timeline``."""
    timeline = _timeline_of(timeline, "plot_timeline")
    calls = timeline.calls
    lanes = [call for call in TIMELINE_CALLS if call in calls]
    spans, start = [], None  # spans: (first, last, closed by a step)
    for index, call in enumerate(calls):
        if call == "backward" and start is None:
            start = index
        elif call == "step":
            spans.append((index if start is None else start, index, True))
            start = None
    if start is not None:
        spans.append((start, len(calls) - 1, False))

    def draw(label) -> Figure:
        fig = Figure(
            figsize=(max(FIGSIZE[0], 1.6 + 0.42 * len(calls)), 0.5 * len(lanes) + 1.3),
            dpi=80,
            layout="constrained",
        )
        ax = fig.subplots()
        for first, last, stepped in spans:
            colour = "#e3eefb" if stepped else "#fbe0e0"
            ax.axvspan(first - 0.4, last + 0.4, color=colour, zorder=0)
        for window, (first, last, stepped) in enumerate(spans, 1):
            text = label(WINDOW).format(number=window) if stepped else label(N_("no step"))
            ax.text((first + last) / 2, len(lanes) - 0.35, text, ha="center", fontsize=9)
        micro_batch = 0
        for index, call in enumerate(calls):
            lane = len(lanes) - 1 - lanes.index(call)
            ax.plot([index], [lane], "o", color="#1f5fa8" if call == "backward" else "#c0392b")
            if call == "backward":
                micro_batch += 1
                ax.annotate(
                    str(micro_batch),
                    (index, lane),
                    textcoords="offset points",
                    xytext=(0, 7),
                    ha="center",
                    fontsize=8,
                )
        ax.set_yticks(range(len(lanes)), [TIMELINE_CALLS[c] for c in reversed(lanes)])
        ax.set_ylim(-0.6, len(lanes) - 0.1)
        ax.set_xlim(-0.7, len(calls) - 0.3)
        ax.set_xticks([])
        ax.set_xlabel(label(N_("the loop's calls, in order (numbers: micro-batches)")))
        ax.grid(alpha=0.3, axis="y")
        return fig

    return DescribedFigure(draw, describe_timeline(timeline))


def describe_timeline(timeline: CallTimeline) -> str:
    """:func:`plot_timeline`'s figure in words: the calls, and each window's backward passes."""
    timeline = _timeline_of(timeline, "describe_timeline")
    steps = timeline.calls.count("step")
    lines = [_("Figure: the loop's calls in order: {calls}.").format(calls=timeline.summary())]
    windows = timeline.windows()
    if steps:
        lines.append(
            _("Backward passes before each optimizer.step(): {counts}.").format(
                counts=", ".join(str(n) for n in windows[:steps])
            )
        )
    if len(windows) > steps:
        lines.append(
            _("{count} backward passes at the end reach no step.").format(count=windows[-1])
        )
    return "\n".join(lines)


def plot_grad_writes(timeline: CallTimeline) -> DescribedFigure:
    """What each backward of a :class:`~helpers.timeline.CallTimeline` recorded with
    ``watch={name: module}`` added to each watched module's gradients (the norm of the change),
    one group of bars per backward, labelled with the line that called it. A bar of 0 is a
    module that backward did not reach."""
    timeline = _timeline_of(timeline, "plot_grad_writes")
    if not timeline.watch:
        raise ValueError(
            _(
                "plot_grad_writes needs a CallTimeline with watch={name: module}, such as "
                'CallTimeline(optimizer, watch={"G": generator, "D": discriminator})'
            )
        )
    passes = [event for event in timeline.events if event.call == "backward"]
    if not passes:
        raise ValueError(_("the CallTimeline recorded no backward() to show"))
    names = list(timeline.watch)

    def draw(label) -> Figure:
        fig = Figure(figsize=FIGSIZE, dpi=80, layout="constrained")
        ax = fig.subplots()
        width = 0.8 / len(names)
        for offset, name in enumerate(names):
            xs = [i + (offset - (len(names) - 1) / 2) * width for i in range(len(passes))]
            values = [event.added[name] for event in passes]
            bars = ax.bar(xs, values, width, label=name)
            ax.bar_label(bars, [f"{v:.3g}" for v in values], fontsize=8)
        ax.set_xticks(
            range(len(passes)), [e.line or f"backward {i}" for i, e in enumerate(passes, 1)]
        )
        ax.set_ylabel(label(N_("norm added to .grad")))
        ax.set_title(label(N_("what each backward() added to each model's gradients")))
        ax.legend()
        ax.grid(alpha=0.3, axis="y")
        return fig

    return DescribedFigure(draw, describe_grad_writes(timeline))


def describe_grad_writes(timeline: CallTimeline) -> str:
    """:func:`plot_grad_writes`'s figure in words."""
    lines = [_("Figure: the norm each backward() added to each model's gradients.")]
    for number, event in enumerate(e for e in timeline.events if e.call == "backward"):
        added = ", ".join(f"{name} {value:.3g}" for name, value in event.added.items())
        lines.append(f"{event.line or f'backward {number + 1}'}: {added}")
    return "\n".join(lines)


def plot_token_weights(tokens: list[list[int]]) -> DescribedFigure:
    """Each micro-batch's token weight when every rank backwards each micro-batch's own token
    mean divided by its window's length and DDP averages the ranks (notebook 08's
    ``naive_window``), as a multiple of the exact weight, one over all the window's tokens.
    ``tokens[r][j]`` is the count of rank ``r``'s micro-batch ``j``; the exact loop gives every
    bar the height 1."""
    if (
        not isinstance(tokens, (list, tuple))
        or not tokens
        or not all(isinstance(rank, (list, tuple)) and rank for rank in tokens)
        or not all(isinstance(n, int) and n > 0 for rank in tokens for n in rank)
    ):
        raise ValueError(
            _(
                "tokens must be a list with one list per rank of each micro-batch's token "
                "count (positive integers), such as [[30, 20], [50, 10]]"
            )
        )
    weights = token_weights(tokens)

    def draw(label) -> Figure:
        fig = Figure(figsize=FIGSIZE, dpi=80, layout="constrained")
        ax = fig.subplots()
        width = 0.8 / max(len(rank) for rank in tokens)
        for j in range(max(len(rank) for rank in tokens)):
            xs = [r + (j - (len(tokens[r]) - 1) / 2) * width for r in range(len(tokens))]
            xs, values, counts = zip(
                *[(x, weights[r][j], tokens[r][j]) for r, x in enumerate(xs) if j < len(tokens[r])],
                strict=True,
            )
            bars = ax.bar(xs, values, width * 0.9, color="#1f5fa8")
            ax.bar_label(bars, [f"{n}: {v:.2f}" for n, v in zip(counts, values, strict=True)])
        ax.axhline(1.0, color="#c0392b", linestyle="--", label=label(N_("the exact weight")))
        ax.set_ylim(0, 1.25 * max(max(ws) for ws in [*weights, [1.0]]))
        ax.set_xticks(range(len(tokens)), [f"rank {r}" for r in range(len(tokens))])
        ax.set_ylabel(label(N_("token weight / exact weight")))
        ax.set_title(label(N_("each micro-batch's tokens (count: weight), naive mean")))
        ax.legend(loc="lower right")
        ax.grid(alpha=0.3, axis="y")
        return fig

    lines = [_("Figure: each token's weight in the naive mean, as a multiple of the exact one.")]
    for r, (counts, ws) in enumerate(zip(tokens, weights, strict=True)):
        shown = ", ".join(f"{n}: {w:.2f}" for n, w in zip(counts, ws, strict=True))
        lines.append(_("rank {rank} (tokens: weight): {shown}").format(rank=r, shown=shown))
    return DescribedFigure(draw, "\n".join(lines))


def token_weights(tokens: list[list[int]]) -> list[list[float]]:
    """:func:`plot_token_weights`'s heights: a token of rank ``r``'s micro-batch ``j`` weighs
    ``1 / (tokens[r][j] × k_r × world)`` in the naive mean, against ``1 / total`` exactly."""
    world, total = len(tokens), sum(sum(rank) for rank in tokens)
    return [[total / (n * len(rank) * world) for n in rank] for rank in tokens]
