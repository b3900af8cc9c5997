"""Build the course as a static web site that opens from the file system, offline.

    python tools/build_site.py            # into build/site/
    python tools/build_site.py --out DIR

Every notebook becomes a page with its committed outputs (nothing is re-run), with links to
the course index and to the previous and next notebook, "Open in Colab", "Launch Binder" and
"Download .ipynb" links, and its setup cell folded; the README, the instructor guide, the setup
page, the glossary and the loop auditor's README become pages too, and links between them point to
the pages. Every page has a search box over all of them. Formulas are typeset by KaTeX and the
search runs on lunr.js, both bundled into DIR/_static/ (tools/site_assets.py fetches them from the
npm
registry once), so no page loads anything from the network. Open DIR/index.html, or publish
DIR as it is (README: "The course site").
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import sys
from pathlib import Path

import mistune
import nbformat
import site_assets
import site_search
from bs4 import BeautifulSoup
from course import ROOT, launch_links, notebook_paths, read, title
from nbconvert import HTMLExporter

FILES = site_search.FILES  # the template, styles and scripts of the site
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
HEAD = """<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="_static/katex/katex.min.css">
<link rel="stylesheet" href="_static/course.css">
<script defer src="_static/katex/katex.min.js"></script>
<script defer src="_static/katex/auto-render.min.js"></script>
<script defer src="_static/course.js"></script>"""
MARKDOWN_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 0 auto; padding: 0 1rem;
       line-height: 1.5; }
table { border-collapse: collapse; display: block; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; }
pre { background: #f6f8fa; padding: 0.6rem; overflow-x: auto; }
"""
markdown = mistune.create_markdown(plugins=["strikethrough", "footnotes", "table", "math"])


def _page_name(path: Path) -> str:
    return path.stem + ".html"


def _rewrite_links(text: str, here: Path) -> str:
    """Point links to notebooks and to the markdown pages at their pages in the site."""
    by_source = {source.resolve(): page for source, page in PAGES.items()}
    by_source.update({p.resolve(): _page_name(p) for p in notebook_paths()})

    def replace(match: re.Match) -> str:
        target = match.group(2)
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            return match.group(0)
        path, _, anchor = target.partition("#")
        page = by_source.get((here.parent / path).resolve())
        if page is None:
            return match.group(0)
        return f"{match.group(1)}{page}{'#' + anchor if anchor else ''}{match.group(3)}"

    def replace_in(tag: re.Match) -> str:
        if re.search(r"\sdownload\b", tag.group(0)):  # "Download .ipynb" keeps its file
            return tag.group(0)
        return re.sub(r'(href=")([^"]+)(")', replace, tag.group(0))

    return re.sub(r"<a\b[^>]*>", replace_in, text)


def _short(notebook_title: str) -> str:
    """``04 · Several losses``, whose words after the number a narrow screen leaves out."""
    number, _, rest = notebook_title.partition(" · ")
    return f'{html.escape(number)}<span class="course-nav-long"> · {html.escape(rest)}</span>'


def _nav(previous: tuple[str, str] | None, following: tuple[str, str] | None) -> str:
    items = ['<a href="index.html">Course index</a>']
    if previous:
        items.append(f'<a href="{previous[0]}">&larr; {_short(previous[1])}</a>')
    if following:
        items.append(f'<a href="{following[0]}">{_short(following[1])} &rarr;</a>')
    items.append('<a href="setup.html">Setup</a>')
    items.append('<a href="instructor-guide.html">Instructor guide</a>')
    items.append('<a href="glossary.html">Glossary</a>')
    items.append(
        '<div class="course-search" role="search"><input type="search" '
        'placeholder="Search the course" aria-label="Search the course" autocomplete="off">'
        '<ol class="course-search-results" hidden></ol></div>'
    )
    return '<nav class="course">' + "".join(items) + "</nav>"


def _launch(path: Path) -> str:
    """The notebook page's launch links: made from the setting the notebooks' links use."""
    links = [
        f'<a href="{html.escape(href)}">{html.escape(name)}</a>'
        for name, href in launch_links(path.name).items()
    ]
    links.append(f'<a href="{path.name}" download>Download .ipynb</a>')
    launch = '<p class="course-launch"><strong>Run it:</strong> ' + " · ".join(links) + "</p>"
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


def _markdown_page(source: Path, page: str) -> BeautifulSoup:
    page_title = PAGE_TITLES[page]
    body = markdown(source.read_text(encoding="utf-8"))
    text = (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(page_title)}</title>{HEAD}<style>{MARKDOWN_STYLE}</style></head>"
        f"<body>{_nav(None, None)}<main>{body}</main></body></html>"
    )
    soup = BeautifulSoup(_rewrite_links(text, source), "html.parser")
    _add_ids(soup, glossary=page == "glossary.html")
    return soup


def build(out: Path) -> list[Path]:
    """Write the site into ``out``; return the pages written."""
    out.mkdir(parents=True, exist_ok=True)
    static = out / "_static"
    if static.exists():
        shutil.rmtree(static)
    site_assets.install(static)
    for name in ("course.css", "course.js"):
        shutil.copy(FILES / name, static / name)
    written, sections = [], []
    for source, page in PAGES.items():
        if not source.exists():
            raise FileNotFoundError(f"{source.relative_to(ROOT)} is missing")
        soup = _markdown_page(source, page)
        (out / page).write_text(str(soup), encoding="utf-8")
        written.append(out / page)
        sections += site_search.markdown_sections(page, PAGE_TITLES[page], soup)
    exporter = HTMLExporter(template_file=str(FILES / "notebook.html.j2"))
    paths = notebook_paths()
    titles = [title(read(p)) for p in paths]
    for index, path in enumerate(paths):
        nb = read(path)
        previous = (_page_name(paths[index - 1]), titles[index - 1]) if index else None
        following = (
            (_page_name(paths[index + 1]), titles[index + 1]) if index + 1 < len(paths) else None
        )
        course = {"head": HEAD, "nav": _nav(previous, following), "launch": _launch(path),
                  "fold_title": fold_title}  # fmt: skip
        body, _ = exporter.from_notebook_node(nbformat.from_dict(nb), resources={"course": course})
        target = out / _page_name(path)
        text = _rewrite_links(body, path)
        target.write_text(text, encoding="utf-8")
        shutil.copy(path, out / path.name)  # what "Download .ipynb" gives
        written.append(target)
        soup = BeautifulSoup(text, "html.parser")
        sections += site_search.notebook_sections(target.name, titles[index], soup)
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
