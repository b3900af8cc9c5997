"""What a Chinese message must keep of its English one: Chinese text, and every code span,
identifier and number the English names. The conftest's reruns in Chinese and the tests that
judge a message in Chinese use it (a module of its own, so that tests import it as they import
any module, not from a conftest)."""

from __future__ import annotations

import re

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
