"""What a Chinese message must keep of its English one: Chinese text, and every code span,
identifier and number the English names; and what it must not keep: an English word of the
sentence itself. The conftest's reruns in Chinese and the tests that judge a message in
Chinese use it (a module of its own, so that tests import it as they import any module, not
from a conftest)."""

from __future__ import annotations

import builtins
import functools
import re
from pathlib import Path

import polib

ROOT = Path(__file__).resolve().parent.parent
CATALOGS = (
    ROOT / "helpers" / "locale" / "zh_CN" / "LC_MESSAGES" / "helpers.po",
    ROOT / "loop_auditor" / "src" / "loop_auditor" / "locale" / "zh_CN" / "LC_MESSAGES"
    / "loop_auditor.po",
)  # fmt: skip

CJK = re.compile(r"[\u4e00-\u9fff]")
NAMED = re.compile(
    r"`[^`]+`"  # a code span
    r"|[A-Za-z_][\w.]*\([^()\s]*\)"  # a call such as backward() or scaler.step(optimizer)
    r"|[A-Za-z_]\w*(?:\.\w+)+|\.\w+"  # a dotted name: optimizer.param_groups, .grad
    r"|[A-Za-z]*_\w*"  # a name with an underscore: zero_grad, set_to_none
    r"|(?<![\w.])\d+(?:\.\d+)?(?=x(?!\w))"  # a number as a multiplier: 0.562x
    r"|(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?(?![\w])"  # a number
)


def named(message: str) -> set[str]:
    """The code spans, identifiers and numbers a message names."""
    return {token.rstrip(".") for token in NAMED.findall(message)} - {""}


# What a Chinese message may show in Latin letters besides its names: the words of a quoted
# text ('No inf checks were recorded', "..."), of an exception as Python shows it
# (ZeroDivisionError: division by zero), a path (/tmp/.../train.py), a placeholder, and a
# hyphenated name (rule ids such as clip-per-micro-batch, all-reduce).
NOT_PROSE = re.compile(
    r"\{[^{}]*\}"  # a placeholder (in a catalog's translation)
    r"|'[^'\n]*'|\"[^\"\n]*\"|“[^”\n]*”"  # a quoted text
    r"|\b[A-Z]\w*(?:Error|Exception|Warning|Interrupt)\b\s*[:：][^。；\n]*"  # an exception
    r"|\S*[/\\]\S*"  # a path, a fraction, inf/NaN
    r"|\b[A-Za-z]\w*(?:-\w+)+"  # a hyphenated name
)
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_']*")
# Python's type names, which messages show as values ("got list").
TYPE_NAMES = {name for name in dir(builtins) if isinstance(getattr(builtins, name), type)} | {
    "function", "method", "generator", "module", "ellipsis", "coroutine", "NoneType",
}  # fmt: skip


def _prose(message: str) -> str:
    """``message`` with its names, quoted texts, exceptions, paths and placeholders each
    replaced by a marker that no word matches."""
    return NAMED.sub("\1", NOT_PROSE.sub("\1", message))


@functools.cache
def kept_words() -> frozenset[str]:
    """The English words the Chinese catalogs' translations write on purpose (terms kept in
    English such as step, token, epoch, rank; option names; Python keywords): not those of a
    translation that only copies its English."""
    words = set()
    for path in CATALOGS:
        for entry in polib.pofile(str(path), wrapwidth=0):
            if entry.msgstr != entry.msgid:
                words.update(WORD.findall(_prose(entry.msgstr)))
    return frozenset(words)


def _english_prose(english: str) -> set[str]:
    """The words of an English message's own sentences: not its names, quoted texts,
    exceptions or paths, nor a list of names in parentheses ("(losses, counts)"), the names
    it begins with (a parameter, "steps must be ...", or the answer it quotes, "some, text:
    not a rule id"), or the type after "got"."""
    text = re.sub(r"\(\s*[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*\s*\)", "\0", english)
    text = re.sub(r"^\W*[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*", "\0", text)
    text = re.sub(r"\bgot\s+\w+", "\0", text)
    return set(WORD.findall(_prose(text)))


CHINESE = re.compile(r"([\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]+)")  # text, punctuation


def english_words(chinese: str, english: str) -> list[str]:
    """The English words left in the sentences of ``chinese``, the translation of
    ``english``: values the code inserted untranslated ("找出it", "在 unpadded 序列上",
    "报告 A and B。"). Such a word stands inside a Chinese sentence: in a stretch between
    Chinese text on both sides (not at the message's start or end, not right after a colon,
    where messages show values: "：bias"), among at most two words of prose (more are a text
    both messages quote, such as an error of gloo). It is a lower-case word of two letters or
    more, no name or type name, that the English message uses in its own sentences and that
    no translation in the catalogs writes (as they write step, token or epoch)."""
    prose = _english_prose(english)
    parts = CHINESE.split(_prose(chinese))  # [latin, chinese, latin, ..., latin]
    found = []
    for i in range(2, len(parts) - 1, 2):
        left, right = parts[i - 1][-1], parts[i + 1][:1]
        words = WORD.findall(parts[i])
        if not right or left in "：:" or not 1 <= len(words) <= 2:
            continue
        found += [
            word
            for word in words
            if len(word) > 1
            and word.isalpha()
            and word.islower()
            and word in prose
            and word not in kept_words()
            and word not in TYPE_NAMES
        ]
    return found


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
    untranslated = english_words(chinese.message, english.message)
    if untranslated:
        found.append(f"the Chinese message has English words {untranslated}")
    return found
