import os
import re

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
# one. GM_CHINESE_RERUN=0 turns this off. (check_capstone's calls take longer and are not
# rerun: tests/capstone/test_capstone.py judges its runs' results again in Chinese.)
CHINESE_RERUN_SECONDS = 0.5
CJK = re.compile(r"[\u4e00-\u9fff]")
NAMED = re.compile(
    r"`[^`]+`"  # a code span
    r"|[A-Za-z_][\w.]*\([^()\s]*\)"  # a call such as backward() or scaler.step(optimizer)
    r"|[A-Za-z_]\w*(?:\.\w+)+|\.\w+"  # a dotted name: optimizer.param_groups, .grad
    r"|[A-Za-z]*_\w*"  # a name with an underscore: zero_grad, set_to_none
    r"|(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?(?![\w])"  # a number
)


def named(message: str) -> set[str]:
    """The code spans, identifiers and numbers a message names."""
    return {token.rstrip(".") for token in NAMED.findall(message)} - {""}


def chinese_differences(english, chinese) -> list[str]:
    """How a verdict in Chinese falls short of the same verdict in English."""
    if chinese.passed != english.passed:
        return [f"passed {chinese.passed} in Chinese, {english.passed} in English"]
    found = []
    if english.message and not CJK.search(chinese.message):
        found.append("the message is not Chinese")
    lost = named(english.message) - named(chinese.message)
    if lost:
        found.append(f"the Chinese message lacks {sorted(lost)}")
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    from helpers import checks

    if os.environ.get("GM_CHINESE_RERUN") == "0" or os.environ.get("GM_LANG"):
        return (yield)
    calls = []

    def observe(check, args, kwargs, result, seconds):
        if seconds < CHINESE_RERUN_SECONDS:
            calls.append((check, args, kwargs, result))

    checks.OBSERVERS.append(observe)
    try:
        outcome = yield
    finally:
        checks.OBSERVERS.remove(observe)
    problems = []
    os.environ["GM_LANG"] = "zh_CN"
    try:
        for check, args, kwargs, english in calls:
            try:
                chinese = check(*args, **kwargs)
            except AssertionError as error:  # strict mode: a failing check raises
                chinese = checks.CheckResult(False, str(error))
            problems += [
                f"{check.__name__}: {problem}\n  en: {english.message}\n  zh: {chinese.message}"
                for problem in chinese_differences(english, chinese)
            ]
    finally:
        del os.environ["GM_LANG"]
    if problems:
        pytest.fail("in Chinese:\n" + "\n".join(problems), pytrace=False)
    return outcome
