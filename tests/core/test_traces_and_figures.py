"""The machine, visible: GradLog's rows and table, the trace figure drawn from them (with its
description and, in Chinese where a font has the characters, Chinese labels), and the
checkers of trace tables and of predictions with options."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers import figures
from helpers.autograd_accumulates.checkers_01 import check_second_backward
from helpers.grads import GradLog, TraceRow
from helpers.plots import describe_trace, plot_trace
from helpers.predictions import choice_checker
from helpers.trace_tables import Call, run_trace, trace_checker


def momentum_run() -> GradLog:
    w = nn.Parameter(torch.tensor(3.0))
    optimizer = torch.optim.SGD([w], lr=0.1, momentum=0.9)
    with GradLog(w, optimizer) as log:
        (w**2).backward()
        optimizer.step()
        optimizer.zero_grad()
        (w**2).backward()
        optimizer.step()
    return log


class TestGradLogRows:
    def test_a_row_per_call_after_the_start_with_the_momentum_buffer(self):
        log = momentum_run()
        assert [row.call for row in log.rows] == [
            "start", "backward", "step", "zero_grad", "backward", "step",
        ]  # fmt: skip
        assert log.rows[0] == TraceRow("start", 3.0, None, None)
        assert log.rows[3].grad is None and log.rows[3].state == pytest.approx(6.0)
        assert log.rows[5].state == pytest.approx(0.9 * 6 + 4.8)
        assert log.rows[5].weight == pytest.approx(2.4 - 0.1 * 10.2)
        assert log.state_key == "momentum_buffer" and log.measure == "value"

    def test_changes_name_what_each_call_wrote(self):
        assert momentum_run().changes() == [
            set(), {"w.grad"}, {"w", "momentum_buffer"}, {"w.grad"}, {"w.grad"},
            {"w", "momentum_buffer"},
        ]  # fmt: skip

    def test_the_table_prints_each_row(self):
        lines = momentum_run().table().splitlines()
        assert lines[0].split() == ["call", "w", "w.grad", "momentum_buffer"]
        assert lines[1].split() == ["start", "3", "None", "None"]
        assert lines[4].split() == ["zero_grad", "2.4", "None", "6"]
        assert lines[6].split() == ["step", "1.38", "4.8", "10.2"]

    def test_plain_sgd_has_no_state_column_and_adam_its_running_mean(self):
        w = nn.Parameter(torch.tensor(1.0))
        with GradLog(w, torch.optim.SGD([w], lr=0.1)) as log:
            (w**2).backward()
        assert log.state_key is None and log.table().splitlines()[0].split() == [
            "call",
            "w",
            "w.grad",
        ]
        optimizer = torch.optim.Adam([w], lr=0.1)
        with GradLog(w, optimizer) as log:
            optimizer.step()
        assert log.state_key == "exp_avg" and log.rows[-1].state == pytest.approx((1 - 0.9) * 2.0)

    def test_a_larger_parameter_is_traced_by_its_norms(self):
        layer = nn.Linear(3, 2)
        optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
        with GradLog(layer.weight, optimizer) as log:
            layer(torch.ones(1, 3)).sum().backward()
        assert log.measure == "norm"
        assert log.rows[1].grad == pytest.approx(layer.weight.grad.norm().item())
        assert log.table().splitlines()[0].split() == ["call", "|w|", "|w.grad|"]

    def test_a_parameter_the_optimizer_does_not_hold_is_refused(self):
        optimizer = torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1)
        with pytest.raises(ValueError, match="not one of the optimizer's parameters"):
            GradLog(nn.Parameter(torch.ones(1)), optimizer)

    def test_an_empty_log_has_no_table(self):
        with pytest.raises(ValueError, match="nothing was recorded"):
            GradLog(nn.Parameter(torch.ones(1))).table()


class TestTraceFigure:
    def test_the_figure_has_a_panel_per_quantity_and_its_description(self):
        log = momentum_run()
        shown = plot_trace(log)
        assert len(shown.figure.axes) == 3
        assert [label.get_text() for label in shown.figure.axes[-1].get_xticklabels()] == [
            "start", "backward()", "step()", "zero_grad()", "backward()", "step()",
        ]  # fmt: skip
        data, metadata = shown._repr_mimebundle_()
        assert data["image/png"] and data["text/plain"] == shown.description
        assert metadata["image/png"]["alt"] == shown.description
        assert shown.description == describe_trace(log)
        assert "w.grad: None -> 6 -> 6 -> None -> 4.8 -> 4.8" in shown.description
        assert "momentum_buffer: None -> None -> 6 -> 6 -> 6 -> 10.2" in shown.description

    def test_a_call_that_changed_a_panel_shades_it(self):
        axes = plot_trace(momentum_run()).figure.axes
        shaded = [len(ax.patches) for ax in axes]  # one band per call that changed it
        assert shaded == [2, 3, 2], "w at both steps; .grad at 2 backwards and zero_grad"

    def test_bad_input_says_what_it_needs(self):
        with pytest.raises(TypeError, match="takes the GradLog"):
            plot_trace([1, 2])
        with pytest.raises(ValueError, match="recorded no call"):
            w = nn.Parameter(torch.ones(1))
            with GradLog(w) as log:
                pass
            plot_trace(log)
        with pytest.raises(ValueError, match="needs a description"):
            figures.DescribedFigure(lambda label: None, "")

    def test_in_chinese_the_labels_are_chinese_where_a_font_has_them(self, monkeypatch):
        monkeypatch.setenv("GM_LANG", "zh_CN")
        shown = plot_trace(momentum_run())
        assert shown.description.startswith("图：")
        ticks = [label.get_text() for label in shown.figure.axes[-1].get_xticklabels()]
        if figures.cjk_font() is None:
            assert ticks[0] == "start", "without a Chinese font the labels stay English"
        else:
            assert ticks[0] == "开始" and shown.figure.axes[0].get_title().startswith("每次调用")

    def test_without_a_chinese_font_the_labels_stay_english(self, monkeypatch):
        monkeypatch.setenv("GM_LANG", "zh_CN")
        monkeypatch.setattr(figures, "cjk_font", lambda: None)  # as on a machine without one
        shown = plot_trace(momentum_run())
        assert shown.figure.axes[-1].get_xticklabels()[0].get_text() == "start"
        assert shown.description.startswith("图：")


CALLS = (Call("backward", lambda w: w**2), Call("step"), Call("zero_grad"))


class TestTraceChecker:
    def test_the_expected_rows_are_the_real_run(self):
        check = trace_checker(1.0, torch.optim.SGD, CALLS, lr=0.5, doc="")
        log = run_trace(1.0, torch.optim.SGD, CALLS, lr=0.5)
        assert check.expected_rows == [(r.weight, r.grad) for r in log.rows[1:]]
        assert check.expected_rows == [(1.0, 2.0), (0.0, 2.0), (0.0, None)]

    def test_a_half_filled_table_is_told_where_to_go_on(self):
        check = trace_checker(1.0, torch.optim.SGD, CALLS, lr=0.5, doc="")
        result = check([(1, 2), (..., ...), (..., ...)])
        assert not result.passed and result.message.startswith("rows 1 to 1 are right. Row 2")
        assert check([(..., ...)] * 3).unanswered and check(...).unanswered

    def test_bad_input_gets_a_message_never_an_error(self):
        check = trace_checker(1.0, torch.optim.SGD, CALLS, lr=0.5, doc="")
        for bad, fragment in (
            (None, "rows must be a list"),
            ([(1, 2)], "makes 3 calls and your table has 1 rows"),
            ([(1, "2"), (0, 2), (0, None)], "not the string '2'"),
            ([(1, [2]), (0, 2), (0, None)], "write a number or None, got list"),
            ([(1,), (0, 2), (0, None)], "row 1 needs 2 values"),
        ):
            result = check(bad)
            assert not result.passed and fragment in result.message, (bad, result.message)

    def test_a_step_by_the_old_buffer_is_named(self):
        calls = (
            Call("backward", lambda w: w**2),
            Call("step"),
            Call("backward", lambda w: w**2),
            Call("step"),
        )
        check = trace_checker(3.0, torch.optim.SGD, calls, lr=0.1, momentum=0.9, doc="")
        rows = [list(row) for row in check.expected_rows]
        rows[3][0] = rows[2][0] - 0.1 * rows[2][2]  # moved by the buffer of the step before
        result = check(rows)
        assert "the buffer it held before this step" in result.message, result.message

    def test_a_call_is_checked_when_it_is_made(self):
        with pytest.raises(ValueError, match="a call is one of backward, step, zero_grad"):
            Call("forward")
        with pytest.raises(ValueError, match="needs its loss"):
            Call("backward")


class TestTieredFeedback:
    def test_the_first_wrong_answer_gets_the_question_the_second_the_explanation(self):
        first, second = check_second_backward("a"), check_second_backward("a")
        full = check_second_backward.misconceptions["a"]
        question = full.split("?")[0] + "?"
        assert (
            first.message
            == f"(a) is not it. {question} Answer again: a second wrong answer shows why."
        )
        assert second.message == f"(a) is not it. {full}"
        assert check_second_backward("b").passed
        assert "Answer again" in check_second_backward("c").message, "a right answer resets"

    def test_each_exercise_counts_its_own_wrong_answers(self):
        from helpers.autograd_accumulates.checkers_01 import check_trace_prediction

        check_second_backward("a")
        assert "Answer again" in check_trace_prediction("a").message
        assert "Answer again" not in check_second_backward("a").message


class TestChoiceChecker:
    def test_it_is_refused_unless_its_options_and_hints_fit(self):
        hints = {"b": "Does it?"}
        with pytest.raises(ValueError, match="lettered a, b"):
            choice_checker({"a": 1, "c": 2}, "a", why="", misconceptions=hints, reveal="x", doc="")
        with pytest.raises(ValueError, match="every other letter needs a hint"):
            choice_checker(
                {"a": 1, "b": 2, "c": 3}, "a", why="", misconceptions=hints, reveal="x", doc=""
            )
        with pytest.raises(ValueError, match="reveal"):
            choice_checker({"a": 1, "b": 2}, "a", why="", misconceptions=hints, reveal="", doc="")

    def test_a_text_option_is_accepted_by_its_text(self):
        hint = check_second_backward.misconceptions["a"]  # a hint the catalog translates
        check = choice_checker(
            {"a": "it adds", "b": "it replaces"}, "a", why="yes.", misconceptions={"b": hint},
            reveal="x", doc="",
        )  # fmt: skip
        assert check("It adds").passed and not check("it replaces").passed
        assert check(True).message.startswith("answer with the letter")
