"""tools/translate_notebooks.py: the Chinese edition's catalogs, their check and the build.

The repository's own catalogs and Chinese notebooks are checked first (no kernel: nbval runs
the Chinese notebooks themselves); then each rule on small notebooks made in tmp_path."""

from __future__ import annotations

import re

import nbformat
import polib
import pytest
import translate_notebooks as tn
from course import ROOT, chinese_notebook_paths, notebook_paths, read, write

URL = "https://github.com/owner/course"
GLOSSARY = """\
# Glossary

**gradient**: The slope. Notebook 00.

## 简体中文术语

| English | 中文 | 说明 |
|---|---|---|
| gradient | 梯度 | |
| leaf tensor | 叶子张量 | |
| tensor | 张量 | |
| scheduler | 学习率调度器 / 调度器 | |
"""
PROSE = (
    "A leaf tensor's `x.grad` is the gradient $2x$; see [graph](../workshop/glossary.md#graph) "
    "and [the next notebook](01_next.ipynb).\n\n```python\ny = x**2  # the square\n```"
)
PROSE_ZH = (
    "叶子张量的 `x.grad` 就是梯度 $2x$；参见[计算图](../workshop/glossary.md#graph)"
    "和[下一节](01_next.ipynb)。\n\n```python\ny = x**2  # 平方\n```"
)
COMMENTED = 'x = 1  # one\nprint("# not a comment", x)'
COMMENTED_ZH = 'x = 1  # 一\nprint("# not a comment", x)'


def markdown(cell_id, source, tag=None):
    cell = nbformat.v4.new_markdown_cell(source, id=cell_id)
    if tag:
        cell.metadata["tags"] = [tag]
    return cell


def code(cell_id, source, tag=None):
    cell = nbformat.v4.new_code_cell(source, id=cell_id)
    if tag:
        cell.metadata["tags"] = [tag]
    return cell


@pytest.fixture
def course(tmp_path):
    """An English course of two notebooks, the glossary, and notebook 00's catalog, fully
    translated; returns a namespace of its paths."""
    english = tmp_path / "notebooks"
    english.mkdir()
    first = nbformat.v4.new_notebook(
        cells=[
            markdown("title", "# 00 · Demo"),
            markdown("badges", "links", tn.BADGES_TAG),
            code("setup", "pass", tn.SETUP_TAG),
            markdown("prose", PROSE),
            code("commented", COMMENTED),
            code("plain", "print(2)"),
            markdown("next", "next", tn.NEXT_TAG),
        ]
    )
    second = nbformat.v4.new_notebook(
        cells=[markdown("t1", "# 01 · Next"), markdown("next1", "next", tn.NEXT_TAG)]
    )
    write(first, english / "00_demo.ipynb")
    write(second, english / "01_next.ipynb")
    glossary = tmp_path / "glossary.md"
    glossary.write_text(GLOSSARY, encoding="utf-8")
    catalogs = tmp_path / "zh-CN" / "catalog"
    catalogs.mkdir(parents=True)
    tn.extract(english / "00_demo.ipynb", catalogs / "00_demo.po")
    translate(catalogs / "00_demo.po", title="# 00 · 演示", prose=PROSE_ZH, commented=COMMENTED_ZH)

    class Course:
        pass

    made = Course()
    made.english, made.catalogs, made.glossary = english, catalogs, glossary
    made.out = tmp_path / "zh-CN"
    made.po = catalogs / "00_demo.po"
    return made


def translate(path, **texts):
    """Set the msgstr of the entries whose cell id is a keyword; None leaves an entry alone."""
    catalog = polib.pofile(str(path), wrapwidth=0)
    for entry in catalog:
        cell_id = entry.msgctxt.split()[0]
        if texts.get(cell_id) is not None:
            entry.msgstr = texts[cell_id]
    catalog.save(str(path))


def problems(made):
    return tn.check(made.english, made.catalogs, made.glossary)


def build(made, check_only=False):
    return tn.build(check_only, made.english, made.out, made.catalogs, made.glossary, url=URL)


# ------------------------------------------------------------------ the repository
def test_the_repositorys_catalogs_pass_and_its_chinese_notebooks_are_what_build_writes():
    assert tn.check() == []
    assert tn.build(check_only=True) == [], "run: python tools/translate_notebooks.py build"
    names = [path.name for path in chinese_notebook_paths()]
    assert names == sorted(f"{path.stem}.ipynb" for path in tn.CATALOGS.glob("*.po"))
    assert "00_setup_check.ipynb" in names
    assert not set(chinese_notebook_paths()) & set(notebook_paths()), "English list only"


def test_every_glossary_entry_has_a_chinese_term_and_the_issues_terms_are_as_agreed():
    text = (ROOT / "workshop" / "glossary.md").read_text(encoding="utf-8")
    entries = set(re.findall(r"^\*\*(.+?)\*\*: ", text, flags=re.MULTILINE))
    terms = {term.english: term.chinese[0] for term in tn.glossary_terms()}
    assert entries - set(terms) == set(), "add these to the glossary's Chinese table"
    agreed = {
        "gradient": "梯度",
        "backward pass": "反向传播",
        "forward pass": "前向传播",
        "gradient accumulation": "梯度累积",
        "graph": "计算图",
        "leaf tensor": "叶子张量",
        "optimizer": "优化器",
        "scheduler": "学习率调度器",
        "mixed precision": "混合精度",
        "loss": "损失",
        "param group": "参数组",
        "micro-batch": "微批次",
        "hook": "钩子",
        "in-place operation": "原地操作",
    }
    assert {english: terms[english] for english in agreed} == agreed


def test_a_glossary_without_the_chinese_table_is_refused(tmp_path):
    path = tmp_path / "glossary.md"
    path.write_text("# Glossary\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no section '## 简体中文术语'"):
        tn.glossary_terms(path)


# ------------------------------------------------------------------ extract
def test_extract_makes_entries_for_markdown_and_commented_code_but_not_generated_cells(course):
    catalog = polib.pofile(str(course.po))
    contexts = [entry.msgctxt for entry in catalog]
    assert [c.split()[0] for c in contexts] == ["title", "prose", "commented"]
    nb = read(course.english / "00_demo.ipynb")
    prose = next(cell for cell in nb.cells if cell.id == "prose")
    assert contexts[1] == f"prose {tn.source_hash(PROSE)}" == tn.context(prose)
    assert len(tn.source_hash(PROSE)) == 12
    assert catalog[1].msgid == PROSE
    assert not tn.has_comments('print("# not a comment")'), "a # in a string is no comment"


def test_extract_keeps_the_old_translation_fuzzy_when_the_english_changes(course):
    path = course.english / "00_demo.ipynb"
    nb = read(path)
    nb.cells[3].source = PROSE.replace("$2x$", "$2 x$")
    write(nb, path)
    assert tn.extract(path, course.po) == {"new": 0, "stale": 1, "unchanged": 2}
    entry = next(e for e in polib.pofile(str(course.po)) if e.msgctxt.startswith("prose "))
    assert entry.msgstr == PROSE_ZH and "fuzzy" in entry.flags
    assert entry.previous_msgid == PROSE and entry.msgid == nb.cells[3].source
    [problem] = problems(course)
    assert "00_demo.ipynb, cell prose" in problem and "fuzzy" in problem
    entry.flags.remove("fuzzy")  # the translator updates it ...
    catalog = polib.pofile(str(course.po))
    for each in catalog:
        if each.msgctxt.startswith("prose "):
            each.flags, each.msgstr = [], PROSE_ZH.replace("$2x$", "$2 x$")
    catalog.save(str(course.po))
    assert problems(course) == []  # ... and the check passes again
    tn.extract(path, course.po)
    assert "#|" not in course.po.read_text(encoding="utf-8"), "the old English is dropped"


def test_extract_again_changes_nothing_and_keeps_a_removed_cells_translation_obsolete(course):
    before = course.po.read_text(encoding="utf-8")
    assert tn.extract(course.english / "00_demo.ipynb", course.po)["unchanged"] == 3
    assert course.po.read_text(encoding="utf-8") == before
    nb = read(course.english / "00_demo.ipynb")
    del nb.cells[4]  # the commented code cell
    write(nb, course.english / "00_demo.ipynb")
    tn.extract(course.english / "00_demo.ipynb", course.po)
    obsolete = [e for e in polib.pofile(str(course.po)) if e.obsolete]
    assert [e.msgstr for e in obsolete] == [COMMENTED_ZH]
    assert problems(course) == [], "an obsolete entry is no problem"


# ------------------------------------------------------------------ check: bad input
def edit_english_prose(made):
    nb = read(made.english / "00_demo.ipynb")
    nb.cells[3].source += " More."
    write(nb, made.english / "00_demo.ipynb")


def add_entry_for_missing_cell(made):
    catalog = polib.pofile(str(made.po))
    catalog.append(polib.POEntry(msgctxt="ghost 0123456789ab", msgid="Gone.", msgstr="没了。"))
    catalog.save(str(made.po))


def prose(old, new):
    return {"prose": PROSE_ZH.replace(old, new)}


def commented(old, new):
    return {"commented": COMMENTED_ZH.replace(old, new)}


BAD = [
    ("ghost", add_entry_for_missing_cell, "no cell has this id in notebooks/00_demo.ipynb"),
    ("prose", prose("`x.grad` ", "x.grad "), "drops or changes the code span 'x.grad'"),
    ("prose", prose("$2x$", "$2y$"), "drops or changes the formula '$2x$'; it has '$2y$' instead"),
    (
        "prose",
        prose("#graph", "#leaf-tensor"),
        "drops or changes the link target '../../workshop/zh-CN/glossary.md#graph'",
    ),
    ("prose", prose("../workshop", "../../workshop"), "keep the English targets"),
    ("prose", prose("y = x**2", "y = x**3"), "drops or changes the fenced code block '```python"),
    (
        "prose",
        prose("叶子张量", "叶张量"),
        "the English says 'leaf tensor': use the glossary's term 叶子张量",
    ),
    ("prose", {"prose": PROSE}, "is the English text: not translated"),
    ("prose", {"prose": ""}, "not translated yet"),
    ("prose", edit_english_prose, "stale: the English cell changed"),
    (
        "commented",
        commented("x = 1", "x = 2"),
        "the English has 'x = 1  # one' where the translation has 'x = 2  # 一'",
    ),
    (
        "commented",
        commented('"# not a comment"', '"# 不是注释"'),
        "the code differs from the English beyond its comments",
    ),
    ("commented", {"commented": "x = (1  # 一"}, "the translated code does not tokenize"),
]


@pytest.mark.parametrize(("cell_id", "change", "message"), BAD, ids=[m[:40] for *_, m in BAD])
def test_check_names_the_notebook_and_the_cell_of_each_bad_entry(course, cell_id, change, message):
    assert problems(course) == []
    if callable(change):
        change(course)
    else:
        translate(course.po, **change)
    found = problems(course)
    assert len(found) == 1, found
    assert f"00_demo.ipynb, cell {cell_id} " in found[0]
    assert message in found[0]
    assert build(course) == found, "build writes nothing while the catalogs have problems"
    assert not (course.out / "00_demo.ipynb").exists()


def test_check_accepts_translated_comments_and_a_glossary_terms_short_form(course):
    nb = read(course.english / "00_demo.ipynb")
    nb.cells[3].source = "The scheduler steps."
    write(nb, course.english / "00_demo.ipynb")
    tn.extract(course.english / "00_demo.ipynb", course.po)
    catalog = polib.pofile(str(course.po))
    for entry in catalog:
        entry.flags = []
    catalog.save(str(course.po))
    more_comments = 'x = 1  # 一\n# 多一行注释\nprint("# not a comment", x)'
    translate(course.po, prose="调度器前进一步。", commented=more_comments)
    assert problems(course) == []


def test_an_entry_a_code_cell_without_comments_or_a_generated_cell_gets_is_refused(course):
    catalog = polib.pofile(str(course.po))
    nb = read(course.english / "00_demo.ipynb")
    for cell_id in ("plain", "setup"):
        cell = next(c for c in nb.cells if c.id == cell_id)
        catalog.append(polib.POEntry(msgctxt=tn.context(cell), msgid=cell.source, msgstr="x"))
    catalog.save(str(course.po))
    found = problems(course)
    assert any("cell plain " in p and "has no comments" in p for p in found), found
    assert any("cell setup " in p and "written by the tool" in p for p in found), found


def test_a_cell_without_an_entry_and_a_catalog_without_its_notebook_are_named(course):
    nb = read(course.english / "00_demo.ipynb")
    nb.cells.insert(4, markdown("added", "New text."))
    write(nb, course.english / "00_demo.ipynb")
    (course.catalogs / "05_gone.po").write_text("", encoding="utf-8")
    found = problems(course)
    assert any("00_demo.ipynb, cell added " in p and "no entry: run extract" in p for p in found)
    assert any("05_gone.po" in p and "no English notebook" in p for p in found), found


# ------------------------------------------------------------------ build
def test_build_writes_the_chinese_cells_and_its_generated_cells_point_to_zh_cn(course):
    assert build(course) == []
    nb = read(course.out / "00_demo.ipynb")
    english = read(course.english / "00_demo.ipynb")
    assert [c.id for c in nb.cells] == [c.id for c in english.cells]
    assert [c.metadata for c in nb.cells] == [c.metadata for c in english.cells]
    cells = {cell.id: cell for cell in nb.cells}
    assert cells["title"].source == "# 00 · 演示"
    assert "](../../workshop/zh-CN/glossary.md#graph)" in cells["prose"].source
    assert "](../01_next.ipynb)" in cells["prose"].source, "01 has no Chinese edition yet"
    assert cells["commented"].source == COMMENTED_ZH and cells["plain"].source == "print(2)"
    badges = cells["badges"].source
    assert badges.count("/notebooks/zh-CN/00_demo.ipynb") == 2
    assert "lab/tree/notebooks/zh-CN/00_demo.ipynb" in badges and "在 Colab 中打开" in badges
    setup = cells["setup"].source
    assert setup.index('os.environ.setdefault("GM_LANG", "zh_CN")') < setup.index("from helpers")
    assert setup.startswith("# @title 课程设置") and 'stop_unless_supported("00_demo")' in setup
    assert "[01 · Next](../01_next.ipynb)" in cells["next"].source


def test_a_notebook_with_a_catalog_is_linked_as_a_sibling_under_its_chinese_title(course):
    tn.extract(course.english / "01_next.ipynb", course.catalogs / "01_next.po")
    translate(course.catalogs / "01_next.po", t1="# 01 · 下一节")
    assert build(course) == []
    cells = {cell.id: cell for cell in read(course.out / "00_demo.ipynb").cells}
    assert cells["next"].source == f"{tn.NEXT_LABEL} [01 · 下一节](01_next.ipynb)"
    assert "[the next notebook]" not in cells["prose"].source
    assert "](01_next.ipynb)" in cells["prose"].source
    last = read(course.out / "01_next.ipynb").cells[-1].source
    assert "最后一个 notebook" in last and "](../../README.zh-CN.md)" in last, "COUNTERPARTS"


def test_build_keeps_outputs_of_unchanged_code_and_check_ignores_outputs(course):
    assert build(course) == []
    path = course.out / "00_demo.ipynb"
    nb = read(path)
    for cell in nb.cells:
        if cell.cell_type == "code":  # as tools/run_notebooks.py would
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=cell.id)]
            cell.execution_count = 1
    write(nb, path)
    ran = path.read_text(encoding="utf-8")
    assert build(course) == [] and path.read_text(encoding="utf-8") == ran, "idempotent"
    translate(course.po, commented=COMMENTED_ZH.replace("# 一", "# 数字一"))
    assert build(course, check_only=True) == [
        f"{tn.FOLDER}/00_demo.ipynb: differs from what build writes, cell commented: run "
        "python tools/translate_notebooks.py build"
    ]
    assert build(course) == []
    kept = {c.id for c in read(path).cells if c.cell_type == "code" and c.outputs}
    assert kept == {"setup", "plain"}, "the changed cell's outputs are gone, no others"
    assert build(course, check_only=True) == []


def test_build_check_names_a_hand_edited_missing_or_orphaned_chinese_notebook(course):
    assert build(course, check_only=True) == [f"{tn.FOLDER}/00_demo.ipynb: missing; run build"]
    assert build(course) == []
    nb = read(course.out / "00_demo.ipynb")
    nb.cells[3].source += "\n手工改的。"
    write(nb, course.out / "00_demo.ipynb")
    write(nb, course.out / "01_next.ipynb")
    write(nb, course.out / "07_other.ipynb")
    found = build(course, check_only=True)
    assert f"{tn.FOLDER}/07_other.ipynb: no English notebook of that name: remove it" in found
    assert f"{tn.FOLDER}/01_next.ipynb: it has no catalog: remove it" in found
    assert any(p.startswith(f"{tn.FOLDER}/00_demo.ipynb: differs") and "cell prose" in p
               for p in found)  # fmt: skip


def test_links_from_the_chinese_folder():
    translated = {"01_next.ipynb"}
    assert tn.chinese_target("01_next.ipynb", translated) == "01_next.ipynb"
    assert tn.chinese_target("01_next.ipynb#a", translated) == "01_next.ipynb#a"
    assert tn.chinese_target("02_x.ipynb", translated) == "../02_x.ipynb"
    assert tn.chinese_target("../README.md", translated) == "../../README.zh-CN.md"
    assert tn.chinese_target("../workshop/glossary.md#x", translated) == (
        "../../workshop/zh-CN/glossary.md#x"
    )  # a document with a Chinese counterpart; one without keeps the English
    assert tn.chinese_target("../loop_auditor/README.md", translated) == (
        "../../loop_auditor/README.md"
    )
    assert tn.chinese_target("../helpers/plots.py", translated) == "../../helpers/plots.py"
    for unchanged in ("https://pytorch.org/x", "#section", "mailto:a@b.c"):
        assert tn.chinese_target(unchanged, translated) == unchanged
    source = "[a](../README.md) `[b](../README.md)` <a href='../x.md'>c</a>"
    assert tn.localize_links(source, translated) == (
        "[a](../../README.zh-CN.md) `[b](../README.md)` <a href='../../x.md'>c</a>"
    )


def test_the_setup_cell_refuses_a_language_that_is_no_locale_name():
    import sync_notebooks

    with pytest.raises(ValueError, match="language must be a locale name such as 'zh_CN'"):
        sync_notebooks.setup_source(URL, "00_demo.ipynb", language="zh-CN; import os")


def test_the_chinese_setup_cell_has_no_english_comment_and_runs_the_same_code():
    import sync_notebooks

    english = sync_notebooks.setup_source(URL, "00_demo.ipynb")
    chinese = tn.chinese_setup(URL, "00_demo.ipynb")
    for comment in sync_notebooks.SETUP_COMMENTS.values():
        assert comment in english and comment not in chinese, comment
    assert 'os.environ.setdefault("GM_LANG", "zh_CN")' in chinese
    without_language = sync_notebooks.setup_source(
        URL, "00_demo.ipynb", title=tn.SETUP_TITLE, about=tn.SETUP_ABOUT, comments=tn.SETUP_COMMENTS
    )  # the Chinese cell but for GM_LANG: the English code, token for token
    assert tn.code_without_comments(without_language) == tn.code_without_comments(english)
    with pytest.raises(ValueError, match=r"comments takes the keys \['auditor_path', 'keep"):
        sync_notebooks.setup_source(URL, "00_demo.ipynb", comments={"torch": "x"})


def test_the_command_checks_and_builds_the_documents_too(monkeypatch, capsys):
    """``check`` and ``build`` cover notebooks and documents (tools/translate_documents.py,
    tested in test_translate_documents.py); ``extract`` takes either."""
    import translate_documents

    calls = []

    def documents_check():
        calls.append("check")
        return ["README.po: a document's problem"]

    def documents_build(check_only=False):
        calls.append(("build", check_only))
        return ["README.zh-CN.md: missing"]

    monkeypatch.setattr(translate_documents, "check", documents_check)
    monkeypatch.setattr(translate_documents, "build", documents_build)
    assert tn.main(["check"]) == 1
    assert capsys.readouterr().out == "README.po: a document's problem\n"
    assert tn.main(["build", "--check"]) == 1
    assert capsys.readouterr().out == "README.zh-CN.md: missing\n"
    assert calls == ["check", ("build", True)]
    with pytest.raises(SystemExit):
        tn.main(["extract", str(ROOT / "loop_auditor" / "README.md")])
    assert "add it to CHINESE_DOCUMENTS" in capsys.readouterr().err
