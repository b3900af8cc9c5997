"""Every loop auditor message these tests see in English is also made in Chinese.

While a test runs, each call of what writes the auditor's text is recorded: every rule of
:mod:`loop_auditor.rules` (each finding's message and advice), :func:`left_out.describe`
(a parameter no module names), the report's lines (``AuditSession.report``, the command's
and the pytest fixture's reports, ``str()`` of an auditor or a session, whose findings keep
the English messages they were made with) and ``str()`` of a finding. After the test passed,
each call is made again with ``GM_LANG=zh_CN``: a rule must give the same finding (code,
step, count) and every text must be Chinese, still name every code span, identifier and
number its English names (``named`` of tests/conftest.py, as for the checkers' verdicts), and
keep no English word in its sentences (``english_words``, likewise).
``GM_CHINESE_RERUN=0`` turns this off, as it does there.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
from pathlib import Path

import pytest

from loop_auditor import rules
from loop_auditor.findings import Finding

COURSE_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
# An English plural, "pass(es)" or "finding(s)", looks like a call to ``named``: not a name.
PLURAL = re.compile(r"\w+\((?:e?s)\)")


def _rules() -> list[tuple[object, str]]:
    return [
        (rules, name)
        for name, function in vars(rules).items()
        if inspect.isfunction(function)
        and function.__module__ == rules.__name__
        and not name.startswith("_")
    ]


def _texts() -> list[tuple[object, str]]:
    """The functions and methods that write text, in the modules the test has imported (the
    auditor's modules that import torch are imported by the tests that use them)."""
    found = [(Finding, "__str__")]
    modules = {name: sys.modules.get(f"loop_auditor.{name}") for name in _TEXTS}
    for name, attributes in _TEXTS.items():
        module = modules[name]
        if module is None:
            continue
        for attribute in attributes:
            owner_name, _dot, function = attribute.rpartition(".")
            owner = getattr(module, owner_name) if owner_name else module
            found.append((owner, function))
    return found


_TEXTS = {
    "left_out": ["describe"],
    "session": ["AuditSession.report", "AuditSession.__str__"],
    "auditor": ["LoopAuditor.__str__"],
    "cli": ["_report"],
    "pytest_plugin": ["_report"],
}


def _course(config):
    """tests/conftest.py (every conftest module outside a package is named ``conftest``)."""
    for plugin in config.pluginmanager.get_plugins():
        if Path(getattr(plugin, "__file__", "") or "").resolve() == COURSE_CONFTEST:
            return plugin
    raise LookupError(f"{COURSE_CONFTEST} is not loaded")


def _recording(function, calls: list, is_rule: bool):
    @functools.wraps(function)
    def recorded(*args, **kwargs):
        result = function(*args, **kwargs)
        if result is not None:
            calls.append((function, args, kwargs, result, is_rule))
        return result

    return recorded


def chinese_differences(course, english, chinese, is_rule: bool) -> list[str]:
    """How a text (or a rule's finding) made in Chinese falls short of its English."""
    found = []
    if is_rule:
        same = (chinese.code, chinese.step, chinese.count)
        if same != (english.code, english.step, english.count):
            return [f"a different finding in Chinese: {same}"]
        english, chinese = english.message, chinese.message
    if english and not course.CJK.search(chinese):
        found.append("the text is not Chinese")
    lost = {t for t in course.named(english) - course.named(chinese) if not PLURAL.fullmatch(t)}
    if lost:
        found.append(f"the Chinese text lacks {sorted(lost)}")
    untranslated = course.english_words(chinese, english)
    if untranslated:
        found.append(f"the Chinese text has English words {untranslated}")
    return found


@pytest.fixture
def chinese_shortfalls(request):
    """``chinese_shortfalls(english, chinese)``: how a Chinese text falls short of its English
    (not Chinese, or a code span, identifier or number of the English missing); [] if none."""
    course = _course(request.config)
    return lambda english, chinese: chinese_differences(course, english, chinese, False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if os.environ.get("GM_CHINESE_RERUN") == "0" or os.environ.get("GM_LANG"):
        return (yield)
    calls: list = []
    patch = pytest.MonkeyPatch()
    for owner, name in _rules() + _texts():
        original = inspect.getattr_static(owner, name)
        patch.setattr(owner, name, _recording(original, calls, is_rule=owner is rules))
    try:
        outcome = yield
    finally:
        patch.undo()
    if not calls:
        return outcome
    course, problems = _course(item.config), []
    os.environ["GM_LANG"] = "zh_CN"
    try:
        for function, args, kwargs, english, is_rule in calls:
            chinese = function(*args, **kwargs)
            shown = [text.message if is_rule else text for text in (english, chinese)]
            problems += [
                f"{function.__qualname__}: {problem}\n  en: {shown[0]}\n  zh: {shown[1]}"
                for problem in chinese_differences(course, english, chinese, is_rule)
            ]
    finally:
        del os.environ["GM_LANG"]
    if problems:
        pytest.fail("in Chinese:\n" + "\n".join(problems), pytrace=False)
    return outcome
