"""tools/translate_documents.py: the Chinese edition's documents (README.zh-CN.md,
workshop/zh-CN/), their catalogs, their check and their build.

The repository's own documents are checked first; then each rule on a small README and setup
page made in tmp_path."""

from __future__ import annotations

import polib
import pytest
import translate_documents as td
import translate_notebooks as tn
import translation
from course import ROOT

GLOSSARY = """\
# Glossary

## 简体中文术语

| English | 中文 | 说明 |
|---|---|---|
| gradient | 梯度 | |
"""
README = """\
# Demo course

简体中文：[README.zh-CN.md](README.zh-CN.md)

A course about the gradient. Start with [the setup page](workshop/setup.md#install) or
[notebook 00](notebooks/00_demo.ipynb); see [Quick start](#quick-start) and [the
guide](workshop/guide.md).

## Quick start

Run `pip install x` to get $2x$:

```bash
pip install x  # the package

echo done
```

```bash
ls
```

<!-- a marker -->
"""
SETUP = """\
# Setup

## Install

See [the README](../README.md#quick-start) at <https://example.com/a>.
"""
README_ZH = {
    "demo-course": "# 演示课程",
    "demo-course.2": (
        "一门讲梯度的课程。先看[设置页面](workshop/setup.md#install)或\n"
        "[notebook 00](notebooks/00_demo.ipynb)；参见[快速开始](#quick-start)和"
        "[指南](workshop/guide.md)。"
    ),
    "quick-start": "## 快速开始",
    "quick-start.1": "运行 `pip install x`，得到 $2x$：",
    "quick-start.2": "```bash\npip install x  # 这个包\n\necho done\n```",
}
SETUP_ZH = {
    "setup": "# 设置",
    "install": "## 安装",
    "install.1": "参见 [README](../README.md#quick-start) 和 <https://example.com/a>。",
}


def translate(path, texts):
    """Set the msgstr of the entries whose block key is in ``texts``."""
    catalog = polib.pofile(str(path), wrapwidth=0)
    for entry in catalog:
        key = entry.msgctxt.split()[0]
        if key in texts:
            entry.msgstr = texts[key]
    catalog.save(str(path))


@pytest.fixture
def edition(tmp_path):
    """A README and a setup page, both translated, and notebook 00's catalog (so a Chinese
    notebook 00)."""
    (tmp_path / "README.md").write_text(README, encoding="utf-8")
    (tmp_path / "workshop").mkdir()
    (tmp_path / "workshop" / "setup.md").write_text(SETUP, encoding="utf-8")
    glossary = tmp_path / "workshop" / "glossary.md"
    glossary.write_text(GLOSSARY, encoding="utf-8")
    notebook_catalogs = tmp_path / "notebooks" / "zh-CN" / "catalog"
    notebook_catalogs.mkdir(parents=True)
    (notebook_catalogs / "00_demo.po").write_text("", encoding="utf-8")
    made = td.Edition(
        root=tmp_path,
        documents={"README.md": "README.zh-CN.md", "workshop/setup.md": "workshop/zh-CN/setup.md"},
        catalogs=tmp_path / "workshop" / "zh-CN" / "catalog",
        glossary=glossary,
        notebook_catalogs=notebook_catalogs,
    )
    assert td.extract("README.md", made) == {"new": 5, "stale": 0, "unchanged": 0}
    assert td.extract("workshop/setup.md", made)["new"] == 3
    translate(made.catalog("README.md"), README_ZH)
    translate(made.catalog("workshop/setup.md"), SETUP_ZH)
    return made


# ------------------------------------------------------------------ the repository
def test_the_repositorys_documents_pass_and_their_chinese_documents_are_what_build_writes():
    assert td.check() == []
    assert td.build(check_only=True) == [], "run: python tools/translate_notebooks.py build"
    for english, chinese in td.CHINESE_DOCUMENTS.items():
        assert (ROOT / english).exists() and (ROOT / chinese).exists()
        assert td.EDITION.catalog(english).exists()
        assert chinese == "README.zh-CN.md" or chinese.startswith("workshop/zh-CN/")


def test_the_readme_and_its_chinese_edition_link_to_each_other_in_their_first_lines():
    english = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:4]
    chinese = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8").splitlines()[:5]
    assert "简体中文：[README.zh-CN.md](README.zh-CN.md)" in english
    assert "English: [README.md](README.md)" in chinese


# ------------------------------------------------------------------ blocks and extract
def test_blocks_split_on_blank_lines_outside_fences_and_are_keyed_by_their_heading():
    lines, blocks = td.split_blocks(README)
    assert "\n".join(lines) == README
    assert [b.key for b in blocks] == [
        "demo-course", "demo-course.1", "demo-course.2",
        "quick-start", "quick-start.1", "quick-start.2", "quick-start.3", "quick-start.4",
    ]  # fmt: skip
    assert [b.kind for b in blocks] == [
        "heading", "paragraph", "paragraph", "heading", "paragraph", "fenced block",
        "fenced block", "HTML block",
    ]  # fmt: skip
    assert blocks[5].source.count("\n\n") == 1, "a blank line inside a fence stays in it"
    _, twice = td.split_blocks("# A\n\n## Notes\n\nx\n\n## Notes\n\ny\n")
    assert [b.key for b in twice] == ["a", "notes", "notes.1", "notes-1", "notes-1.1"]


def test_extract_skips_code_without_comments_comments_and_the_link_to_the_chinese(edition):
    catalog = polib.pofile(str(edition.catalog("README.md")))
    assert [e.msgctxt.split()[0] for e in catalog] == list(README_ZH)
    entry = catalog[1]
    _, blocks = td.split_blocks(README)
    assert entry.msgctxt == f"demo-course.2 {translation.source_hash(blocks[2].source)}"
    assert entry.msgid == blocks[2].source
    assert edition.catalog("workshop/setup.md") == edition.catalogs / "setup.po"
    assert edition.catalog("workshop/notes/01_x.md") == edition.catalogs / "notes" / "01_x.po"
    with pytest.raises(ValueError, match="add it to CHINESE_DOCUMENTS"):
        td.extract("workshop/other.md", edition)


def test_extract_keeps_a_changed_blocks_translation_fuzzy_and_a_moved_blocks_as_it_is(edition):
    path = edition.root / "README.md"
    changed = README.replace("Run `pip install x`", "Now run `pip install x`")
    changed = changed.replace("## Quick start\n\n", "## Quick start\n\nA new paragraph.\n\n")
    path.write_text(changed, encoding="utf-8")
    assert td.extract("README.md", edition) == {"new": 1, "stale": 1, "unchanged": 4}
    entries = {e.msgctxt.split()[0]: e for e in polib.pofile(str(edition.catalog("README.md")))}
    assert entries["quick-start.3"].msgstr == README_ZH["quick-start.2"], "moved: kept"
    assert "fuzzy" in entries["quick-start.2"].flags  # "Now run ...": the old text, fuzzy
    assert entries["quick-start.2"].msgstr == README_ZH["quick-start.1"], "found by likeness"
    assert entries["quick-start.2"].previous_msgid.startswith("Run `pip install x`")
    assert entries["quick-start.1"].msgstr == "" and entries["quick-start.1"].msgid == (
        "A new paragraph."
    )
    found = td.check(edition)
    assert any("README.md, block quick-start.1 " in p and "not translated yet" in p for p in found)
    assert any("README.md, block quick-start.2 " in p and "fuzzy" in p for p in found)


# ------------------------------------------------------------------ check: bad input
def set_readme(key, text):
    def change(made):
        translate(made.catalog("README.md"), {key: text})

    return change


def edit_english(made):
    path = made.root / "README.md"
    path.write_text(README.replace("get $2x$", "get $2x$ at once"), encoding="utf-8")


def add_block(made):
    path = made.root / "README.md"
    path.write_text(README + "\nOne more paragraph.\n", encoding="utf-8")


def add_ghost_entry(made):
    catalog = polib.pofile(str(made.catalog("README.md")))
    catalog.append(polib.POEntry(msgctxt="gone.3 0123456789ab", msgid="Gone.", msgstr="没了。"))
    catalog.save(str(made.catalog("README.md")))


def zh(key, old, new):
    return set_readme(key, README_ZH[key].replace(old, new))


BAD = [
    ("gone.3", add_ghost_entry, "no block has this key in README.md"),
    ("quick-start.1", zh("quick-start.1", "`pip install x`", "pip install x"),
     "drops or changes the code span 'pip install x'"),
    ("quick-start.1", zh("quick-start.1", "$2x$", "$2y$"),
     "drops or changes the formula '$2x$'; it has '$2y$' instead"),
    ("demo-course.2", zh("demo-course.2", "#install", "#setup"),
     "drops or changes the link target 'workshop/setup.md#install'"),
    ("demo-course.2", zh("demo-course.2", "workshop/setup.md", "workshop/zh-CN/setup.md"),
     "keep the English targets: build rewrites them for workshop/zh-CN"),
    ("quick-start.2", zh("quick-start.2", "install x", "install y"),
     "drops or changes the fenced code block '```bash"),
    ("demo-course.2", zh("demo-course.2", "梯度", "坡度"),
     "the English says 'gradient': use the glossary's term 梯度"),
    ("quick-start", set_readme("quick-start", "### 快速开始"),
     "a heading of level 2: the translation must be one too"),
    ("demo-course.2", set_readme("demo-course.2", ""), "not translated yet"),
    ("quick-start.1", set_readme("quick-start.1", "Run `pip install x` to get $2x$:"),
     "is the English text: not translated"),
    ("quick-start.1", edit_english, "stale: the English block changed"),
    ("quick-start.5", add_block, "no entry: run extract README.md"),
]  # fmt: skip


@pytest.mark.parametrize(("key", "change", "message"), BAD, ids=[m[:40] for *_, m in BAD])
def test_check_names_the_document_and_the_block_of_each_bad_entry(edition, key, change, message):
    assert td.check(edition) == []
    change(edition)
    found = td.check(edition)
    assert len(found) == 1, found
    assert found[0].startswith("workshop/zh-CN/catalog/README.po: README.md, block ")
    assert f"README.md, block {key} " in found[0]
    assert message in found[0]
    assert td.build(edition=edition) == found, "build writes nothing while there are problems"
    assert not (edition.root / "README.zh-CN.md").exists()


def test_a_missing_catalog_and_a_catalog_of_an_unlisted_document_are_named(edition):
    edition.catalog("workshop/setup.md").unlink()
    (edition.catalogs / "notes").mkdir()
    (edition.catalogs / "notes" / "00_x.po").write_text("", encoding="utf-8")
    found = td.check(edition)
    assert found == [
        "workshop/zh-CN/catalog/setup.po: missing; run extract workshop/setup.md",
        "workshop/zh-CN/catalog/notes/00_x.po: no document of CHINESE_DOCUMENTS has this "
        "catalog: remove it, or list its document in tools/translate_documents.py",
    ]


# ------------------------------------------------------------------ build
def test_build_writes_the_chinese_documents_with_links_to_their_chinese_counterparts(edition):
    assert td.build(edition=edition) == []
    readme = (edition.root / "README.zh-CN.md").read_text(encoding="utf-8")
    assert readme == (
        "<!-- Generated by tools/translate_notebooks.py build from README.md and "
        "workshop/zh-CN/catalog/README.po: edit those, never this file. -->\n"
        "# 演示课程\n\n"
        "English: [README.md](README.md)\n\n"
        "一门讲梯度的课程。先看[设置页面](workshop/zh-CN/setup.md#安装)或\n"
        "[notebook 00](notebooks/zh-CN/00_demo.ipynb)；参见[快速开始](#快速开始)和"
        "[指南](workshop/guide.md)。\n\n"
        "## 快速开始\n\n"
        "运行 `pip install x`，得到 $2x$：\n\n"
        "```bash\npip install x  # 这个包\n\necho done\n```\n\n"
        "```bash\nls\n```\n\n"
        "<!-- a marker -->\n"
    )
    setup = (edition.root / "workshop" / "zh-CN" / "setup.md").read_text(encoding="utf-8")
    assert setup.split("\n")[1:] == [
        "# 设置",
        "",
        "English: [setup.md](../setup.md)",  # no line links to the Chinese: after the title
        "",
        "## 安装",
        "",
        "参见 [README](../../README.zh-CN.md#快速开始) 和 <https://example.com/a>。",
        "",
    ]
    assert td.build(check_only=True, edition=edition) == []
    (edition.root / "workshop" / "setup.md").write_text(SETUP.replace("# Setup\n\n", ""))
    td.extract("workshop/setup.md", edition)
    assert td.build(edition=edition) == []
    setup = (edition.root / "workshop" / "zh-CN" / "setup.md").read_text(encoding="utf-8")
    assert "English:" not in setup, "a document without a title (a note) has no link back"


def test_build_check_names_a_hand_edited_missing_or_orphaned_chinese_document(edition):
    assert td.build(check_only=True, edition=edition) == [
        "README.zh-CN.md: missing; run python tools/translate_notebooks.py build",
        "workshop/zh-CN/setup.md: missing; run python tools/translate_notebooks.py build",
    ]
    assert td.build(edition=edition) == []
    path = edition.root / "README.zh-CN.md"
    path.write_text(path.read_text(encoding="utf-8").replace("快速开始\n", "快速上手\n"))
    (edition.root / "workshop" / "zh-CN" / "old.md").write_text("旧的", encoding="utf-8")
    assert td.build(check_only=True, edition=edition) == [
        "README.zh-CN.md: differs from what build writes (from line 9): run "
        "python tools/translate_notebooks.py build",
        "workshop/zh-CN/old.md: no document of CHINESE_DOCUMENTS is built here: remove it",
    ]


def test_a_chinese_document_another_tool_writes_is_left_be_and_linked_where_it_exists(edition):
    """As tools/build_workshop.py writes the Chinese instructor guide (WRITTEN_ELSEWHERE)."""
    edition.elsewhere = {"workshop/guide.md": "workshop/zh-CN/guide.md"}
    assert td.build(edition=edition) == []
    readme = edition.root / "README.zh-CN.md"
    assert "[指南](workshop/guide.md)" in readme.read_text(encoding="utf-8"), "none yet"
    guide = edition.root / "workshop" / "zh-CN" / "guide.md"
    guide.write_text("# 指南\n", encoding="utf-8")
    [problem] = td.build(check_only=True, edition=edition)
    assert problem.startswith("README.zh-CN.md: differs from what build writes (from line 7)")
    assert td.build(edition=edition) == [], "not a stray document of workshop/zh-CN/"
    assert "[指南](workshop/zh-CN/guide.md)" in readme.read_text(encoding="utf-8")
    assert guide.read_text(encoding="utf-8") == "# 指南\n"
    link = td.chinese_link("workshop/guide.md#notes", "README.md", edition, {}, set())
    assert link == "workshop/guide.md#notes", "its anchors are not the English ones"


def test_the_command_extracts_checks_and_builds_documents_too(edition, monkeypatch, capsys):
    monkeypatch.setattr(td, "EDITION", edition)
    (edition.root / "README.md").write_text(README + "\nOne more.\n", encoding="utf-8")
    assert tn.main(["check"]) == 1
    assert "README.md, block quick-start.5 " in capsys.readouterr().out
    assert tn.main(["extract", str(edition.root / "README.md")]) == 0
    assert capsys.readouterr().out == (
        "workshop/zh-CN/catalog/README.po: 1 new, 0 stale (fuzzy), 5 unchanged\n"
    )
    translate(edition.catalog("README.md"), {"quick-start.5": "再多一段。"})
    assert tn.main(["check"]) == 0
    assert tn.main(["build", "--check"]) == 1
    assert "README.zh-CN.md: missing" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        tn.main(["extract", str(edition.root / "workshop" / "glossary.md")])
    assert "is not a document of the Chinese edition" in capsys.readouterr().err


def test_links_from_a_chinese_document(edition):
    maps = {"README.md": {"quick-start": "快速开始"}, "workshop/setup.md": {"install": "安装"}}

    def link(target, english="workshop/setup.md"):
        return td.chinese_link(target, english, edition, maps, {"00_demo.ipynb"})

    assert link("../README.md#quick-start") == "../../README.zh-CN.md#快速开始"
    assert link("../README.md#not-a-heading") == "../../README.zh-CN.md#not-a-heading"
    assert link("#install") == "#安装"
    assert link("glossary.md#gradient") == "../glossary.md#gradient", "no Chinese glossary"
    assert link("../notebooks/00_demo.ipynb") == "../../notebooks/zh-CN/00_demo.ipynb"
    assert link("../notebooks/01_other.ipynb") == "../../notebooks/01_other.ipynb"
    assert link("workshop/setup.md", "README.md") == "workshop/zh-CN/setup.md"
    assert link("helpers/x.py", "README.md") == "helpers/x.py"
    binder = "https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/notebooks/"
    colab = "https://colab.research.google.com/github/o/r/blob/main/notebooks/"
    assert link(binder + "00_demo.ipynb") == binder + "zh-CN/00_demo.ipynb"
    assert link(colab + "00_demo.ipynb") == colab + "zh-CN/00_demo.ipynb"
    assert link(colab + "01_other.ipynb") == colab + "01_other.ipynb"
    for unchanged in ("https://pytorch.org/x", "mailto:a@b.c", "/abs"):
        assert link(unchanged) == unchanged


def test_a_command_that_opens_a_notebook_in_jupyterlab_opens_the_chinese_one(edition):
    """As the Binder and Colab links do: the Chinese quick start opens the Chinese notebook 00."""
    command = "pip install x && jupyter lab --ServerApp.root_dir=. notebooks/00_demo.ipynb"
    others = (
        "jupyter-lab notebooks/01_other.ipynb\n"  # no Chinese notebook 01
        "python tools/run_notebooks.py notebooks/00_demo.ipynb\n"  # runs the English one
        "ls notebooks/00_demo.ipynb && jupyter lab"  # named before jupyter: not what it opens
    )
    english = README + f"\nOpen it:\n\n```bash\n{command}\n{others}\n```\n"
    (edition.root / "README.md").write_text(english, encoding="utf-8")
    td.extract("README.md", edition)
    translate(edition.catalog("README.md"), {"quick-start.5": "打开它："})
    assert td.check(edition) == [], "the translation keeps the English command"
    assert td.build(edition=edition) == []
    chinese = (edition.root / "README.zh-CN.md").read_text(encoding="utf-8")
    assert chinese.endswith(
        "打开它：\n\n```bash\n"
        "pip install x && jupyter lab --ServerApp.root_dir=. notebooks/zh-CN/00_demo.ipynb\n"
        f"{others}\n```\n"
    )
    assert td.build(check_only=True, edition=edition) == []
    for unchanged in (
        "Run `jupyter lab notebooks/00_demo.ipynb`.",  # a code span in prose
        "```text\njupyter lab notebooks/00_demo.ipynb\n```",  # not a shell block
    ):
        assert td.chinese_commands(unchanged, {"00_demo.ipynb"}) == unchanged


def test_a_translator_comment_names_a_glossary_word_that_is_not_the_term_here(edition):
    zh("demo-course.2", "梯度", "坡度")(edition)
    [problem] = td.check(edition)
    assert "add the translator comment '# not a term: gradient (why)'" in problem
    catalog = polib.pofile(str(edition.catalog("README.md")), wrapwidth=0)
    catalog[1].tcomment = "not a term: gradient (a slope here), tensor"
    catalog.save(str(edition.catalog("README.md")))
    assert td.check(edition) == []
    assert translation.not_terms(catalog[1]) == {"gradient", "tensor"}


def test_a_code_span_may_break_its_line_elsewhere_in_the_translation():
    terms = []
    english = "Run `python -m\n  pytest -q` now."
    assert translation.check_markdown(english, "现在运行 `python -m pytest -q`。", terms) == []
    assert translation.check_markdown(english, "运行 `python -m pytest`。", terms) != []
