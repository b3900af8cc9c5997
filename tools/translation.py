"""What the Simplified Chinese edition's two tools share: tools/translate_notebooks.py (the
notebooks) and tools/translate_documents.py (the README and the workshop pages).

Both keep one gettext PO catalog per English file, with one entry per piece of English text
(a notebook cell, a markdown block). An entry's ``msgctxt`` is ``"<key> <hash>"``: the
piece's stable key (a cell id, a block key) and the first 12 hex digits of the SHA-256 of its
English source; ``msgid`` is that source and ``msgstr`` its translation. ``merge`` brings a
catalog up to date with the English (a changed piece keeps its old translation, fuzzy, with
the English it translated); ``check_markdown`` and ``check_code`` hold a translation to its
English: the same inline code spans, fenced code blocks, formulas and link targets (as
multisets; code may translate its comments only), and the glossary's Chinese term wherever
the English uses one of its terms (``workshop/glossary.md``, ``## 简体中文术语``).
"""

from __future__ import annotations

import difflib
import hashlib
import io
import re
import tokenize
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import polib
from course import ROOT

LANGUAGE = "zh_CN"
HASH_DIGITS = 12
GLOSSARY = ROOT / "workshop" / "glossary.md"
GLOSSARY_HEADING = "## 简体中文术语"
NOTEBOOK_CATALOGS = ROOT / "notebooks" / "zh-CN" / "catalog"


def source_hash(source: str) -> str:
    """The first 12 hex digits of the SHA-256 of an English source."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:HASH_DIGITS]


def translated_notebooks(catalogs: Path = NOTEBOOK_CATALOGS) -> set[str]:
    """The English notebooks (file names) that have a catalog, so a Chinese edition."""
    return {f"{path.stem}.ipynb" for path in catalogs.glob("[0-9][0-9]_*.po")}


# ------------------------------------------------------------------ code
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


SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
SHELL_COMMENT = re.compile(r"(?:^|(?<=\s))#.*$")


def shell_without_comments(source: str) -> tuple[str, ...]:
    """A shell block's lines without their comments (a ``#`` at a line's start or after a
    space, as the shell reads it) and trailing blanks, blank lines left out."""
    lines = (SHELL_COMMENT.sub("", line).rstrip() for line in source.splitlines())
    return tuple(line for line in lines if line)


def fence_language(info: str) -> str:
    return info.strip().split(" ")[0].lower() if info.strip() else ""


def fence_has_comments(info: str, body: str) -> bool:
    """Whether a fenced block has comments a translation may translate (python, shell)."""
    language = fence_language(info)
    if language in ("python", "py", "python3"):
        return has_comments(body)
    if language in SHELL_LANGUAGES:
        return shell_without_comments(body) != tuple(
            line.rstrip() for line in body.splitlines() if line.strip()
        )
    return False


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
AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
EXTERNAL_LINK_TEXT = re.compile(r"\[([^\]\n]*)\]\((?:https?:|mailto:)[^)]*\)")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
HTML_TAG = re.compile(r"</?[A-Za-z][^>\n]*>")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
LINK_PATTERNS = (INLINE_LINK, REFERENCE_LINK, HTML_LINK, AUTOLINK)


@dataclass
class Markdown:
    """What a translation of markdown must keep, and its prose."""

    fences: Counter
    fence_text: dict
    code_spans: Counter
    formulas: Counter
    links: list[str]
    prose: str


def _fence_key(info: str, body: str) -> tuple:
    """A fenced block as it is compared: a python or shell block without its comments."""
    language = fence_language(info)
    if language in ("python", "py", "python3"):
        try:
            return (language, tuple((kind, text) for kind, text, _ in code_without_comments(body)))
        except SyntaxError:
            pass
    if language in SHELL_LANGUAGES:
        return (language, shell_without_comments(body))
    return (language, body)


def parse_markdown(source: str) -> Markdown:
    """The fenced blocks, code spans, formulas and link targets of markdown ``source``, each
    taken out before the next is looked for (a ``$`` in code is no formula), and what is left:
    its prose, without link targets, HTML comments and HTML tags."""
    fences, fence_text = Counter(), {}
    for match in FENCE.finditer(source):
        key = _fence_key(match.group(2), match.group(3))
        fences[key] += 1
        fence_text.setdefault(key, match.group(0).strip().splitlines()[0] + " ...")
    rest = HTML_COMMENT.sub(" ", FENCE.sub("\n", source))
    # a code span's line breaks and indentation are spaces to markdown: a translation may
    # break its lines elsewhere
    code_spans = Counter(re.sub(r"\s+", " ", m.group(2)) for m in CODE_SPAN.finditer(rest))
    rest = CODE_SPAN.sub(" \x00 ", rest)
    formulas = Counter(f"$${m.group(1)}$$" for m in DISPLAY_MATH.finditer(rest))
    rest = DISPLAY_MATH.sub(" \x00 ", rest)
    formulas += Counter(f"${m.group(1)}$" for m in INLINE_MATH.finditer(rest))
    rest = INLINE_MATH.sub(" \x00 ", rest)
    links = [m.group(1) for pattern in LINK_PATTERNS for m in pattern.finditer(rest)]
    rest = AUTOLINK.sub(" ", rest)
    prose = HTML_TAG.sub(" ", REFERENCE_LINK.sub(" ", INLINE_LINK.sub("]", rest)))
    return Markdown(fences, fence_text, code_spans, formulas, links, prose)


def has_prose(source: str) -> bool:
    """Whether markdown ``source`` has words to translate outside code, formulas and links."""
    return re.search(r"[A-Za-z]", parse_markdown(source).prose) is not None


def rewrite_links(source: str, rewrite: Callable[[str], str]) -> str:
    """``source`` with each link target replaced by ``rewrite(target)`` (code untouched)."""
    protected: list[str] = []

    def keep(match: re.Match) -> str:
        protected.append(match.group(0))
        return f"\x00{len(protected) - 1}\x00"

    text = CODE_SPAN.sub(keep, FENCE.sub(keep, source))

    def replace(match: re.Match) -> str:
        start, end = match.span(1)
        whole, offset = match.group(0), match.start(0)
        return whole[: start - offset] + rewrite(match.group(1)) + whole[end - offset :]

    for pattern in LINK_PATTERNS:
        text = pattern.sub(replace, text)
    for _ in range(2):  # a code span may hold a fence's placeholder
        text = re.sub(r"\x00(\d+)\x00", lambda m: protected[int(m.group(1))], text)
    return text


def github_slug(text: str) -> str:
    """A heading's anchor as GitHub makes it (as tools/build_site.py does): its text without
    markdown, lower case, without punctuation (Chinese characters are kept), spaces as ``-``."""
    text = re.sub(r"^#+\s*", "", text.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def unique_slugs(slugs: Iterable[str]) -> list[str]:
    """GitHub's anchors for headings in order: the second ``notes`` is ``notes-1``."""
    used: set[str] = set()
    found = []
    for slug in slugs:
        candidate, n = slug, 0
        while candidate in used:
            n += 1
            candidate = f"{slug}-{n}"
        used.add(candidate)
        found.append(candidate)
    return found


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


NOT_A_TERM = re.compile(r"^not a term: (.+)$", re.M)


def not_terms(entry: polib.POEntry) -> set[str]:
    """The glossary terms that an entry's English uses as plain words, not as the term: its
    translator comment's ``not a term: graph (the import graph), rank (a verb)`` lines."""
    found = set()
    for line in NOT_A_TERM.findall(entry.tcomment or ""):
        found |= {part.strip() for part in re.sub(r"\(.*?\)", "", line).split(",")}
    return found


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
def split_context(msgctxt: str | None) -> tuple[str, str] | None:
    """``(key, hash)`` of an entry's ``msgctxt``, or None when it is not ``"<key> <hash>"``."""
    parts = (msgctxt or "").split(" ")
    if len(parts) != 2 or not re.fullmatch(rf"[0-9a-f]{{{HASH_DIGITS}}}", parts[1]):
        return None
    return parts[0], parts[1]


def new_catalog(subject: str, project: str) -> polib.POFile:
    """An empty catalog of the translation of ``subject`` (a repository path)."""
    catalog = polib.POFile(wrapwidth=0)
    catalog.header = (
        f"Simplified Chinese translation of {subject}.\n"
        "Generated by tools/translate_notebooks.py extract; translate each msgstr, then run\n"
        "tools/translate_notebooks.py check and build (README, For contributors)."
    )
    catalog.metadata = {
        "Project-Id-Version": f"gradient-mechanics {project}",
        "Language": LANGUAGE,
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
    }
    return catalog


def load_catalog(path: Path) -> polib.POFile:
    return polib.pofile(str(path), wrapwidth=0)


def entries_by_key(catalog: polib.POFile) -> dict[str, polib.POEntry]:
    """The catalog's live entries by key (the first one of a key)."""
    found = {}
    for entry in catalog:
        key = split_context(entry.msgctxt)
        if key is not None and not entry.obsolete:
            found.setdefault(key[0], entry)
    return found


def merge(
    path: Path,
    pieces: Iterable[tuple[str, str, str]],
    subject: str,
    project: str,
    similar: float | None = None,
) -> dict[str, int]:
    """Create or update the catalog ``path`` for the English ``pieces``, each ``(key, source,
    note)``: an empty entry for a new piece, a changed piece's entry fuzzy with its old
    translation and the English it translated (``previous_msgid``), a piece whose English
    moved to another key keeps its translation, and a removed piece's translated entry is
    obsolete. Returns how many entries are ``new``, ``stale`` and ``unchanged``.

    ``similar`` None trusts the keys (a notebook cell's id): a changed piece gets its key's
    old translation. A number (for block keys, which move when a block is inserted above)
    takes the old translation of the changed English most like the new (a difflib ratio of
    at least ``similar``), its own key's first."""
    pieces = list(pieces)
    old = load_catalog(path) if path.exists() else new_catalog(subject, project)
    current = entries_by_key(old)
    by_source = {e.msgid: e for e in old if e.msgstr and "fuzzy" not in e.flags}
    sources = {source for _, source, _ in pieces}
    changed = [e for e in current.values() if e.msgstr and e.msgid not in sources]
    catalog = new_catalog(subject, project)
    catalog.header = old.header or catalog.header
    catalog.metadata = old.metadata or catalog.metadata
    counts = Counter(new=0, stale=0, unchanged=0)
    used = set()
    for key, source, note in pieces:
        entry = polib.POEntry(
            msgctxt=f"{key} {source_hash(source)}", msgid=source, msgstr="", comment=note
        )
        previous = current.get(key)
        if previous is not None and previous.msgctxt == entry.msgctxt:
            if previous.msgid == source:
                previous.comment = note
                if "fuzzy" not in previous.flags:  # done: the old English is no longer needed
                    previous.previous_msgid = previous.previous_msgctxt = None
                used.add(id(previous))
                catalog.append(previous)
                counts["unchanged"] += 1
                continue
        if similar is not None:
            previous = _most_like(source, changed, previous, similar)
        if previous is not None:
            used.add(id(previous))
        if source in by_source:  # the same English text under another key
            entry.msgstr, entry.tcomment = by_source[source].msgstr, by_source[source].tcomment
            counts["unchanged"] += 1
        elif previous is not None and previous.msgstr:
            entry.msgstr, entry.tcomment = previous.msgstr, previous.tcomment
            entry.flags = ["fuzzy"]
            fuzzy_before = "fuzzy" in previous.flags and previous.previous_msgid is not None
            entry.previous_msgid = previous.previous_msgid if fuzzy_before else previous.msgid
            entry.previous_msgctxt = previous.previous_msgctxt if fuzzy_before else previous.msgctxt
            counts["stale"] += 1
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


def _most_like(source: str, candidates: list, own, least: float):
    """The candidate entry whose English is most like ``source`` (``own`` first), or None."""
    ranked = sorted(candidates, key=lambda e: e is not own)
    best, best_ratio = None, least
    for entry in ranked:
        matcher = difflib.SequenceMatcher(None, entry.msgid, source, autojunk=False)
        if matcher.quick_ratio() >= best_ratio and matcher.ratio() >= best_ratio:
            best, best_ratio = entry, matcher.ratio() + (1e-9 if entry is own else 0)
    return best


def stale_or_untranslated(
    entry: polib.POEntry, source: str, digest: str, command: str, piece: str
) -> str | None:
    """What keeps ``entry`` (with hash ``digest``) from being used for the English ``piece``
    (``"cell"``, ``"block"``) ``source``: a message, or None when it is a current, finished
    translation. ``command`` is what brings the new English into the catalog."""
    if digest != source_hash(source) or entry.msgid != source:
        return (
            f"stale: the English {piece} changed since {digest}; run {command}, "
            "then update the translation and remove its fuzzy flag"
        )
    if "fuzzy" in entry.flags:
        return (
            f"fuzzy: the English {piece} changed (its old text is in the #| lines); "
            "update the translation, then remove the fuzzy flag"
        )
    if not entry.msgstr.strip():
        return "not translated yet"
    return None


# ------------------------------------------------------------------ checks
def _times(count: int) -> str:
    return f" ({count} times)" if count > 1 else ""


def multiset_problems(kind: str, english: Counter, chinese: Counter, shown=None) -> list[str]:
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


def check_markdown(
    english: str,
    chinese: str,
    terms: list[Term],
    normalize: Callable[[str], str] = lambda target: target,
    folder: str = "zh-CN",
    skipped: set[str] = frozenset(),
) -> list[str]:
    """What is wrong with ``chinese`` as the translation of markdown ``english``. Link
    targets are compared after ``normalize`` (what build makes of them); the glossary terms
    in ``skipped`` (``not_terms``) are not looked for."""
    en, zh = parse_markdown(english), parse_markdown(chinese)
    problems = multiset_problems("code span", en.code_spans, zh.code_spans)
    shown = {**zh.fence_text, **en.fence_text}
    problems += multiset_problems("fenced code block", en.fences, zh.fences, shown)
    problems += multiset_problems("formula", en.formulas, zh.formulas)
    en_links = Counter(normalize(t) for t in en.links)
    zh_links = Counter(normalize(t) for t in zh.links)
    link_problems = multiset_problems("link target", en_links, zh_links)
    if link_problems:
        link_problems[-1] += f" (keep the English targets: build rewrites them for {folder})"
    problems += link_problems
    if chinese.strip() == english.strip() and re.search(r"[A-Za-z]{3,}", en.prose):
        problems.append("is the English text: not translated")
        return problems
    for term in terms_used(en.prose, terms):
        if term.english in skipped:
            continue
        if not any(form.lower() in zh.prose.lower() for form in term.chinese):
            problems.append(
                f"the English says {term.english!r}: use the glossary's term "
                f"{' or '.join(term.chinese)} (workshop/glossary.md, {GLOSSARY_HEADING[3:]}), "
                f"or, where the English does not mean the term, add the translator comment "
                f"'# not a term: {term.english} (why)'"
            )
    return problems


def check_code(english: str, chinese: str) -> list[str]:
    """What is wrong with ``chinese`` as Python ``english`` with translated comments."""
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
