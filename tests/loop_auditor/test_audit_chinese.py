"""The loop auditor in Chinese (``GM_LANG=zh_CN``): the command's report and errors, the
codes' descriptions, and bad input refused with the same cases as the English tests, each in
Chinese and still naming its codes, parameters and numbers. (Every finding and report line
the other tests make is also made again in Chinese: see conftest.py.)"""

from __future__ import annotations

import re

import pytest
import test_audit_command as command
import test_audit_rules as english_rules
import torch

from loop_auditor import CODES, rules
from loop_auditor.session import AuditSession

CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture
def chinese(monkeypatch):
    monkeypatch.setenv("GM_LANG", "zh_CN")


def cases(test) -> list:
    """The cases an English test is parametrized with."""
    [mark] = [mark for mark in test.pytestmark if mark.name == "parametrize"]
    return list(mark.args[1])


def test_the_commands_report_is_chinese_and_names_the_code_the_optimizer_and_the_numbers(
    tmp_path, chinese
):
    path = command.script(tmp_path, zero=False)
    done = command.audit_in_process(path.name, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "循环审计器：在 train.py 中发现 1 个问题（1 个优化器，4 次更新）：\n" in done.stderr
    line = done.stderr.split("\n  ", 1)[1]
    assert line.startswith("missing-zero-grad（optimizer，第 2 步，共 3 次）：第 2 步所用的 .grad")
    assert "（2 个参数中的 2 个）" in line and "optimizer.zero_grad()" in line, line


def test_the_commands_own_errors_are_chinese(tmp_path, chinese):
    """Its own messages in argparse's frame; argparse's words ("error", "argument") are
    Python's and stay as they are."""
    command.script(tmp_path)
    for args, says in [
        (["missing.py"], "error: 找不到脚本：missing.py\n"),
        (["--accumulation-steps", "0", "train.py"], "必须大于等于 1，传入的是 0\n"),
        (["--accumulation-steps", "two", "train.py"], "必须是整数，传入的是 'two'\n"),
    ]:
        done = command.audit_in_process(*args, cwd=tmp_path)
        assert done.returncode == 2 and says in done.stderr, done.stderr
    help_text = command.cli._parser().format_help()
    assert "原样运行一个 PyTorch 训练脚本" in help_text and "--exit-zero" in help_text


@pytest.mark.parametrize(
    ("test", "call"),
    [
        (english_rules.test_bad_input_is_refused_with_what_to_pass, "make"),
        (english_rules.test_allow_lists_are_checked, "check_codes"),
    ],
)
def test_bad_input_is_refused_in_chinese_with_the_same_names(
    monkeypatch, chinese_shortfalls, test, call
):
    """Each case of the English test: the same error, in Chinese, naming what the English
    names (the parameter, the codes, the values)."""
    model, optimizer = english_rules._model_and_optimizer()
    for case in cases(test):
        messages = []
        for language in ("en", "zh_CN"):
            monkeypatch.setenv("GM_LANG", language)
            with pytest.raises(case[1]) as raised:
                if call == "make":
                    case[0](model, optimizer)
                else:
                    english_rules.check_codes(case[0])
            messages.append(str(raised.value))
        assert chinese_shortfalls(*messages) == [], messages


def test_the_codes_are_the_same_and_their_descriptions_follow_the_language(monkeypatch):
    monkeypatch.delenv("GM_LANG", raising=False)
    english = dict(CODES)
    assert english["step-without-grad"] == "step() ran while no parameter had a gradient"
    monkeypatch.setenv("GM_LANG", "zh_CN")  # after the import: read at each lookup
    assert list(CODES) == list(english) and len(CODES) == 11
    assert CODES["step-without-grad"] == "step() 运行时没有任何参数有梯度"
    assert all(CJK.search(CODES[code]) for code in CODES)
    assert CODES.get("no-such-code", "-") == "-" and "window-length" in CODES
    assert repr(CODES) == repr(dict(CODES.items()))


def test_a_session_names_an_optimizer_without_a_variable_in_chinese(chinese):
    model = torch.nn.Linear(2, 1)
    with AuditSession() as session:
        [torch.optim.SGD(model.parameters(), lr=0.1) for _ in range(1)]
    assert session.auditors[0].label == "优化器 1（SGD）"
    assert str(session) == "没有发现问题（1 个优化器，0 次更新，0 次反向传播）。"
    finding = rules.leftover_at_end(2, 3, 4)
    assert "（accumulation_steps=4）" in finding.message and "第 3 步" in finding.message
