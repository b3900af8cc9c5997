"""A loop's calls in order (CallTimeline), the figures drawn from them (plot_timeline,
plot_grad_writes), the token-weight figure, series figures with descriptions, and trace
tables with clipping and a GradScaler."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers.plots import (
    plot_grad_writes,
    plot_series,
    plot_timeline,
    plot_token_weights,
    token_weights,
)
from helpers.timeline import TIMELINE_CALLS, CallTimeline
from helpers.trace_tables import Call, run_trace, trace_checker


def window_loop(micro_batches: int, k: int, *, clip=False, scaler=None, scheduler=None):
    """The plain window loop on a tiny model, recorded; returns the timeline."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if scheduler:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2)
    x = torch.randn(micro_batches, 3)
    with CallTimeline(optimizer, scheduler=scheduler, scaler=scaler) as timeline:
        for i in range(micro_batches):
            loss = model(x[i : i + 1]).sum() / k
            (loss if scaler is None else scaler.scale(loss)).backward()
            if (i + 1) % k == 0:
                if scaler is not None:
                    scaler.unscale_(optimizer)
                if clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                if scaler is not None:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                if scheduler:
                    scheduler.step()
                optimizer.zero_grad()
    return timeline, optimizer


class TestCallTimeline:
    def test_records_each_call_in_order_and_counts_windows(self):
        timeline, _ = window_loop(10, 4)
        assert timeline.calls == (["backward"] * 4 + ["step", "zero_grad"]) * 2 + ["backward"] * 2
        assert timeline.windows() == [4, 4, 2]
        assert timeline.summary().startswith("backward() ×4, optimizer.step(), zero_grad()")

    def test_amp_clip_and_scheduler_are_recorded_once_per_step(self):
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
        timeline, _ = window_loop(4, 4, clip=True, scaler=scaler, scheduler=True)
        # scaler.step's own unscale_ and optimizer.step are not the loop's calls: one each
        assert timeline.calls == [
            "backward", "backward", "backward", "backward",
            "unscale_", "clip", "step", "update", "scheduler", "zero_grad",
        ]  # fmt: skip

    def test_puts_everything_back(self):
        timeline, optimizer = window_loop(2, 2)
        assert torch.autograd.backward.__module__ == "torch.autograd"
        assert torch.nn.utils.clip_grad_norm_.__module__ == "torch.nn.utils.clip_grad"
        assert "zero_grad" not in vars(optimizer) and "step" not in vars(optimizer)
        count = len(timeline.events)
        nn.Linear(1, 1)(torch.ones(1)).sum().backward()
        assert len(timeline.events) == count  # nothing recorded after the block

    def test_lines_are_the_loops_own(self):
        timeline, _ = window_loop(2, 2)
        assert (
            timeline.events[0].line == "(loss if scaler is None else scaler.scale(loss)).backward()"
        )
        assert timeline.events[2].line == "optimizer.step()"

    def test_watch_measures_what_each_backward_added(self):
        torch.manual_seed(0)
        generator, discriminator = nn.Linear(2, 2), nn.Linear(2, 1)
        opt = torch.optim.SGD(discriminator.parameters(), lr=0.1)
        watch = {"G": generator, "D": discriminator}
        with CallTimeline(opt, watch=watch) as timeline:
            fake = generator(torch.randn(4, 2))
            discriminator(fake.detach()).sum().backward()  # reaches D only
            discriminator(fake).sum().backward()  # reaches both
        first, second = (event.added for event in timeline.events)
        assert first["G"] == 0 and first["D"] > 0
        assert second["G"] > 0 and second["D"] == pytest.approx(first["D"])
        figure = plot_grad_writes(timeline)
        assert "G 0" in figure.description and len(figure.figure.axes[0].patches) == 4

    def test_bad_optimizer(self):
        with pytest.raises(TypeError, match=r"optimizer must be a torch\.optim\.Optimizer"):
            CallTimeline({})

    def test_bad_scaler_scheduler_and_watch(self):
        optimizer = torch.optim.SGD([nn.Parameter(torch.ones(1))])
        with pytest.raises(TypeError, match=r"scaler must be a torch\.amp\.GradScaler"):
            CallTimeline(optimizer, scaler="amp")
        with pytest.raises(TypeError, match="scheduler must be"):
            CallTimeline(optimizer, scheduler=3)
        with pytest.raises(TypeError, match="watch must map names to modules"):
            CallTimeline(optimizer, watch={"G": torch.ones(1)})


class TestTimelineFigures:
    def test_one_lane_per_kind_of_call_and_one_point_per_call(self):
        timeline, _ = window_loop(10, 4)
        figure = plot_timeline(timeline)
        ax = figure.figure.axes[0]
        assert [t.get_text() for t in ax.get_yticklabels()] == [
            TIMELINE_CALLS[c] for c in ("zero_grad", "step", "backward")
        ]
        assert len(ax.lines) == len(timeline.events)
        assert "Backward passes before each optimizer.step(): 4, 4." in figure.description
        assert "2 backward passes at the end reach no step." in figure.description

    def test_bad_input_says_what_it_needs(self):
        with pytest.raises(TypeError, match="takes the CallTimeline"):
            plot_timeline([])
        optimizer = torch.optim.SGD([nn.Parameter(torch.ones(1))])
        with pytest.raises(ValueError, match="recorded no call"):
            plot_timeline(CallTimeline(optimizer))
        timeline, _ = window_loop(2, 2)
        with pytest.raises(ValueError, match="needs a CallTimeline with watch"):
            plot_grad_writes(timeline)

    def test_series_carry_a_description(self):
        figure = plot_series({"run": [3.0, 2.0, 1.0]}, ylabel="loss", title="t")
        assert figure.description == (
            "Figure: loss against optimizer step (t).\nrun: 3 at optimizer step 1, 1 at "
            "optimizer step 3"
        )


class TestTokenWeights:
    def test_weights_are_the_naive_means_share_over_the_exact_one(self):
        # one micro-batch per rank, 30 and 50 tokens: 1/60 and 1/100 against 1/80
        assert token_weights([[30], [50]]) == [[pytest.approx(80 / 60)], [pytest.approx(0.8)]]
        counts = [[20, 14, 16], [30, 25, 28]]
        weights = token_weights(counts)
        # the weights of all tokens add up to the same total as the exact mean's
        total = sum(
            n * w
            for ns, ws in zip(counts, weights, strict=True)
            for n, w in zip(ns, ws, strict=True)
        )
        assert total == pytest.approx(sum(map(sum, counts)))
        assert len(plot_token_weights(counts).figure.axes[0].patches) == 6

    @pytest.mark.parametrize("tokens", [[], [[]], [[3, 0]], [[2.5]], "30,50"])
    def test_bad_counts(self, tokens):
        with pytest.raises(ValueError, match="one list per rank"):
            plot_token_weights(tokens)


class TestTracesWithClipAndScaler:
    def test_clip_rescales_the_sum_and_step_uses_it(self):
        calls = [
            Call("backward", lambda w: 3 * w),
            Call("backward", lambda w: 4 * w),
            Call("clip", max_norm=5.0),
            Call("step"),
        ]
        rows = run_trace(1.0, torch.optim.SGD, calls, lr=0.1).rows
        assert [r.grad for r in rows[1:]] == [3.0, 7.0, pytest.approx(5.0), pytest.approx(5.0)]
        assert rows[-1].weight == pytest.approx(0.5)

    def test_scaled_backward_and_unscale(self):
        calls = [Call("backward", lambda w: w * w / 2), Call("unscale_"), Call("step")]
        rows = run_trace(1.0, torch.optim.SGD, calls, scale=1024.0, lr=0.5).rows
        assert [r.grad for r in rows[1:]] == [1024.0, 1.0, 1.0]
        assert rows[-1].weight == 0.5

    def test_hints_name_the_scale_and_the_clip(self):
        check = trace_checker(
            1.0,
            torch.optim.SGD,
            [Call("backward", lambda w: 3 * w), Call("clip", max_norm=2.0), Call("step")],
            doc="",
            lr=0.1,
        )
        said = check([(1, 3), (1, 3), (0.7, 3)]).message
        assert "row 2 (clip_grad_norm_())" in said and "max_norm" in said
        assert check([(1, 3), (1, 2), (0.8, 2)]).passed
        scaled = trace_checker(
            1.0, torch.optim.SGD, [Call("backward", lambda w: 2 * w), Call("unscale_")],
            doc="", lr=0.1, scale=8.0,
        )  # fmt: skip
        assert "scaler.scale(loss)" in scaled([(1, 2), (1, 2)]).message
        assert "divides it by the scale" in scaled([(1, 16), (1, 16)]).message
        assert scaled([(1, 16.0), (1, 2)]).passed

    def test_bad_calls(self):
        with pytest.raises(ValueError, match="needs its max_norm"):
            Call("clip")
        with pytest.raises(ValueError, match="a call is one of"):
            Call("unscale")
        with pytest.raises(ValueError, match="needs a trace run with scale"):
            run_trace(1.0, torch.optim.SGD, [Call("unscale_")], lr=0.1)
