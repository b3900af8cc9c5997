import contextlib
import os
import re
import time
from pathlib import Path

import pytest

# The suite's numbers are compared with CPU-made outputs; unit tests use the CPU too.
os.environ.setdefault("GM_DEVICE", "cpu")

# Under pytest-xdist (the README's test command) there are as many workers as cores: one
# torch thread each, and in the notebook kernels and processes they start, keeps them from
# competing for the cores (the outputs hold on one thread: CI checks them so).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture
def strict_checks(monkeypatch):
    """Failing exercise checks raise instead of returning a result."""
    monkeypatch.setenv("GM_STRICT_CHECKS", "1")


# Every checker verdict the tests see in English is also checked in Chinese: while a test
# runs, each call of an exercise checker (helpers.checks.checker) is recorded, and after the
# test passed each call that took under CHINESE_RERUN_SECONDS is made again with
# GM_LANG=zh_CN. Its verdict must be the same, its message Chinese, and it must still name its
# mistake: every code span, identifier and number of the English message is in the Chinese
# one; and no English word may be left in its sentences (an untranslated value, "找出it":
# chinese_messages.english_words). GM_CHINESE_RERUN=0 turns this off. (check_capstone's calls
# take longer and are not rerun: tests/capstone/test_capstone.py judges its runs' results
# again in Chinese.)
CHINESE_RERUN_SECONDS = 0.5
from chinese_messages import CJK, chinese_differences, english_words, named  # noqa: E402

# The same for the helpers' bad-input errors: a test that passed, took under
# CHINESE_RERUN_SECONDS and caught with pytest.raises a ValueError or TypeError raised in
# helpers/ runs again with GM_LANG=zh_CN, its pytest.raises then ignoring match= (which is
# English). Each error it catches there must be of the same type as the English one, in
# Chinese (no English word left in its sentences), and name the same code, numbers and
# quoted values, and the parameters of the function that raised which the English names as
# parameters (its first word, or a word before "=" or "["). Where the rerun stops early at an
# assertion (a later English assertion on a message), the errors caught up to there are
# compared, if any.
HELPERS = Path(__file__).resolve().parent.parent / "helpers"
# Functions whose errors stay English: the notebooks show their source (show_source), which
# is part of the English notebooks' outputs.
SHOWN_SOURCES = {"backward_window", "reference_run"}
QUOTED = re.compile(r"'[^'\s]*'|\"[^\"\s]*\"")  # a value as repr() shows it: 'mean'
ABBREVIATIONS = {"e.g", "i.e"}


def helpers_error(error: BaseException) -> tuple | None:
    """``(type, message, the raising function's parameter names)`` for a ValueError or
    TypeError raised in helpers/, else None."""
    if not isinstance(error, (ValueError, TypeError)):
        return None
    traceback = error.__traceback__
    while traceback is not None and traceback.tb_next is not None:
        traceback = traceback.tb_next
    if traceback is None or HELPERS not in Path(traceback.tb_frame.f_code.co_filename).parents:
        return None
    code = traceback.tb_frame.f_code
    if code.co_name in SHOWN_SOURCES:
        return None
    parameters = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return type(error), str(error), parameters


def error_differences(english: tuple, chinese: tuple) -> list[str]:
    """How an error in Chinese falls short of the same error in English."""
    (kind, message, parameters), (kind_zh, message_zh, _parameters) = english, chinese
    if kind_zh is not kind:
        return [f"raised {kind_zh.__name__} in Chinese, {kind.__name__} in English"]
    found = [] if CJK.search(message_zh) else ["the message is not Chinese"]
    # a parameter named as one: the message's first word, or a word before "=" or "["
    words = set(re.findall(r"^\w+|\w+(?=[=\[])", message))
    shown = (named(message) - ABBREVIATIONS) | set(QUOTED.findall(message))
    shown |= words & set(parameters)
    lost = {token for token in shown if token not in message_zh}
    if lost:
        found.append(f"the Chinese message lacks {sorted(lost)}")
    untranslated = english_words(message_zh, message)
    if untranslated:
        found.append(f"the Chinese message has English words {untranslated}")
    return found


@contextlib.contextmanager
def recording_raises(errors: list, ignore_match: bool):
    """``pytest.raises`` that also appends to ``errors`` what :func:`helpers_error` makes of
    each exception it catches; with ``ignore_match``, its ``match=`` is left out."""
    raises = pytest.raises

    def recording(expected, *args, **kwargs):
        if ignore_match:
            kwargs.pop("match", None)
        if args:  # pytest.raises(Error, function, *arguments)
            info = raises(expected, *args, **kwargs)
            errors.append(helpers_error(info.value))
            return info
        return _recorded(raises(expected, **kwargs), errors)

    pytest.raises = recording
    try:
        yield
    finally:
        pytest.raises = raises


@contextlib.contextmanager
def _recorded(context, errors: list):
    with context as info:
        yield info
    errors.append(helpers_error(info.value))


def rerun_errors_in_chinese(item, english: list) -> list[str]:
    """Run ``item`` again with GM_LANG=zh_CN and compare the errors it catches."""
    chinese: list = []
    stopped = None
    with recording_raises(chinese, ignore_match=True):
        try:
            item.runtest()
        except Exception as error:  # an English assertion after pytest.raises, say
            stopped = error
    pairs = [(en, zh) for en, zh in zip(english, chinese, strict=False) if en is not None]
    if stopped is not None and not isinstance(stopped, AssertionError):
        return [f"the rerun in Chinese raised {stopped!r}"]
    return [
        f"{en[0].__name__}: {problem}\n  en: {en[1]}\n  zh: {zh[1] if zh else None}"
        for en, zh in pairs
        for problem in (error_differences(en, zh) if zh else ["no helpers error in Chinese"])
    ]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    from helpers import checks

    if os.environ.get("GM_CHINESE_RERUN") == "0" or os.environ.get("GM_LANG"):
        checks.WRONG_SO_FAR.clear()
        return (yield)
    calls, errors = [], []

    def observe(check, args, kwargs, result, seconds):
        if seconds < CHINESE_RERUN_SECONDS:
            calls.append((check, args, kwargs, result))

    checks.WRONG_SO_FAR.clear()  # each test starts with exercises not answered wrong yet
    checks.OBSERVERS.append(observe)
    started = time.perf_counter()
    try:
        with recording_raises(errors, ignore_match=False):
            outcome = yield
    finally:
        checks.OBSERVERS.remove(observe)
    took = time.perf_counter() - started
    problems = []
    os.environ["GM_LANG"] = "zh_CN"
    try:
        for check, args, kwargs, english in calls:
            checks.WRONG_SO_FAR[id(check)] = english.wrong_before  # the same tier of hint
            try:
                chinese = check(*args, **kwargs)
            except AssertionError as error:  # strict mode: a failing check raises
                chinese = checks.CheckResult(False, str(error))
            problems += [
                f"{check.__name__}: {problem}\n  en: {english.message}\n  zh: {chinese.message}"
                for problem in chinese_differences(english, chinese)
            ]
        if any(errors) and took < CHINESE_RERUN_SECONDS:
            problems += rerun_errors_in_chinese(item, errors)
    finally:
        del os.environ["GM_LANG"]
    if problems:
        pytest.fail("in Chinese:\n" + "\n".join(problems), pytrace=False)
    return outcome
