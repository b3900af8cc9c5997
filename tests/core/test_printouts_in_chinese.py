"""What the helpers print for the learner, in the Chinese edition (GM_LANG=zh_CN): the
claims' own words around the notebook's claim, notebook 00's environment report, the setup
cell's stop, the table of notebook 02 (still aligned) and report.below. Numbers, commands and
code stay as they are; English is the default and unchanged (the other tests)."""

from __future__ import annotations

import pytest
import torch
from chinese_messages import CJK, english_words, named

from helpers.claims import check
from helpers.report import below, pad, width
from helpers.setup_check.environment import CheckLine, torch_line
from helpers.training_stacks.uneven_ranks import stop_words
from helpers.versions import torch_verdict, why_it_cannot_run
from helpers.zero_grad_internals.optimizer_steps import SecondStep, format_second_steps


@pytest.fixture
def chinese(monkeypatch):
    monkeypatch.setenv("GM_LANG", "zh_CN")


def in_both(monkeypatch, make):
    """``make()`` in English, then in Chinese."""
    monkeypatch.delenv("GM_LANG", raising=False)
    english = make()
    monkeypatch.setenv("GM_LANG", "zh_CN")
    return english, make()


def test_a_claim_keeps_its_words_and_the_check_speaks_chinese(chinese, capsys):
    check("w.grad after two backward() calls", torch.tensor(4.0), 4.0)
    check("accumulated = full batch", 1.0, 1.0 + 1e-9, atol=1e-6)
    assert capsys.readouterr().out.splitlines() == [
        "✓ w.grad after two backward() calls == 4.0",
        "✓ accumulated = full batch（最大差异 < 1e-6）",
    ]
    with pytest.raises(AssertionError, match=r"✗ w\.grad：得到 3\.0，应为 4\.0"):
        check("w.grad", torch.tensor(3.0), 4.0)
    with pytest.raises(AssertionError, match="✗ w is a leaf：不成立"):
        check("w is a leaf", False)


def test_the_environment_report_and_the_setup_stop_name_the_same_versions(monkeypatch):
    def report():
        return [
            str(torch_line("2.4.0")),
            str(torch_line(None)),
            str(CheckLine("ipywidgets", None, "FAIL", "python -m pip install -U ipywidgets")),
            why_it_cannot_run("08_training_stacks", torch="2.6.0"),
            why_it_cannot_run("03_gradient_accumulation", python="3.10.12", torch="2.13.0"),
            below(3e-5, 1e-6),
        ]

    for english, chinese in zip(*in_both(monkeypatch, report), strict=True):
        assert CJK.search(chinese), chinese
        assert named(english) <= named(chinese), (english, chinese)
        assert english.split()[0] in chinese  # the [WARN]/[FAIL] tag, or the notebook


def test_a_stopped_ranks_words_and_every_torch_verdict_are_chinese(monkeypatch):
    def words():
        return [
            *stop_words(0, [3, 2], 1.5, micro_batch=3),  # message, explanation
            stop_words(1, [3, 2], 1.5)[0],  # at the barrier
            torch_verdict("2.2.0")[1],  # no notebook runs on it
            torch_verdict("2.6.0")[1],
            why_it_cannot_run("00_setup_check", python="3.10.13"),
        ]

    english, chinese = in_both(monkeypatch, words)
    for en, zh in zip(english, chinese, strict=True):
        assert CJK.search(zh) and named(en) <= named(zh), (en, zh)
        assert not english_words(zh, en), (en, zh)
    assert english[0] == (
        "RuntimeError: rank 0 waited 1.5 s in the gradient all-reduce of its micro-batch 3 of "
        "3, which no other rank joined. The ranks ran unequal numbers of micro-batches (rank 0: "
        "3, rank 1: 2); " + english[1].split("); ", 1)[1]
    )
    assert "in the barrier after its 2 micro-batches" in english[2]
    for message, explanation in ((english[0], english[1]), (chinese[0], chinese[1])):
        # one line: the exception the launcher quotes; the explanation is its end
        assert message.startswith("RuntimeError: ") and message.endswith(explanation)
        assert "\n" not in message
    assert chinese[5] == (
        "Notebook 00 无法运行，当前 Python 为 3.10.13：本课程需要 Python 3.11 及以上版本 -> 用 "
        "Python 3.11 及以上版本新建一个环境，并在其中安装本课程。"
    )


def test_an_english_word_left_in_a_chinese_sentence_is_found():
    """english_words, which the reruns in Chinese apply to every verdict, error and auditor
    text: a value inserted untranslated is found; names, values and quoted texts are not."""
    found = [
        ("找出them：`print(audit_loop(loop_b))` 会打印报告。修复them，然后再检查。",
         "Find them: `print(audit_loop(loop_b))` prints the report. Fix them, and check again."),
        ("❌ 还不对。对于 unpadded 序列，窗口 1 的梯度",
         "❌ Not yet: with unpadded sequences, window 1's gradient"),
        ("审计器报告 clip-per-micro-batch and leftover-gradients。这个循环",
         "the auditor reports clip-per-micro-batch and leftover-gradients. The loop"),
    ]  # fmt: skip
    assert [english_words(zh, en) for zh, en in found] == [["them", "them"], ["unpadded"], ["and"]]
    fine = [
        ("先调用 step，再调用 update，每个窗口各一次。", "step first, then update, once a window."),
        ("所以 step() 永远不会更新它们：bias。请在", "so step() never updates them: bias. Build"),
        ("repeats 必须至少为 1，实际传入的是 0", "repeats must be at least 1, got 0"),
        ("调用方式是 window_loss(losses, counts)：给它 2 个参数（losses, counts）",
         "it is called as window_loss(losses, counts): give it 2 parameters (losses, counts)"),
        ("你的函数抛出了 ZeroDivisionError: division by zero。有东西被零除了",
         "your function raised ZeroDivisionError: division by zero. something was divided"),
        ("（gloo 报告：Connection closed by peer）：每个 rank",
         "(gloo reported: Connection closed by peer): every rank"),
        ("两次（torch：'unscale_() has already been called'）：每个窗口",
         "twice (torch: 'unscale_() has already been called'): unscale"),
        ("循环 A 返回一个数；你的返回了 list。", "loop A returns a number; yours returned list."),
    ]  # fmt: skip
    assert [english_words(zh, en) for zh, en in fine] == [[]] * len(fine)


def test_the_table_of_second_steps_stays_aligned_in_chinese(monkeypatch):
    rows = [
        SecondStep("SGD", "None", 0.95, 0.95, None, None),
        SecondStep("Adam", "zeros", 0.9, 0.8141, 2, 0.045),
    ]
    english, chinese = in_both(monkeypatch, lambda: format_second_steps(rows))
    assert CJK.search(chinese.splitlines()[0]) and "是" in chinese
    for table in (english, chinese):  # every line as wide as the header, on screen
        assert len({width(line) for line in table.splitlines()}) == 1, table
    assert [line.split()[-2:] for line in english.splitlines()[1:]] == [
        line.split()[-2:] for line in chinese.splitlines()[1:]
    ]


def test_pad_counts_a_chinese_character_as_two_columns():
    assert pad("ab", 4) == "ab  " and pad("ab", 4, ">") == "  ab"
    assert pad("优化", 6) == "优化  " and width("优化器") == 6
    assert pad("toolong", 3) == "toolong"
    with pytest.raises(ValueError, match="align must be '<' or '>'"):
        pad("a", 3, "^")
