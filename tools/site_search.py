"""The course site's search index: every section of every page (a notebook's prose and code, the
README, the guide, the setup page, the glossary's entries), indexed by lunr.js under Node.js
(tools/site_files/build_index.js), the same lunr.js and the same word splitting
(tools/site_files/course.js) that the pages search it with.

A section is what lies between two headings that have an id, so a result links straight to
it: ``page.html#id``. A glossary entry (a paragraph that starts with its term in bold) is a
section of its own. Outputs are not indexed, nor the folded solutions, nor the generated cells
(setup, launch links, the link to the next notebook).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from bs4 import BeautifulSoup, NavigableString, Tag

HEADINGS = ("h1", "h2", "h3", "h4")
BLOCKS = {"p", "li", "div", "pre", "table", "tr", "td", "th", "details", "summary", "br",
          "blockquote", "dt", "dd", "ul", "ol", *HEADINGS}  # fmt: skip
SKIPPED_CELL_TAGS = ("solution", "course-setup", "course-badges", "course-next")
FILES = Path(__file__).resolve().parent / "site_files"


def heading_text(heading: Tag) -> str:
    return " ".join(heading.get_text().replace("¶", " ").split())


class Sections:
    """Collects the sections of one page as its elements are visited in document order."""

    def __init__(self, page: str, page_title: str, lang: str):
        self.page, self.page_title, self.lang = page, page_title, lang
        self.found: list[dict] = []
        self.start(page_title, "")

    def start(self, title: str, anchor: str) -> None:
        self.found.append(
            {"page": self.page, "pageTitle": self.page_title, "lang": self.lang,
             "title": title, "anchor": anchor, "text": []}
        )  # fmt: skip

    def add(self, text: str) -> None:
        """Add text as it stands; a block element adds a space after its text (``visit``)."""
        self.found[-1]["text"].append(text)

    def visit(self, element) -> None:
        """Headings with an id start a section; everything else adds its text."""
        if isinstance(element, NavigableString):
            self.add(str(element))
            return
        if not isinstance(element, Tag) or element.name in ("script", "style", "nav"):
            return
        if element.name in HEADINGS and element.get("id"):
            self.start(heading_text(element), element["id"])
            return
        if element.name == "p" and element.get("id") and element.find("strong"):
            self.start(element.find("strong").get_text().strip(), element["id"])
        for child in element.children:
            self.visit(child)
        if element.name in BLOCKS:
            self.add(" ")

    def result(self) -> list[dict]:
        kept = []
        for section in self.found:
            text = " ".join("".join(section.pop("text")).split())
            if text or section["anchor"]:
                kept.append({**section, "text": text})
        return kept


def notebook_sections(
    page: str, page_title: str, soup: BeautifulSoup, lang: str = "en"
) -> list[dict]:
    """A notebook page as nbconvert's lab template writes it: cells in ``main``."""
    sections = Sections(page, page_title, lang)
    for cell in soup.select("main > .jp-Cell"):
        classes = set(cell.get("class", []))  # a markdown cell's tags are on an inner div
        for inner in cell.select("[class*='celltag_']"):
            classes |= set(inner.get("class", []))
        if any(f"celltag_{tag}" in classes for tag in SKIPPED_CELL_TAGS):
            continue
        if "jp-MarkdownCell" in classes:
            for rendered in cell.select(".jp-RenderedMarkdown"):
                sections.visit(rendered)
        else:
            for code in cell.select(".jp-InputArea-editor"):
                sections.add(code.get_text() + " ")
    return sections.result()


def markdown_sections(
    page: str, page_title: str, soup: BeautifulSoup, lang: str = "en"
) -> list[dict]:
    """A page written from markdown: headings and paragraphs in ``main``."""
    sections = Sections(page, page_title, lang)
    for element in soup.select_one("main").children:
        sections.visit(element)
    return sections.result()


def build_index(sections: list[dict], out: Path, lunr_js: Path) -> Path:
    """Write ``out`` (a script: the site opens from disk, where a page cannot fetch JSON):
    the serialized lunr index and, for the results, each section's page, anchor and text."""
    node = shutil.which("node")
    if node is None:
        raise RuntimeError(
            "building the site's search index needs Node.js (`node`; Debian: apt-get install "
            "nodejs): it runs lunr.js, the library the pages search with"
        )
    done = subprocess.run(
        [node, str(FILES / "build_index.js"), str(lunr_js), str(FILES / "course.js")],
        input=json.dumps(sections), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"lunr.js could not build the index: {done.stderr.strip()[-800:]}")
    payload = json.dumps({"index": json.loads(done.stdout), "sections": sections},
                         ensure_ascii=False)  # fmt: skip
    out.write_text(
        "// The course's search index, written by tools/build_site.py.\n"
        f"globalThis.courseSearchIndex = {payload};\n",
        encoding="utf-8",
    )
    return out
