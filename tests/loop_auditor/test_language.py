"""The language of the messages (loop_auditor.language): English unless GM_LANG names
another, read at each message, and a clear error for a language there is none of."""

from __future__ import annotations

import polib
import pytest

from loop_auditor import language
from loop_auditor.language import LANGUAGES, N_, current_language, translator


@pytest.fixture
def catalog(tmp_path):
    """A domain ``demo`` whose zh_CN catalog translates one message."""
    po = polib.POFile()
    po.metadata = {"Content-Type": "text/plain; charset=UTF-8", "Language": "zh_CN"}
    po.append(polib.POEntry(msgid="{count} steps ran", msgstr="运行了 {count} 步"))
    folder = tmp_path / "locale" / "zh_CN" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    po.save_as_mofile(str(folder / "demo.mo"))
    return tmp_path / "locale"


def test_english_is_the_default_and_the_messages_as_written(catalog, monkeypatch):
    monkeypatch.delenv("GM_LANG", raising=False)
    _ = translator("demo", catalog)
    assert current_language() == "en"
    assert _("{count} steps ran").format(count=3) == "3 steps ran"


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_gm_lang_means_english(catalog, monkeypatch, value):
    monkeypatch.setenv("GM_LANG", value)
    assert current_language() == "en"
    assert translator("demo", catalog)("{count} steps ran") == "{count} steps ran"


def test_zh_cn_translates_and_a_message_the_catalog_lacks_stays_english(catalog, monkeypatch):
    monkeypatch.setenv("GM_LANG", "zh_CN")
    _ = translator("demo", catalog)
    assert _("{count} steps ran").format(count=3) == "运行了 3 步"
    assert _("not in the catalog") == "not in the catalog"


def test_the_language_is_read_when_a_message_is_shown_not_at_import(catalog, monkeypatch):
    monkeypatch.delenv("GM_LANG", raising=False)
    _ = translator("demo", catalog)
    message = N_("{count} steps ran")  # a module constant, marked where it is written
    assert _.translate(message) == "{count} steps ran"
    monkeypatch.setenv("GM_LANG", "zh_CN")  # set after the translator was made
    assert _.translate(message) == "运行了 {count} 步"
    monkeypatch.setenv("GM_LANG", "en")
    assert _(message) == message


@pytest.mark.parametrize("value", ["fr", "zh-CN", "zh_CN.UTF-8"])
def test_an_unknown_language_is_refused_with_the_available_ones(catalog, monkeypatch, value):
    monkeypatch.setenv("GM_LANG", value)
    _ = translator("demo", catalog)
    with pytest.raises(ValueError) as raised:
        _("{count} steps ran")
    message = str(raised.value)
    assert f"GM_LANG={value!r}" in message
    assert "the languages are: en, zh_CN" in message
    assert LANGUAGES == ("en", "zh_CN")


def test_a_domain_without_a_catalog_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("GM_LANG", "zh_CN")
    with pytest.raises(FileNotFoundError, match="absent"):
        translator("absent", tmp_path)("a message")
    with pytest.raises(TypeError, match="domain must be"):
        translator("", tmp_path)


def test_the_loop_auditor_and_the_course_have_their_catalogs(monkeypatch):
    from helpers.translation import _ as course

    monkeypatch.setenv("GM_LANG", "zh_CN")
    for _ in (language._, course):  # both catalogs are found and read
        assert _("") is not None
