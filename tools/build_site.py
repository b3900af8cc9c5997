"""Build the course as a static web site that opens from the file system, offline.

    python tools/build_site.py            # into build/site/
    python tools/build_site.py --out DIR

Every notebook becomes a page with its committed outputs (nothing is re-run), with links to
the course index and to the previous and next notebook, "Open in Colab", "Launch Binder" and
"Download .ipynb" links, and its setup cell folded; the README, the instructor guide, the setup
page, the glossary and the loop auditor's README become pages too, and links between them point to
the pages. The Simplified Chinese edition's notebooks (notebooks/zh-CN/) become pages in DIR/zh-CN/,
with Chinese navigation, and so do the Chinese documents that exist (README.zh-CN.md,
workshop/zh-CN/*.md; ``chinese_documents``); every page links to its counterpart in the other
language, or to that language's home page where it has none. Every page has a search box over all
of them. Formulas are typeset by KaTeX and the search runs on lunr.js, both bundled into
DIR/_static/ (tools/site_assets.py fetches them from the npm registry once), so no page loads
anything from the network. Open DIR/index.html, or publish
DIR as it is (README: "The course site").
"""

from __future__ import annotations

import argparse
import html
import posixpath
import re
import shutil
import sys
from pathlib import Path

import mistune
import nbformat
import site_assets
import site_search
import translate_notebooks
from bs4 import BeautifulSoup
from course import ROOT, chinese_notebook_paths, launch_links, notebook_paths, read, title
from nbconvert import HTMLExporter

FILES = site_search.FILES  # the template, styles and scripts of the site
CHINESE = "zh-CN"  # the Chinese edition: notebooks/zh-CN/ in the repository, zh-CN/ in the site
PAGES = {  # markdown source -> page in the site
    ROOT / "README.md": "index.html",
    ROOT / "workshop" / "instructor-guide.md": "instructor-guide.html",
    ROOT / "workshop" / "setup.md": "setup.html",
    ROOT / "workshop" / "glossary.md": "glossary.html",
    ROOT / "loop_auditor" / "README.md": "loop-auditor.html",  # the practitioners' tool
}
PAGE_TITLES = {
    "index.html": "Gradient Mechanics in PyTorch",
    "instructor-guide.html": "Instructor guide",
    "setup.html": "Learner setup",
    "glossary.html": "Glossary",
    "loop-auditor.html": "The loop auditor",
}
# Where a Chinese document of PAGES is, by the repository's conventions; an entry of
# tools/translate_notebooks.py's COUNTERPARTS (the list the Chinese notebooks' links use) wins.
CHINESE_DOCUMENTS = {
    "README.md": "README.zh-CN.md",
    "workshop/instructor-guide.md": "workshop/zh-CN/instructor-guide.md",
    "workshop/setup.md": "workshop/zh-CN/setup.md",
    "workshop/glossary.md": "workshop/zh-CN/glossary.md",
    "loop_auditor/README.md": "loop_auditor/README.zh-CN.md",
}
# What the pages say, in each language. The Chinese launch links are the Chinese notebooks' own.
WORDS = {
    "en": {
        "index": "Course index", "setup": "Setup", "guide": "Instructor guide",
        "glossary": "Glossary", "search": "Search the course", "run": "Run it:",
        "download": "Download .ipynb", "links": {}, "other_only": "",
        "switch": "中文", "switch_title": "本页的简体中文版",
        "switch_home": "中文版首页", "switch_home_title": "本页暂无中文版：转到中文版首页",
        "widget": "Here the notebook shows an interactive widget (a slider and its plot). It "
                  "runs in JupyterLab, Binder or Colab (\"Run it\" at the top); a static page "
                  "cannot run it.",
    },
    CHINESE: {
        "index": "课程概览", "setup": "环境配置", "guide": "讲师指南", "glossary": "术语表",
        # the page adds a download link to the notebook's two online ones: not 在线运行
        "search": "搜索课程", "run": "运行方式：",
        "download": "下载 .ipynb", "links": translate_notebooks.LINK_NAMES,
        "other_only": "（英文）",
        "switch": "English", "switch_title": "This page in English",
        "switch_home": "English home", "switch_home_title": "This page has no English version: "
                                                           "go to the English home page",
        "widget": "notebook 运行到这里时会显示一个交互控件（滑块及其图表）。它需要在 JupyterLab、"
                  "Binder 或 Colab 中运行（见页首的“运行方式”），静态页面无法运行它。",
    },
}  # fmt: skip
HOME = {"en": "index.html", CHINESE: f"{CHINESE}/index.html"}
# The Chinese home page while README.zh-CN.md does not exist: the Chinese notebooks, in order.
CHINESE_HOME = """# Gradient Mechanics in PyTorch · 简体中文版

本课程的十个 notebook 都有简体中文版，见下表。课程介绍、学员环境配置、讲师指南和术语表暂时只有
英文版：见 [English 首页](../../README.md)。

| | notebook |
|---|---|
{rows}
"""
HEAD = """<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="{root}_static/katex/katex.min.css">
<link rel="stylesheet" href="{root}_static/course.css">
<script defer src="{root}_static/katex/katex.min.js"></script>
<script defer src="{root}_static/katex/auto-render.min.js"></script>
<script defer src="{root}_static/course.js"></script>"""
MARKDOWN_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 0 auto; padding: 0 1rem;
       line-height: 1.5; }
table { border-collapse: collapse; display: block; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; }
pre { background: #f6f8fa; padding: 0.6rem; overflow-x: auto; }
"""
markdown = mistune.create_markdown(plugins=["strikethrough", "footnotes", "table", "math"])


def _page_name(path: Path) -> str:
    """A notebook's page: ``03_x.html``, or ``zh-CN/03_x.html`` for the Chinese edition's."""
    page = path.stem + ".html"
    return f"{CHINESE}/{page}" if path.parent.name == CHINESE else page


def language_of(page: str) -> str:
    return CHINESE if page.startswith(CHINESE + "/") else "en"


def _root(page: str) -> str:
    """The site's root seen from ``page``: ``""`` or ``"../"``."""
    return "../" * page.count("/")


def href(target: str, here: str) -> str:
    """The link from page ``here`` to page ``target`` (both relative to the site's root)."""
    return posixpath.relpath(target, posixpath.dirname(here) or ".")


def chinese_documents(root: Path = ROOT) -> dict[Path, str]:
    """The Chinese documents that exist -> their pages (``zh-CN/index.html`` for
    README.zh-CN.md): each English document of PAGES whose Chinese counterpart is there."""
    found = {}
    for source, page in PAGES.items():
        english = source.relative_to(ROOT).as_posix()
        chinese = translate_notebooks.COUNTERPARTS.get(english, CHINESE_DOCUMENTS[english])
        if (root / chinese).is_file():
            found[root / chinese] = f"{CHINESE}/{page}"
    return found


def counterpart(page: str, pages: set[str]) -> tuple[str, bool]:
    """The page in the other language (True), or that language's home page (False)."""
    if language_of(page) == CHINESE:
        other, home = page.removeprefix(CHINESE + "/"), HOME["en"]
    else:
        other, home = f"{CHINESE}/{page}", HOME[CHINESE]
    return (other, True) if other in pages else (home, False)


def _rewrite_links(text: str, here: Path, page: str, by_source: dict[Path, str]) -> str:
    """Point links to notebooks and to the markdown pages at their pages in the site
    (``by_source``: a resolved source path -> its page), relative to ``page``."""

    def replace(match: re.Match) -> str:
        target = match.group(2)
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            return match.group(0)
        path, _, anchor = target.partition("#")
        found = by_source.get((here.parent / path).resolve())
        if found is None:
            return match.group(0)
        link = href(found, page)
        return f"{match.group(1)}{link}{'#' + anchor if anchor else ''}{match.group(3)}"

    def replace_in(tag: re.Match) -> str:
        if re.search(r"\sdownload\b", tag.group(0)):  # "Download .ipynb" keeps its file
            return tag.group(0)
        return re.sub(r'(href=")([^"]+)(")', replace, tag.group(0))

    return re.sub(r"<a\b[^>]*>", replace_in, text)


def _short(notebook_title: str) -> str:
    """``04 · Several losses``, whose words after the number a narrow screen leaves out."""
    number, _, rest = notebook_title.partition(" · ")
    return f'{html.escape(number)}<span class="course-nav-long"> · {html.escape(rest)}</span>'


def _nav(
    page: str,
    pages: set[str],
    previous: tuple[str, str] | None = None,
    following: tuple[str, str] | None = None,
) -> str:
    """The navigation bar of ``page``: its language's index, the previous and next notebook,
    the setup page, the guide and the glossary (in its language where that page exists, else
    marked as the other's), the search box, and the switch to the other language."""
    lang = language_of(page)
    words = WORDS[lang]

    def link(target: str, label: str) -> str:
        return f'<a href="{href(target, page)}">{label}</a>'

    def in_language(english_page: str, label: str) -> str:
        target = f"{CHINESE}/{english_page}" if lang == CHINESE else english_page
        if target not in pages:
            return link(english_page, label + words["other_only"])
        return link(target, label)

    items = [link(HOME[lang], words["index"])]
    if previous:
        items.append(link(previous[0], f"&larr; {_short(previous[1])}"))
    if following:
        items.append(link(following[0], f"{_short(following[1])} &rarr;"))
    items.append(in_language("setup.html", words["setup"]))
    items.append(in_language("instructor-guide.html", words["guide"]))
    items.append(in_language("glossary.html", words["glossary"]))
    items.append(
        '<div class="course-search" role="search"><input type="search" '
        f'placeholder="{words["search"]}" aria-label="{words["search"]}" autocomplete="off">'
        '<ol class="course-search-results" hidden></ol></div>'
    )
    other, exact = counterpart(page, pages)
    other_lang = "en" if lang == CHINESE else CHINESE
    label, tip = (
        (words["switch"], words["switch_title"])
        if exact
        else (words["switch_home"], words["switch_home_title"])
    )
    items.append(
        f'<a class="course-language" href="{href(other, page)}" hreflang="{other_lang}" '
        f'lang="{other_lang}" title="{html.escape(tip)}" data-counterpart="{str(exact).lower()}">'
        f"{html.escape(label)}</a>"
    )
    return '<nav class="course">' + "".join(items) + "</nav>"


def _launch(path: Path, lang: str) -> str:
    """The notebook page's launch links: made from the setting the notebooks' links use."""
    words = WORDS[lang]
    folder = translate_notebooks.FOLDER if lang == CHINESE else "notebooks"
    links = [
        f'<a href="{html.escape(url)}">{html.escape(words["links"].get(name, name))}</a>'
        for name, url in launch_links(path.name, folder=folder).items()
    ]
    links.append(f'<a href="{path.name}" download>{words["download"]}</a>')
    launch = (
        f'<p class="course-launch"><strong>{words["run"]}</strong> ' + " · ".join(links) + "</p>"
    )
    # In the markup of a markdown cell, so that it lines up with the notebook's prose.
    return (
        '<div class="jp-Cell-inputWrapper"><div class="jp-Collapser jp-InputCollapser '
        'jp-Cell-inputCollapser"></div><div class="jp-InputArea jp-Cell-inputArea">'
        '<div class="jp-InputPrompt jp-InputArea-prompt"></div><div class="jp-RenderedHTMLCommon'
        f' jp-RenderedMarkdown jp-MarkdownOutput">{launch}</div></div></div>'
    )


def fold_title(source: str) -> str:
    """The title a folded cell shows: its ``# @title`` line, without Colab's form options."""
    first = source.splitlines()[0] if source else ""
    return re.sub(r"\s*\{.*\}\s*$", "", first.removeprefix("# @title ")).strip() or "Code"


def github_slug(text: str) -> str:
    """A heading's anchor as GitHub makes it, so the README's own #links work on the site."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _add_ids(soup: BeautifulSoup, glossary: bool) -> None:
    """Give every heading an id (and, in the glossary, every entry), so search links to it."""
    used: set[str] = set()

    def unique(slug: str) -> str:  # as GitHub: the second "notes" is "notes-1"
        candidate, n = slug, 0
        while candidate in used:
            n += 1
            candidate = f"{slug}-{n}"
        used.add(candidate)
        return candidate

    for heading in soup.find_all(site_search.HEADINGS):
        heading["id"] = unique(github_slug(heading.get_text()))
    if glossary:
        for paragraph in soup.find_all("p"):
            first = next((c for c in paragraph.children if str(c).strip()), None)
            if getattr(first, "name", None) == "strong":
                paragraph["id"] = unique(github_slug(first.get_text()))


def markdown_title(text: str, default: str) -> str:
    """A Chinese document's title: its first ``# `` heading (the English page's title if none)."""
    match = re.search(r"^#\s+(.+?)\s*#*\s*$", text, flags=re.MULTILINE)
    return match.group(1) if match else default


def _markdown_page(
    text: str, source: Path, page: str, page_title: str, pages: set[str], by_source: dict
) -> BeautifulSoup:
    lang = language_of(page)
    body = markdown(text)
    document = (
        f"<!DOCTYPE html><html lang='{lang}'><head><meta charset='utf-8'>"
        f"<title>{html.escape(page_title)}</title>{HEAD.format(root=_root(page))}"
        f"<style>{MARKDOWN_STYLE}</style></head>"
        f"<body>{_nav(page, pages)}<main>{body}</main></body></html>"
    )
    soup = BeautifulSoup(_rewrite_links(document, source, page, by_source), "html.parser")
    _add_ids(soup, glossary=page.endswith("glossary.html"))
    return soup


def _markdown_documents(root: Path = ROOT) -> list[tuple[Path, str, str, str]]:
    """Every markdown page: (source, page, title, markdown text), the Chinese ones after the
    English, and a Chinese home page made from the notebooks' titles while README.zh-CN.md
    does not exist."""
    documents = []
    for source, page in PAGES.items():
        if not source.exists():
            raise FileNotFoundError(f"{source.relative_to(ROOT)} is missing")
        documents.append((source, page, PAGE_TITLES[page], source.read_text(encoding="utf-8")))
    chinese = chinese_documents(root)
    for source, page in chinese.items():
        text = source.read_text(encoding="utf-8")
        english_title = PAGE_TITLES[page.removeprefix(CHINESE + "/")]
        documents.append((source, page, markdown_title(text, english_title), text))
    if HOME[CHINESE] not in chinese.values():
        rows = "\n".join(
            f"| {path.name[:2]} | [{title(read(path))}]({path.name}) |"  # to its page
            for path in chinese_notebook_paths()
        )
        source = root / "notebooks" / CHINESE / "index.md"  # not a file: links resolve from it
        documents.append((source, HOME[CHINESE], "Gradient Mechanics in PyTorch · 简体中文版",
                          CHINESE_HOME.format(rows=rows)))  # fmt: skip
    return documents


def build(out: Path) -> list[Path]:
    """Write the site into ``out``; return the pages written."""
    out.mkdir(parents=True, exist_ok=True)
    (out / CHINESE).mkdir(exist_ok=True)
    static = out / "_static"
    if static.exists():
        shutil.rmtree(static)
    site_assets.install(static)
    for name in ("course.css", "course.js"):
        shutil.copy(FILES / name, static / name)
    documents = _markdown_documents()
    editions = [notebook_paths(), chinese_notebook_paths()]
    by_source = {source.resolve(): page for source, page, _, _ in documents}
    by_source.update({p.resolve(): _page_name(p) for paths in editions for p in paths})
    pages = set(by_source.values())
    written, sections = [], []
    for source, page, page_title, text in documents:
        soup = _markdown_page(text, source, page, page_title, pages, by_source)
        (out / page).write_text(str(soup), encoding="utf-8")
        written.append(out / page)
        sections += site_search.markdown_sections(page, page_title, soup, language_of(page))
    # One exporter for every notebook page: its template is compiled once.
    exporter = HTMLExporter(template_file=str(FILES / "notebook.html.j2"))
    for paths in editions:
        titles = [title(read(p)) for p in paths]
        for index, path in enumerate(paths):
            page = _page_name(path)
            lang = language_of(page)
            previous = (_page_name(paths[index - 1]), titles[index - 1]) if index else None
            following = (
                (_page_name(paths[index + 1]), titles[index + 1])
                if index + 1 < len(paths)
                else None
            )
            course = {"head": HEAD.format(root=_root(page)),
                      "nav": _nav(page, pages, previous, following),
                      "launch": _launch(path, lang), "fold_title": fold_title,
                      "widget": WORDS[lang]["widget"]}  # fmt: skip
            resources = {"course": course, "metadata": {"name": titles[index]}}
            body, _ = exporter.from_notebook_node(nbformat.from_dict(read(path)), resources)
            body = body.replace('<html lang="en">', f'<html lang="{lang}">', 1)
            target = out / page
            text = _rewrite_links(body, path, page, by_source)
            target.write_text(text, encoding="utf-8")
            shutil.copy(path, target.parent / path.name)  # what "Download .ipynb" gives
            written.append(target)
            soup = BeautifulSoup(text, "html.parser")
            sections += site_search.notebook_sections(page, titles[index], soup, lang)
    site_search.build_index(sections, out / "search-index.js", static / "lunr" / "lunr.min.js")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site")
    args = parser.parse_args(argv)
    pages = build(args.out)
    print(f"wrote {len(pages)} pages; open {args.out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
