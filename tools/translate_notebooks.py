"""The Simplified Chinese edition: ``notebooks/zh-CN/`` and the documents of
tools/translate_documents.py (``README.zh-CN.md``, ``workshop/zh-CN/``), generated from the
English and one translation catalog per notebook or document, so that it cannot drift.

    python tools/translate_notebooks.py extract FILE ...  # create or update catalogs
    python tools/translate_notebooks.py extract           # update every existing catalog
    python tools/translate_notebooks.py check             # exit 1 listing every problem
    python tools/translate_notebooks.py build             # write the Chinese notebooks, documents
    python tools/translate_notebooks.py build --check     # exit 1 if one differs from it

``FILE`` is an English notebook (``notebooks/NN_name.ipynb``) or document (``README.md``,
``workshop/setup.md``); this module is the command, and the notebooks' half of it. The
documents' half is tools/translate_documents.py; what both share (the catalogs, the checks,
the glossary) is tools/translation.py.

A notebook's catalog is a gettext PO file, ``notebooks/zh-CN/catalog/NN_name.po``, with one
entry per English markdown cell and per code cell that has comments. An entry's ``msgctxt`` is
the cell's id and the first 12 hex digits of the SHA-256 of its English source; ``msgid`` is
that source and ``msgstr`` its translation. When an English cell changes, its entry no longer
matches and ``check`` fails on it; ``extract`` then brings in the new English text and keeps
the old translation, marked fuzzy with the English it translated (``#|`` lines), until a
translator updates it and removes the flag. The cells that tools/sync_notebooks.py writes
(launch links, setup cell, link to the next notebook) have no entry: ``build`` writes their
Chinese form itself.

``check`` holds every translation to its English cell: the inline code spans, fenced code
blocks, formulas and link targets of a markdown cell must be the English ones (as multisets;
a python or shell block may translate its comments), a code cell's code must be the English
code token for token once comments are removed, and each term of the glossary's Chinese table
(``workshop/glossary.md``) that the English uses must appear as its Chinese term.

``build`` writes each notebook that has a catalog: the English cells, ids and metadata, with
markdown from the catalog, code from the catalog where it has an entry and else the English
code. Relative links are rewritten for the folder (``../helpers/x.py`` ->
``../../helpers/x.py``, or to a Chinese counterpart listed in ``COUNTERPARTS``, the documents
of the edition); a link to another notebook stays a sibling link when that notebook has a
Chinese edition, else it points to the English one. Outputs of code cells whose code did not
change are kept, so build never wipes what tools/run_notebooks.py made; run that on a notebook
whose code cells changed.
"""

from __future__ import annotations

import argparse
import copy
import posixpath
import re
import sys
from pathlib import Path

import nbformat
import polib
import translate_documents
from course import NOTEBOOKS, ROOT, launch_links, read, repository_url, title, write
from sync_notebooks import BADGES_TAG, NEXT_TAG, SETUP_TAG, setup_source
from translate_documents import CHINESE_DOCUMENTS
from translation import (  # noqa: F401 (code_without_comments, glossary_terms: the tests')
    GLOSSARY,
    LANGUAGE,
    NOTEBOOK_CATALOGS,
    SCHEME,
    check_code,
    check_markdown,
    code_without_comments,
    entries_by_key,
    glossary_terms,
    has_comments,
    load_catalog,
    merge,
    not_terms,
    rewrite_links,
    source_hash,
    split_context,
    stale_or_untranslated,
)
from translation import translated_notebooks as translated_names

FOLDER = "notebooks/zh-CN"
ZH_NOTEBOOKS = ROOT / FOLDER
CATALOGS = NOTEBOOK_CATALOGS
GENERATED_TAGS = (BADGES_TAG, SETUP_TAG, NEXT_TAG)

COUNTERPARTS: dict[str, str] = CHINESE_DOCUMENTS
"""A page's repository path -> its Chinese counterpart's (translate_documents): links to it
from a Chinese notebook point there (``../README.md`` -> ``../../README.zh-CN.md``)."""

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


# ------------------------------------------------------------------ cells
def context(cell) -> str:
    """An entry's ``msgctxt``: ``"<cell id> <source hash>"``."""
    return f"{cell.id} {source_hash(cell.source)}"


def tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def generated(cell) -> bool:
    """A cell that tools/sync_notebooks.py writes (and this tool writes in Chinese)."""
    return any(tag in tags(cell) for tag in GENERATED_TAGS)


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


# ------------------------------------------------------------------ links
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
    return rewrite_links(source, lambda target: chinese_target(target, translated))


# ------------------------------------------------------------------ catalogs
def catalog_path(name: str) -> Path:
    """The catalog of English notebook ``name`` (``00_setup_check.ipynb``)."""
    return CATALOGS / f"{Path(name).stem}.po"


def entries_by_id(catalog: polib.POFile) -> dict[str, polib.POEntry]:
    return entries_by_key(catalog)


def extract(english: Path, path: Path | None = None) -> dict[str, int]:
    """Create or update the catalog of the English notebook ``english`` (translation.merge):
    one entry per markdown cell and per code cell with comments, keyed by the cell's id.
    Returns how many entries are ``new``, ``stale`` and ``unchanged``."""
    pieces = [
        (cell.id, cell.source, MARKDOWN_NOTE if cell.cell_type == "markdown" else CODE_NOTE)
        for cell in read(english).cells
        if needs_entry(cell)
    ]
    path = path or catalog_path(english.name)
    return merge(path, pieces, f"notebooks/{english.name}", english.stem)


# ------------------------------------------------------------------ check
def check_catalog(
    english: nbformat.NotebookNode,
    catalog: polib.POFile,
    name: str,
    translated: set[str],
    terms: list,
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
        unusable = stale_or_untranslated(entry, cell.source, digest, f"extract {name}", "cell")
        if unusable:
            add(label, unusable)
            continue
        if cell.cell_type == "markdown":
            found = check_markdown(
                cell.source,
                entry.msgstr,
                terms,
                lambda t: chinese_target(t, translated),
                FOLDER,
                not_terms(entry),
            )
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
    extracting.add_argument(
        "files", nargs="*", type=Path, help="English notebooks (.ipynb) or documents (.md)"
    )
    commands.add_parser("check", help="list every problem of the catalogs")
    building = commands.add_parser("build", help="write notebooks/zh-CN/ and the documents")
    building.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    if args.command == "extract":
        return _extract(parser, args.files)
    if args.command == "check":
        problems = check() + translate_documents.check()
    else:
        problems = build(check_only=args.check) + translate_documents.build(args.check)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return 1
    return 0


def _extract(parser: argparse.ArgumentParser, files: list[Path]) -> int:
    """``extract``: the catalogs of ``files``, or of every notebook and document that has one."""
    edition = translate_documents.EDITION
    if not files:
        files = [NOTEBOOKS / name for name in sorted(translated_names())]
        files += [edition.root / english for english in edition.documents]
    for file in files:
        if file.suffix == ".ipynb":
            english = NOTEBOOKS / file.name
            if not english.exists():
                parser.error(f"no English notebook notebooks/{file.name}")
            counts, shown = extract(english), catalog_path(file.name).relative_to(ROOT)
        else:
            try:
                english = file.resolve().relative_to(edition.root).as_posix()
            except ValueError:
                parser.error(f"{file} is not in the repository")
            if english not in edition.documents:
                parser.error(
                    f"{english} is not a document of the Chinese edition: add it to "
                    "CHINESE_DOCUMENTS in tools/translate_documents.py"
                )
            counts = translate_documents.extract(english, edition)
            shown = edition.shown(edition.catalog(english))
        print(f"{shown}: {counts['new']} new, "
              f"{counts['stale']} stale (fuzzy), {counts['unchanged']} unchanged")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
