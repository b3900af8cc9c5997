"""Build the course as a static web site that opens from the file system, offline.

    python tools/build_site.py            # into build/site/
    python tools/build_site.py --out DIR

Every notebook becomes a page with its committed outputs (nothing is re-run), with links to
the course index and to the previous and next notebook; the README, the instructor guide, the
setup page and the glossary become pages too, and links between them point to the pages.
Open DIR/index.html in a browser. Formulas are shown as TeX (MathJax needs the network).
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path

import mistune
import nbformat
from course import ROOT, notebook_paths, read, title
from nbconvert import HTMLExporter

PAGES = {  # markdown source -> page in the site
    ROOT / "README.md": "index.html",
    ROOT / "workshop" / "instructor-guide.md": "instructor-guide.html",
    ROOT / "workshop" / "setup.md": "setup.html",
    ROOT / "workshop" / "glossary.md": "glossary.html",
}
NAV_STYLE = """
nav.course { display: flex; gap: 1.5rem; padding: 0.6rem 0; border-bottom: 1px solid #ccc;
             margin-bottom: 1rem; font-family: system-ui, sans-serif; flex-wrap: wrap; }
"""
STYLE = (
    NAV_STYLE
    + """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 0 auto; padding: 0 1rem;
       line-height: 1.5; }
table { border-collapse: collapse; } th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; }
pre { background: #f6f8fa; padding: 0.6rem; overflow-x: auto; }
"""
)


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

    return re.sub(r'(href=")([^"]+)(")', replace, text)


def _nav(previous: tuple[str, str] | None, following: tuple[str, str] | None) -> str:
    items = ['<a href="index.html">Course index</a>']
    if previous:
        items.append(f'<a href="{previous[0]}">&larr; {html.escape(previous[1])}</a>')
    if following:
        items.append(f'<a href="{following[0]}">{html.escape(following[1])} &rarr;</a>')
    items.append('<a href="setup.html">Setup</a>')
    items.append('<a href="instructor-guide.html">Instructor guide</a>')
    items.append('<a href="glossary.html">Glossary</a>')
    return '<nav class="course">' + "".join(items) + "</nav>"


def _markdown_page(source: Path, page_title: str) -> str:
    body = mistune.html(source.read_text(encoding="utf-8"))
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(page_title)}"
        f"</title><style>{STYLE}</style></head><body>{_nav(None, None)}{body}</body></html>"
    )


def build(out: Path) -> list[Path]:
    """Write the site into ``out``; return the pages written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for source, page in PAGES.items():
        if not source.exists():
            raise FileNotFoundError(f"{source.relative_to(ROOT)} is missing")
        text = _markdown_page(source, source.stem.replace("-", " ").capitalize())
        (out / page).write_text(_rewrite_links(text, source), encoding="utf-8")
        written.append(out / page)
    exporter = HTMLExporter(template_name="lab")
    exporter.mathjax_url = ""  # offline: formulas stay as TeX
    paths = notebook_paths()
    titles = [title(read(p)) for p in paths]
    for index, path in enumerate(paths):
        nb = read(path)
        body, _ = exporter.from_notebook_node(nbformat.from_dict(nb))
        previous = (_page_name(paths[index - 1]), titles[index - 1]) if index else None
        following = (
            (_page_name(paths[index + 1]), titles[index + 1]) if index + 1 < len(paths) else None
        )
        nav = f"<style>{NAV_STYLE}</style>" + _nav(previous, following)
        opening = re.search(r"<body[^>]*>", body)
        body = body[: opening.end()] + nav + body[opening.end() :]
        target = out / _page_name(path)
        target.write_text(_rewrite_links(body, path), encoding="utf-8")
        written.append(target)
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
