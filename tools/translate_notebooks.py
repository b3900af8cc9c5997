"""The Simplified Chinese edition, ``notebooks/zh-CN/``: generated from the English notebooks
and one translation catalog per notebook, so that it cannot drift from the English.

    python tools/translate_notebooks.py extract NOTEBOOK ...  # create or update catalogs
    python tools/translate_notebooks.py extract               # update every existing catalog
    python tools/translate_notebooks.py check                 # exit 1 listing every problem
    python tools/translate_notebooks.py build                 # write notebooks/zh-CN/*.ipynb
    python tools/translate_notebooks.py build --check         # exit 1 if one differs from it

A catalog is a gettext PO file, ``notebooks/zh-CN/catalog/NN_name.po``, with one entry per
English markdown cell and per code cell that has comments. An entry's ``msgctxt`` is the
cell's id and the first 12 hex digits of the SHA-256 of its English source; ``msgid`` is that
source and ``msgstr`` its translation. When an English cell changes, its entry no longer
matches and ``check`` fails on it; ``extract`` then brings in the new English text and keeps
the old translation, marked fuzzy with the English it translated (``#|`` lines), until a
translator updates it and removes the flag. The cells that tools/sync_notebooks.py writes
(launch links, setup cell, link to the next notebook) have no entry: ``build`` writes their
Chinese form itself.

``check`` holds every translation to its English cell: the inline code spans, fenced code
blocks, formulas and link targets of a markdown cell must be the English ones (as multisets;
a python block may translate its comments), a code cell's code must be the English code token
for token once comments are removed, and each term of the glossary's Chinese table
(``workshop/glossary.md``) that the English uses must appear as its Chinese term.

``build`` writes each notebook that has a catalog: the English cells, ids and metadata, with
markdown from the catalog, code from the catalog where it has an entry and else the English
code. Relative links are rewritten for the folder (``../README.md`` -> ``../../README.md``,
or to a Chinese counterpart listed in ``COUNTERPARTS``); a link to another notebook stays a
sibling link when that notebook has a Chinese edition, else it points to the English one.
Outputs of code cells whose code did not change are kept, so build never wipes what
tools/run_notebooks.py made; run that on a notebook whose code cells changed.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import io
import posixpath
import re
import sys
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import nbformat
import polib
from course import NOTEBOOKS, ROOT, launch_links, read, repository_url, title, write
from sync_notebooks import BADGES_TAG, NEXT_TAG, SETUP_TAG, setup_source

LANGUAGE = "zh_CN"
FOLDER = "notebooks/zh-CN"
ZH_NOTEBOOKS = ROOT / FOLDER
CATALOGS = ZH_NOTEBOOKS / "catalog"
GLOSSARY = ROOT / "workshop" / "glossary.md"
GLOSSARY_HEADING = "## 简体中文术语"
GENERATED_TAGS = (BADGES_TAG, SETUP_TAG, NEXT_TAG)
HASH_DIGITS = 12

COUNTERPARTS: dict[str, str] = {}
"""A page's repository path -> its Chinese counterpart's, once that exists (for example
``"README.md": "README.zh-CN.md"``): links to it from a Chinese notebook point there."""

LINK_NAMES = {"Open in Colab": "在 Colab 中打开", "Launch Binder": "在 Binder 中启动"}
BADGES_LABEL = "**在线运行：**"
SETUP_TITLE = "课程设置（请先运行）：加载 helpers，检查 torch 版本"
SETUP_ABOUT = """\
# 由 tools/translate_notebooks.py 按 tools/sync_notebooks.py 的模板生成。
# 在 Colab 上，它先获取课程代码，并安装 Colab 缺少的包。
# torch 或 Python 版本低于本 notebook 的要求时，它会停下并给出修复命令；否则什么也不输出。"""
SETUP_COMMENTS = {
    "keep_torch": "不安装 torch：保留 Colab 自带的版本",
    "auditor_path": "循环审计器（loop auditor）的包",
}
NEXT_LABEL = "**下一节：**"
CODE_NOTE = "code cell: only its comments may be translated; the code must stay the same"
MARKDOWN_NOTE = "markdown cell"


# ------------------------------------------------------------------ cells and code
def source_hash(source: str) -> str:
    """The first 12 hex digits of the SHA-256 of a cell's English source."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:HASH_DIGITS]


def context(cell) -> str:
    """An entry's ``msgctxt``: ``"<cell id> <source hash>"``."""
    return f"{cell.id} {source_hash(cell.source)}"


def tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def generated(cell) -> bool:
    """A cell that tools/sync_notebooks.py writes (and this tool writes in Chinese)."""
    return any(tag in tags(cell) for tag in GENERATED_TAGS)


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def has_comments(source: str) -> bool:
    """Whether Python ``source`` has a comment (found by tokenize, never in a string)."""
    try:
        return any(token.type == tokenize.COMMENT for token in _tokens(source))
    except (tokenize.TokenError, SyntaxError):
        return False


def code_without_comments(source: str) -> list[tuple[int, str, int]]:
    """``source``'s tokens without comments and line breaks: (type, text, line). Raises
    ``SyntaxError`` when it does not tokenize."""
    try:
        tokens = _tokens(source)
    except tokenize.TokenError as error:
        raise SyntaxError(str(error)) from error
    skipped = (tokenize.COMMENT, tokenize.NL, tokenize.ENDMARKER)
    return [
        (t.type, "" if t.type == tokenize.NEWLINE else t.string, t.start[0])
        for t in tokens
        if t.type not in skipped
    ]


def needs_entry(cell) -> bool:
    """Markdown cells and code cells with comments have an entry; generated cells do not."""
    if generated(cell):
        return False
    return cell.cell_type == "markdown" or (cell.cell_type == "code" and has_comments(cell.source))


def describe(cell_id: str, source: str) -> str:
    """``cell 24f62522 ('## 1. Versions and device')``: the id and the English first line."""
    lines = source.strip().splitlines()
    first = lines[0] if lines else ""
    return f"cell {cell_id} ({first[:50]!r})"


# ------------------------------------------------------------------ markdown
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})([^\n`]*)\n(.*?)^[ \t]*\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
DISPLAY_MATH = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$", re.S)
INLINE_MATH = re.compile(r"(?<![\\$])\$(?![\s$])([^$\n]+?)(?<![\s\\])\$(?!\$)")
INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(
    r"^[ \t]*\[[^\]\n]+\]:[ \t]*<?(\S+?)>?(?:[ \t]+\"[^\"]*\")?[ \t]*$", re.M
)
HTML_LINK = re.compile(r"\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']")
EXTERNAL_LINK_TEXT = re.compile(r"\[([^\]\n]*)\]\((?:https?:|mailto:)[^)]*\)")
HTML_TAG = re.compile(r"</?[A-Za-z][^>\n]*>")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass
class Markdown:
    """What a translation of a markdown cell must keep, and its prose."""

    fences: Counter
    fence_text: dict
    code_spans: Counter
    formulas: Counter
    links: list[str]
    prose: str


def _fence_key(info: str, body: str) -> tuple:
    """A fenced block as it is compared: a python block by its code without comments."""
    language = info.strip().split(" ")[0].lower() if info.strip() else ""
    if language in ("python", "py", "python3"):
        try:
            return (language, tuple((kind, text) for kind, text, _ in code_without_comments(body)))
        except SyntaxError:
            pass
    return (language, body)


def parse_markdown(source: str) -> Markdown:
    """The fenced blocks, code spans, formulas and link targets of a markdown cell, each
    taken out before the next is looked for (a ``$`` in code is no formula), and what is left:
    its prose, without link targets and HTML tags."""
    fences, fence_text = Counter(), {}
    for match in FENCE.finditer(source):
        key = _fence_key(match.group(2), match.group(3))
        fences[key] += 1
        fence_text.setdefault(key, match.group(0).strip().splitlines()[0] + " ...")
    rest = FENCE.sub("\n", source)
    code_spans = Counter(match.group(2) for match in CODE_SPAN.finditer(rest))
    rest = CODE_SPAN.sub(" \x00 ", rest)
    formulas = Counter(f"$${m.group(1)}$$" for m in DISPLAY_MATH.finditer(rest))
    rest = DISPLAY_MATH.sub(" \x00 ", rest)
    formulas += Counter(f"${m.group(1)}$" for m in INLINE_MATH.finditer(rest))
    rest = INLINE_MATH.sub(" \x00 ", rest)
    links = [m.group(1) for pattern in (INLINE_LINK, REFERENCE_LINK, HTML_LINK)
             for m in pattern.finditer(rest)]  # fmt: skip
    prose = HTML_TAG.sub(" ", REFERENCE_LINK.sub(" ", INLINE_LINK.sub("]", rest)))
    return Markdown(fences, fence_text, code_spans, formulas, links, prose)


def chinese_target(target: str, translated: set[str]) -> str:
    """Where a link of an English notebook points from ``notebooks/zh-CN/``: a notebook with
    a Chinese edition (in ``translated``) stays a sibling, any other relative target gets one
    more ``../`` (or its Chinese counterpart, ``COUNTERPARTS``); URLs and anchors stay."""
    if not target or SCHEME.match(target) or target.startswith(("#", "/")):
        return target
    path, hash_mark, fragment = target.partition("#")
    if "/" not in path and path in translated:
        return target
    in_repo = posixpath.normpath(posixpath.join("notebooks", path))
    in_repo = COUNTERPARTS.get(in_repo, in_repo)
    return posixpath.relpath(in_repo, FOLDER) + hash_mark + fragment


def localize_links(source: str, translated: set[str]) -> str:
    """``source`` with each link target rewritten by ``chinese_target`` (code untouched)."""
    protected: list[str] = []

    def keep(match: re.Match) -> str:
        protected.append(match.group(0))
        return f"\x00{len(protected) - 1}\x00"

    text = CODE_SPAN.sub(keep, FENCE.sub(keep, source))

    def rewrite(match: re.Match) -> str:
        start, end = match.span(1)
        whole, offset = match.group(0), match.start(0)
        new = chinese_target(match.group(1), translated)
        return whole[: start - offset] + new + whole[end - offset :]

    for pattern in (INLINE_LINK, REFERENCE_LINK, HTML_LINK):
        text = pattern.sub(rewrite, text)
    for _ in range(2):  # a code span may hold a fence's placeholder
        text = re.sub(r"\x00(\d+)\x00", lambda m: protected[int(m.group(1))], text)
    return text


# ------------------------------------------------------------------ glossary
@dataclass(frozen=True)
class Term:
    english: str
    chinese: tuple[str, ...]  # the term first, then other accepted forms
    pattern: re.Pattern


def glossary_terms(path: Path = GLOSSARY) -> list[Term]:
    """The glossary's Chinese table (``## 简体中文术语``): ``| English | 中文 | ... |`` rows,
    longest English term first. ``中文`` may list accepted forms: ``学习率调度器 / 调度器``."""
    text = path.read_text(encoding="utf-8")
    if GLOSSARY_HEADING not in text:
        raise ValueError(f"{path.name} has no section {GLOSSARY_HEADING!r}")
    section = text.split(GLOSSARY_HEADING, 1)[1].split("\n## ", 1)[0]
    terms = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.lstrip().startswith("|") or len(cells) < 2 or set(cells[0]) <= set("-: "):
            continue
        if cells[0] == "English":
            continue
        english = cells[0].strip("`")
        forms = tuple(form.strip().strip("`") for form in cells[1].split(" / ") if form.strip())
        pattern = re.compile(rf"(?<![\w-]){re.escape(english.lower())}(?:e?s)?(?![\w-])")
        terms.append(Term(english, forms, pattern))
    return sorted(terms, key=lambda term: -len(term.english))


def terms_used(prose: str, terms: list[Term]) -> list[Term]:
    """The terms ``prose`` uses, each occurrence counted for its longest term only ("leaf
    tensor", not also "tensor"); link texts of web pages (their own titles) are left out."""
    text = EXTERNAL_LINK_TEXT.sub(" ", prose).lower()
    used = []
    for term in terms:
        if term.pattern.search(text):
            used.append(term)
            text = term.pattern.sub(" \x01 ", text)
    return used


# ------------------------------------------------------------------ catalogs
def catalog_path(name: str) -> Path:
    """The catalog of English notebook ``name`` (``00_setup_check.ipynb``)."""
    return CATALOGS / f"{Path(name).stem}.po"


def split_context(msgctxt: str | None) -> tuple[str, str] | None:
    parts = (msgctxt or "").split(" ")
    if len(parts) != 2 or not re.fullmatch(rf"[0-9a-f]{{{HASH_DIGITS}}}", parts[1]):
        return None
    return parts[0], parts[1]


def new_catalog(name: str) -> polib.POFile:
    catalog = polib.POFile(wrapwidth=0)
    catalog.header = (
        f"Simplified Chinese translation of notebooks/{name}.\n"
        "Generated by tools/translate_notebooks.py extract; translate each msgstr, then run\n"
        "tools/translate_notebooks.py check and build (README, For contributors)."
    )
    catalog.metadata = {
        "Project-Id-Version": f"gradient-mechanics {Path(name).stem}",
        "Language": LANGUAGE,
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
    }
    return catalog


def load_catalog(path: Path) -> polib.POFile:
    return polib.pofile(str(path), wrapwidth=0)


def entries_by_id(catalog: polib.POFile) -> dict[str, polib.POEntry]:
    found = {}
    for entry in catalog:
        key = split_context(entry.msgctxt)
        if key is not None and not entry.obsolete:
            found.setdefault(key[0], entry)
    return found


def extract(english: Path, path: Path | None = None) -> dict[str, int]:
    """Create or update the catalog of the English notebook ``english``: an empty entry for
    each new cell, a changed cell's entry fuzzy with its old translation and the English it
    translated (``previous_msgid``), a removed cell's translated entry obsolete. Returns how
    many entries are ``new``, ``stale`` and ``unchanged``."""
    path = path or catalog_path(english.name)
    old = load_catalog(path) if path.exists() else new_catalog(english.name)
    current = entries_by_id(old)
    by_source = {e.msgid: e.msgstr for e in old if e.msgstr and "fuzzy" not in e.flags}
    catalog = new_catalog(english.name)
    catalog.header, catalog.metadata = (
        old.header or catalog.header,
        old.metadata or catalog.metadata,
    )
    counts = Counter(new=0, stale=0, unchanged=0)
    used = set()
    for cell in read(english).cells:
        if not needs_entry(cell):
            continue
        note = MARKDOWN_NOTE if cell.cell_type == "markdown" else CODE_NOTE
        entry = polib.POEntry(msgctxt=context(cell), msgid=cell.source, msgstr="", comment=note)
        previous = current.get(cell.id)
        if previous is not None:
            used.add(id(previous))
        if previous is not None and previous.msgctxt == entry.msgctxt:
            if previous.msgid == cell.source:
                previous.comment = note
                if "fuzzy" not in previous.flags:  # done: the old English is no longer needed
                    previous.previous_msgid = previous.previous_msgctxt = None
                catalog.append(previous)
                counts["unchanged"] += 1
                continue
        if previous is not None and previous.msgstr:
            entry.msgstr = previous.msgstr
            entry.flags = ["fuzzy"]
            fuzzy_before = "fuzzy" in previous.flags and previous.previous_msgid is not None
            entry.previous_msgid = previous.previous_msgid if fuzzy_before else previous.msgid
            entry.previous_msgctxt = previous.previous_msgctxt if fuzzy_before else previous.msgctxt
            counts["stale"] += 1
        elif cell.source in by_source:  # the same English text under another cell id
            entry.msgstr = by_source[cell.source]
            counts["unchanged"] += 1
        else:
            counts["new"] += 1
        catalog.append(entry)
    kept_sources = {entry.msgid for entry in catalog}
    for entry in old:
        if id(entry) not in used and entry.msgstr and entry.msgid not in kept_sources:
            entry.obsolete = True
            catalog.append(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    catalog.save(str(path))
    return dict(counts)


# ------------------------------------------------------------------ check
def translated_names(catalogs: Path = CATALOGS) -> set[str]:
    """The English notebooks (file names) that have a catalog."""
    return {f"{path.stem}.ipynb" for path in catalogs.glob("[0-9][0-9]_*.po")}


def _multiset_problems(kind: str, english: Counter, chinese: Counter, shown=None) -> list[str]:
    """One line per kind: what the translation dropped or changed, and what it has instead."""
    shown = shown or {}

    def listed(items: Counter) -> str:
        return ", ".join(repr(shown.get(item, item)) + _times(n) for item, n in items.items())

    missing, extra = english - chinese, chinese - english
    if missing:
        instead = f"; it has {listed(extra)} instead" if extra else ""
        return [f"drops or changes the {kind} {listed(missing)}{instead}"]
    if extra:
        return [f"has the {kind} {listed(extra)}, which the English has not"]
    return []


def _times(count: int) -> str:
    return f" ({count} times)" if count > 1 else ""


def check_markdown(
    english: str, chinese: str, translated: set[str], terms: list[Term]
) -> list[str]:
    """What is wrong with ``chinese`` as the translation of markdown ``english``."""
    en, zh = parse_markdown(english), parse_markdown(chinese)
    problems = _multiset_problems("code span", en.code_spans, zh.code_spans)
    shown = {**zh.fence_text, **en.fence_text}
    problems += _multiset_problems("fenced code block", en.fences, zh.fences, shown)
    problems += _multiset_problems("formula", en.formulas, zh.formulas)
    en_links = Counter(chinese_target(t, translated) for t in en.links)
    zh_links = Counter(chinese_target(t, translated) for t in zh.links)
    link_problems = _multiset_problems("link target", en_links, zh_links)
    if link_problems:
        link_problems[-1] += " (keep the English targets: build rewrites them for zh-CN)"
    problems += link_problems
    if chinese.strip() == english.strip() and re.search(r"[A-Za-z]{3,}", en.prose):
        problems.append("is the English text: not translated")
        return problems
    for term in terms_used(en.prose, terms):
        if not any(form.lower() in zh.prose.lower() for form in term.chinese):
            problems.append(
                f"the English says {term.english!r}: use the glossary's term "
                f"{' or '.join(term.chinese)} (workshop/glossary.md, {GLOSSARY_HEADING[3:]})"
            )
    return problems


def check_code(english: str, chinese: str) -> list[str]:
    """What is wrong with ``chinese`` as ``english`` with translated comments."""
    try:
        zh = code_without_comments(chinese)
    except SyntaxError as error:
        return [f"the translated code does not tokenize: {error}"]
    en = code_without_comments(english)
    if [t[:2] for t in en] == [t[:2] for t in zh]:
        return []
    index = next(
        (i for i, (a, b) in enumerate(zip(en, zh, strict=False)) if a[:2] != b[:2]),
        min(len(en), len(zh)),
    )
    en_line = english.splitlines()[en[index][2] - 1] if index < len(en) else "(end)"
    zh_line = chinese.splitlines()[zh[index][2] - 1] if index < len(zh) else "(end)"
    return [
        "the code differs from the English beyond its comments: the English has "
        f"{en_line.strip()!r} where the translation has {zh_line.strip()!r}"
    ]


def check_catalog(
    english: nbformat.NotebookNode,
    catalog: polib.POFile,
    name: str,
    translated: set[str],
    terms: list[Term],
) -> list[str]:
    """Every problem of ``catalog`` against English notebook ``name``, each a line that
    names the notebook and the cell."""
    cells = {cell.id: cell for cell in english.cells}
    problems, seen = [], set()

    def add(cell_label: str, message: str) -> None:
        problems.append(f"{FOLDER}/catalog/{Path(name).stem}.po: {name}, {cell_label}: {message}")

    for entry in catalog:
        if entry.obsolete:
            continue
        key = split_context(entry.msgctxt)
        if key is None:
            add(
                f"entry {entry.msgctxt!r}",
                "msgctxt must be '<cell id> <12 hex digits of the source hash>'",
            )
            continue
        cell_id, digest = key
        cell = cells.get(cell_id)
        label = describe(cell_id, entry.msgid)
        if cell is None:
            add(
                label, f"no cell has this id in notebooks/{name}: remove the entry (or run extract)"
            )
            continue
        label = describe(cell_id, cell.source)
        if cell_id in seen:
            add(label, "a second entry for this cell: keep one")
            continue
        seen.add(cell_id)
        if generated(cell):
            add(label, "this cell is written by the tool (it has no entry): remove the entry")
            continue
        if not needs_entry(cell):
            add(label, "the English code has no comments, nothing to translate: run extract")
            continue
        if digest != source_hash(cell.source) or entry.msgid != cell.source:
            add(label, f"stale: the English cell changed since {digest}; run extract {name}, "
                "then update the translation and remove its fuzzy flag")  # fmt: skip
            continue
        if "fuzzy" in entry.flags:
            add(label, "fuzzy: the English cell changed (its old text is in the #| lines); "
                "update the translation, then remove the fuzzy flag")  # fmt: skip
            continue
        if not entry.msgstr.strip():
            add(label, "not translated yet")
            continue
        if cell.cell_type == "markdown":
            found = check_markdown(cell.source, entry.msgstr, translated, terms)
        else:
            found = check_code(cell.source, entry.msgstr)
        for message in found:
            add(label, message)
    for cell in english.cells:
        if needs_entry(cell) and cell.id not in seen:
            add(describe(cell.id, cell.source), f"no entry: run extract {name}")
    return problems


def check(
    english_folder: Path = NOTEBOOKS, catalogs: Path = CATALOGS, glossary: Path = GLOSSARY
) -> list[str]:
    """Every problem of every catalog in ``catalogs``."""
    terms = glossary_terms(glossary)
    translated = translated_names(catalogs)
    problems = []
    for path in sorted(catalogs.glob("*.po")):
        name = f"{path.stem}.ipynb"
        english = english_folder / name
        if not english.exists():
            problems.append(f"{path.name}: no English notebook notebooks/{name}: remove it")
            continue
        try:
            catalog = load_catalog(path)
        except (OSError, ValueError) as error:
            problems.append(f"{path.name}: not a readable PO file: {error}")
            continue
        problems += check_catalog(read(english), catalog, name, translated, terms)
    return problems


# ------------------------------------------------------------------ build
def chinese_title(name: str, english_folder: Path = NOTEBOOKS, catalogs: Path = CATALOGS):
    """The Chinese title of notebook ``name`` from its catalog, or None when it has none."""
    path = catalogs / f"{Path(name).stem}.po"
    if not path.exists():
        return None
    first = read(english_folder / name).cells[0]
    entry = entries_by_id(load_catalog(path)).get(first.id)
    if entry is None or not entry.msgstr or entry.msgctxt != context(first):
        return None
    match = re.match(r"#\s+(.+)", entry.msgstr.strip())
    return match.group(1).strip() if match else None


def chinese_badges(url: str, name: str) -> str:
    """The launch links of the Chinese notebook ``name``: to ``notebooks/zh-CN/name``."""
    links = launch_links(name, url, folder=FOLDER)
    return BADGES_LABEL + " " + " · ".join(f"[{LINK_NAMES[k]}]({v})" for k, v in links.items())


def chinese_setup(url: str, name: str) -> str:
    return setup_source(
        url, name, title=SETUP_TITLE, about=SETUP_ABOUT, language=LANGUAGE, comments=SETUP_COMMENTS
    )


def chinese_next(
    following: Path | None, translated: set[str], english_folder: Path, catalogs: Path
) -> str:
    if following is None:
        overview = chinese_target("../README.md", translated)
        return f"{NEXT_LABEL} 这是目前已发布的最后一个 notebook。返回[课程概览]({overview})。"
    zh_title = chinese_title(following.name, english_folder, catalogs)
    if following.name in translated and zh_title is not None:
        return f"{NEXT_LABEL} [{zh_title}]({following.name})"
    target = chinese_target(following.name, set())
    return f"{NEXT_LABEL} [{title(read(following))}]({target})（英文版，中文版尚未发布）"


def build_notebook(
    english_path: Path,
    catalog: polib.POFile,
    existing: nbformat.NotebookNode | None,
    *,
    url: str,
    following: Path | None,
    translated: set[str],
    catalogs: Path = CATALOGS,
) -> nbformat.NotebookNode:
    """The Chinese notebook of ``english_path``: its cells, ids and metadata, text from
    ``catalog``, and the outputs of ``existing`` (the committed Chinese notebook) for each
    code cell whose code is unchanged."""
    nb = read(english_path)
    entries = entries_by_id(catalog)
    kept = {c.id: c for c in existing.cells if c.cell_type == "code"} if existing else {}
    english_folder = english_path.parent
    for cell in nb.cells:
        entry = entries.get(cell.id)
        if BADGES_TAG in tags(cell):
            cell.source = chinese_badges(url, english_path.name)
        elif SETUP_TAG in tags(cell):
            cell.source = chinese_setup(url, english_path.name)
        elif NEXT_TAG in tags(cell):
            cell.source = chinese_next(following, translated, english_folder, catalogs)
        elif entry is not None and entry.msgstr:
            text = entry.msgstr
            cell.source = localize_links(text, translated) if cell.cell_type == "markdown" else text
        if cell.cell_type == "code":
            old = kept.get(cell.id)
            if old is not None and old.source == cell.source:
                cell.outputs = copy.deepcopy(old.outputs)
                cell.execution_count = old.execution_count
            else:
                cell.outputs, cell.execution_count = [], None
    return nb


def _comparable(nb: nbformat.NotebookNode) -> list:
    return [(c.get("id"), c.cell_type, c.source, dict(c.metadata)) for c in nb.cells]


def build(
    check_only: bool = False,
    english_folder: Path = NOTEBOOKS,
    out: Path = ZH_NOTEBOOKS,
    catalogs: Path = CATALOGS,
    glossary: Path = GLOSSARY,
    url: str | None = None,
) -> list[str]:
    """Write (or, ``check_only``, compare) the Chinese notebook of every catalog; return the
    problems (catalog problems first: nothing is written while there are any)."""
    problems = check(english_folder, catalogs, glossary)
    if problems:
        return problems
    url = url or repository_url()
    translated = translated_names(catalogs)
    paths = sorted(english_folder.glob("[0-9][0-9]_*.ipynb"))  # as course.notebook_paths()
    names = {path.name for path in paths}
    for orphan in sorted(out.glob("*.ipynb")):
        if orphan.name not in names:
            problems.append(f"{FOLDER}/{orphan.name}: no English notebook of that name: remove it")
    for index, path in enumerate(paths):
        target = out / path.name
        if path.name not in translated:
            if target.exists():
                problems.append(f"{FOLDER}/{path.name}: it has no catalog: remove it")
            continue
        existing = read(target) if target.exists() else None
        nb = build_notebook(
            path,
            load_catalog(catalogs / f"{path.stem}.po"),
            existing,
            url=url,
            following=paths[index + 1] if index + 1 < len(paths) else None,
            translated=translated,
            catalogs=catalogs,
        )
        if check_only:
            if existing is None:
                problems.append(f"{FOLDER}/{path.name}: missing; run build")
            elif _comparable(existing) != _comparable(nb) or existing.metadata != nb.metadata:
                differing = [
                    cell_id
                    for (cell_id, *a), (_, *b) in zip(
                        _comparable(existing), _comparable(nb), strict=False
                    )
                    if a != b
                ] or ["(the cells or the notebook's metadata)"]
                problems.append(
                    f"{FOLDER}/{path.name}: differs from what build writes, cell "
                    f"{', '.join(differing)}: run python tools/translate_notebooks.py build"
                )
        else:
            out.mkdir(parents=True, exist_ok=True)
            write(nb, target)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    extracting = commands.add_parser("extract", help="create or update catalogs")
    extracting.add_argument("notebooks", nargs="*", type=Path, help="English notebooks")
    commands.add_parser("check", help="list every problem of the catalogs")
    building = commands.add_parser("build", help="write notebooks/zh-CN/")
    building.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    if args.command == "extract":
        names = [p.name for p in args.notebooks] or sorted(translated_names())
        for name in names:
            english = NOTEBOOKS / name
            if not english.exists():
                parser.error(f"no English notebook notebooks/{name}")
            counts = extract(english)
            print(f"{catalog_path(name).relative_to(ROOT)}: {counts['new']} new, "
                  f"{counts['stale']} stale (fuzzy), {counts['unchanged']} unchanged")  # fmt: skip
        return 0
    problems = check() if args.command == "check" else build(check_only=args.check)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
