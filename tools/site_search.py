"""The course site's search index: every section of every page (a notebook's prose and code, the
guide, the setup page, the glossary's entries), indexed with lunr.py, which writes the index
lunr.js loads in the browser (the two are the same library, in Python and in JavaScript).

A section is what lies between two headings that have an id, so a result links straight to
it: ``page.html#id``. A glossary entry (a paragraph that starts with its term in bold) is a
section of its own. Outputs are not indexed, nor the folded solutions, nor the generated cells
(setup, launch links, the link to the next notebook).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bs4 import BeautifulSoup, NavigableString, Tag
from lunr import lunr

HEADINGS = ("h1", "h2", "h3", "h4")
BLOCKS = {"p", "li", "div", "pre", "table", "tr", "td", "th", "details", "summary", "br",
          "blockquote", "dt", "dd", "ul", "ol", *HEADINGS}  # fmt: skip
SKIPPED_CELL_TAGS = ("solution", "course-setup", "course-badges", "course-next")
WORD_SPLIT = re.compile(r"[^\w]+")  # search.js splits a query the same way


def searchable_text(text: str) -> str:
    """Words only, the way the browser splits a query: ``set_to_none=True`` becomes
    ``set_to_none true``, and an identifier is also indexed by its parts (``zero grad``)."""
    words = [w for w in WORD_SPLIT.split(text) if w]
    parts = [p for w in words if "_" in w.strip("_") for p in w.split("_") if p]
    return " ".join(words + parts)


def heading_text(heading: Tag) -> str:
    return " ".join(heading.get_text().replace("¶", " ").split())


class Sections:
    """Collects the sections of one page as its elements are visited in document order."""

    def __init__(self, page: str, page_title: str):
        self.page, self.page_title = page, page_title
        self.found: list[dict] = []
        self.start(page_title, "")

    def start(self, title: str, anchor: str) -> None:
        self.found.append(
            {"page": self.page, "pageTitle": self.page_title, "title": title,
             "anchor": anchor, "text": []}
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


def notebook_sections(page: str, page_title: str, soup: BeautifulSoup) -> list[dict]:
    """A notebook page as nbconvert's lab template writes it: cells in ``main``."""
    sections = Sections(page, page_title)
    for cell in soup.select("main > .jp-Cell"):
        classes = cell.get("class", [])
        if any(f"celltag_{tag}" in classes for tag in SKIPPED_CELL_TAGS):
            continue
        if "jp-MarkdownCell" in classes:
            for rendered in cell.select(".jp-RenderedMarkdown"):
                sections.visit(rendered)
        else:
            for code in cell.select(".jp-InputArea-editor"):
                sections.add(code.get_text() + " ")
    return sections.result()


def markdown_sections(page: str, page_title: str, soup: BeautifulSoup) -> list[dict]:
    """A page written from markdown: headings and paragraphs in ``main``."""
    sections = Sections(page, page_title)
    for element in soup.select_one("main").children:
        sections.visit(element)
    return sections.result()


def build_index(sections: list[dict], out: Path) -> Path:
    """Write ``out`` (a script: the site opens from disk, where a page cannot fetch JSON):
    the serialized lunr index and, for the results, each section's page, anchor and text."""
    documents = [
        {"id": str(i), "title": searchable_text(s["title"]), "body": searchable_text(s["text"])}
        for i, s in enumerate(sections)
    ]
    index = lunr(
        ref="id",
        fields=[{"field_name": "title", "boost": 10}, {"field_name": "body"}],
        documents=documents,
    )
    payload = {"index": index.serialize(), "sections": sections}
    out.write_text(
        "// The course's search index, written by tools/build_site.py.\n"
        f"window.courseSearchIndex = {json.dumps(payload, ensure_ascii=False)};\n",
        encoding="utf-8",
    )
    return out
