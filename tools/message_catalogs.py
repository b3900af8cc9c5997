"""The catalogs of the messages the helpers and the loop auditor show at run time (gettext PO,
compiled to the MO the standard library reads), one per gettext domain:

- ``helpers``: every ``_("...")`` and ``N_("...")`` in ``helpers/``, catalog
  ``helpers/locale/zh_CN/LC_MESSAGES/helpers.po``;
- ``loop_auditor``: the same in ``loop_auditor/src/loop_auditor/``, catalog
  ``loop_auditor/src/loop_auditor/locale/zh_CN/LC_MESSAGES/loop_auditor.po``.

    python tools/message_catalogs.py extract   # bring the sources' messages into the PO files
    python tools/message_catalogs.py check     # list what is wrong; exit 1 if anything is
    python tools/message_catalogs.py compile   # write each PO's MO (committed with it)

``extract`` finds the messages with ``ast``: the argument of ``_`` or ``N_`` must be one string
literal (a message with values is ``_("... {name} ...").format(name=...)``); anything else is
an error reported with its file and line. A new message is added with an empty translation, a
message no longer in the sources is dropped, and a changed message keeps the translation of
the message it most resembles, marked fuzzy, with the old English in ``#|`` lines. After
editing the PO (fill each empty ``msgstr``, update each fuzzy one and delete its ``#, fuzzy``),
run ``compile``.

``check`` fails on: a message of the sources missing from the PO, or a PO entry no longer in
them (run ``extract``); an empty or fuzzy translation; an MO that differs from its PO (run
``compile``); and a translation whose ``{placeholders}``, backtick code spans or numbers
differ from the English.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import polib

ROOT = Path(__file__).resolve().parent.parent
LANGUAGE = "zh_CN"
MARKERS = ("_", "N_")  # the functions whose literal argument is a message


@dataclass(frozen=True)
class Domain:
    """A gettext domain: its name, the package folder whose sources it extracts from, and
    the folder of its catalogs (``locale``)."""

    name: str
    package: Path

    @property
    def locale(self) -> Path:
        return self.package / "locale"

    def po_path(self, language: str = LANGUAGE) -> Path:
        return self.locale / language / "LC_MESSAGES" / f"{self.name}.po"

    def mo_path(self, language: str = LANGUAGE) -> Path:
        return self.po_path(language).with_suffix(".mo")


DOMAINS = (
    Domain("helpers", ROOT / "helpers"),
    Domain("loop_auditor", ROOT / "loop_auditor" / "src" / "loop_auditor"),
)


@dataclass(frozen=True)
class Message:
    msgid: str
    where: str  # file:line of its first occurrence


def _relative(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def messages_in(source: str, filename: str) -> tuple[list[Message], list[str]]:
    """The messages marked in ``source`` (in order) and the errors: a call of ``_`` or ``N_``
    whose argument is not one string literal."""
    found, errors = [], []
    for node in ast.walk(ast.parse(source, filename)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in MARKERS
        ):
            continue
        where = f"{filename}:{node.lineno}"
        [argument] = node.args if len(node.args) == 1 and not node.keywords else [None]
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            if argument.value.strip():
                found.append(Message(argument.value, where))
            else:
                errors.append(f"{where}: {node.func.id}() of an empty string")
        elif isinstance(argument, ast.JoinedStr):
            errors.append(
                f"{where}: {node.func.id}() of an f-string: the catalog cannot hold its "
                f'values; write {node.func.id}("... {{name}} ...").format(name=...)'
            )
        else:
            errors.append(
                f"{where}: {node.func.id}() takes one string literal, so that its message "
                "can be extracted; translate a marked constant with translate()"
            )
    found.sort(key=lambda m: int(m.where.rsplit(":", 1)[1]))
    return found, errors


def extract(domain: Domain) -> tuple[list[Message], list[str]]:
    """Every message of ``domain``'s sources, first occurrence first (files in order), and
    the errors."""
    messages, errors, seen = [], [], set()
    for path in sorted(domain.package.rglob("*.py")):
        found, wrong = messages_in(path.read_text(encoding="utf-8"), _relative(path))
        errors += wrong
        for message in found:
            if message.msgid not in seen:
                seen.add(message.msgid)
                messages.append(message)
    return messages, errors


def new_catalog(domain: Domain, language: str = LANGUAGE) -> polib.POFile:
    po = polib.POFile(wrapwidth=0)
    po.header = (
        f"The {domain.name} messages in {language}, written by tools/message_catalogs.py extract.\n"
        "Fill each empty msgstr, update each fuzzy one (then delete its fuzzy flag), keep the\n"
        "English {placeholders}, `code spans` and numbers, and write each term as\n"
        "workshop/glossary.md's table does; then: python tools/message_catalogs.py compile"
    )
    po.metadata = {
        "Project-Id-Version": f"gradient-mechanics {domain.name}",
        "Language": language,
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
        "Plural-Forms": "nplurals=1; plural=0;",
    }
    return po


def updated(po: polib.POFile, messages: Iterable[Message], domain: Domain) -> polib.POFile:
    """A catalog with exactly ``messages``, in their order: each keeps its translation; a new
    one takes, fuzzy, the translation of the dropped message it most resembles, else none."""
    messages = list(messages)
    old = {entry.msgid: entry for entry in po if not entry.obsolete}
    wanted = {m.msgid for m in messages}
    dropped = [entry for msgid, entry in old.items() if msgid not in wanted and entry.msgstr]
    out = new_catalog(domain, po.metadata.get("Language", LANGUAGE))
    for message in messages:
        files = [(message.where.rsplit(":", 1)[0], "")]
        entry = old.get(message.msgid)
        if entry is not None:
            new = polib.POEntry(
                msgid=entry.msgid, msgstr=entry.msgstr, flags=list(entry.flags), occurrences=files
            )
            new.previous_msgid = entry.previous_msgid
            out.append(new)
            continue
        new = polib.POEntry(msgid=message.msgid, msgstr="", occurrences=files)
        scored = [
            (difflib.SequenceMatcher(None, e.msgid, message.msgid).ratio(), i)
            for i, e in enumerate(dropped)
        ]
        if scored and max(scored)[0] >= 0.6:
            closest = dropped.pop(max(scored)[1])
            new.msgstr, new.previous_msgid = closest.msgstr, closest.msgid
            new.flags = ["fuzzy"]
        out.append(new)
    return out


def _read(path: Path, domain: Domain) -> polib.POFile:
    if path.exists():
        return polib.pofile(str(path), wrapwidth=0)
    return new_catalog(domain)


def run_extract(domains: Iterable[Domain] = DOMAINS) -> list[str]:
    """Update each domain's PO from its sources; the errors (which leave the PO as it was)."""
    problems = []
    for domain in domains:
        messages, errors = extract(domain)
        if errors:
            problems += errors
            continue
        path = domain.po_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        updated(_read(path, domain), messages, domain).save(str(path))
    return problems


def run_compile(domains: Iterable[Domain] = DOMAINS) -> None:
    for domain in domains:
        polib.pofile(str(domain.po_path()), wrapwidth=0).save_as_mofile(str(domain.mo_path()))


# What a translation keeps exactly as the English has it.
PLACEHOLDER = re.compile(r"\{[A-Za-z_]\w*(?:![rsa])?(?::[^{}]*)?\}")
CODE_SPAN = re.compile(r"`[^`]+`")
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?(?![\w])")
# "2.0 x 30", "(1/30 x 1/2)" or "{k} x 3": the English's plain x between numbers (or placeholders),
# written as × in Chinese.
TIMES_AS_X = re.compile(r"[\d)}] x [\d({]")


def kept(text: str) -> dict[str, list[str]]:
    """The placeholders, code spans and numbers of a message (numbers outside placeholders)."""
    placeholders = PLACEHOLDER.findall(text)
    bare = PLACEHOLDER.sub(" ", text)
    return {
        "placeholders": sorted(set(placeholders)),
        "code spans": sorted(set(CODE_SPAN.findall(text))),
        "numbers": sorted(set(NUMBER.findall(bare))),
    }


def differences(msgid: str, msgstr: str) -> list[str]:
    """What the translation ``msgstr`` changes of what it must keep from ``msgid``."""
    english, translated = kept(msgid), kept(msgstr)
    found = []
    for kind, values in english.items():
        if values != translated[kind]:
            lost = sorted(set(values) - set(translated[kind]))
            added = sorted(set(translated[kind]) - set(values))
            found.append(
                f"its {kind} differ from the English"
                + (f", missing {', '.join(lost)}" if lost else "")
                + (f", added {', '.join(added)}" if added else "")
            )
    times = TIMES_AS_X.findall(CODE_SPAN.sub(" ", msgstr))
    if times:
        found.append(f"it multiplies with x ({', '.join(times)}): write × in the translation")
    return found


def check(domains: Iterable[Domain] = DOMAINS) -> list[str]:
    """Everything wrong with the catalogs, one line each (empty when all is well)."""
    problems = []
    for domain in domains:
        messages, errors = extract(domain)
        problems += errors
        po_path, mo_path = domain.po_path(), domain.mo_path()
        if not po_path.exists():
            problems.append(f"{_relative(po_path)}: no catalog; run extract, then translate")
            continue
        po = polib.pofile(str(po_path), wrapwidth=0)
        entries = {entry.msgid: entry for entry in po if not entry.obsolete}
        where = _relative(po_path)
        for message in messages:
            if message.msgid not in entries:
                problems.append(f"{message.where}: not in {where} (run extract): {message.msgid!r}")
        wanted = {m.msgid for m in messages}
        for msgid, entry in entries.items():
            line = f"{where}:{entry.linenum}"
            if msgid not in wanted:
                problems.append(f"{line}: no longer in the sources (run extract): {msgid!r}")
            elif entry.fuzzy:
                problems.append(f"{line}: fuzzy, its English changed: {msgid!r}")
            elif not entry.msgstr.strip():
                problems.append(f"{line}: not translated: {msgid!r}")
            else:
                problems += [
                    f"{line}: {difference}: {msgid!r}"
                    for difference in differences(msgid, entry.msgstr)
                ]
        compiled = {e.msgid: e.msgstr for e in po.translated_entries()}
        if not mo_path.exists():
            problems.append(f"{_relative(mo_path)}: missing (run compile)")
        else:
            mo = {e.msgid: e.msgstr for e in polib.mofile(str(mo_path)) if e.msgid}
            if mo != compiled:
                problems.append(
                    f"{_relative(mo_path)}: stale, it differs from its PO (run compile)"
                )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["extract", "check", "compile"])
    parser.add_argument("--domain", choices=[d.name for d in DOMAINS], help="only this one")
    args = parser.parse_args(argv)
    domains = [d for d in DOMAINS if args.domain in (None, d.name)]
    if args.command == "extract":
        problems = run_extract(domains)
    elif args.command == "compile":
        run_compile(domains)
        problems = []
    else:
        problems = check(domains)
    for problem in problems:
        print(problem)
    if args.command == "check" and not problems:
        for domain in domains:
            po = polib.pofile(str(domain.po_path()), wrapwidth=0)
            print(f"{domain.name}: {len(po.translated_entries())} messages, all translated")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
