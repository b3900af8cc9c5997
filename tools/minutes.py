"""How long a learner needs for each notebook's main path, computed from a stated reading model.

    python tools/minutes.py            # print the minutes, section by section
    python tools/minutes.py --write    # write them into the overview cells and the README
    python tools/minutes.py --check    # exit 1 if a stated minute differs from the computed one

The reading model (the README states it too):

- prose at 120 words a minute (technical text with formulas, read to learn), a term (a code
  span, a formula or a glossary link) read as 3 words, and the words of a markdown table at
  half that speed;
- code at 6 non-blank lines a minute (a learner reads a cell before running it), a dense
  line of more than 26 tokens (names, numbers, operators; twice the course's median line)
  counted as tokens / 26 lines;
- printed output at 30 lines a minute, a printed table's rows at half that speed, and a
  figure as 15 lines (half a minute);
- each exercise by the minutes its prompt states for its difficulty, "(2 min)" in the
  markdown cell just before it (every exercise states them), plus a fifth of them for
  retries: one answer in two is wrong the first time, and the retry, guided by the hint that
  names the mistake, takes 0.4 of the stated minutes.

The main path is every cell outside the "Going deeper (optional)" sections, less the setup cell
and the folded solutions. Its teaching minutes are the reading minutes of its cells other than
the exercises; its exercise minutes are its exercises'. A notebook's main path may take at most
``NOTEBOOK_LIMIT`` minutes, and the whole course's ``COURSE_LIMIT``.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from course import ROOT, notebook_paths, read, title, write

WORDS_PER_MINUTE = 120
TABLE_WORDS_PER_MINUTE = 60  # a markdown table is read cell by cell
TERM_WORDS = 3  # a code span, a formula or a glossary link takes as long as 3 words
CODE_LINES_PER_MINUTE = 6
DENSE_LINE_TOKENS = 26  # twice the median line; a denser one reads as tokens / 26 lines
OUTPUT_LINES_PER_MINUTE = 30
TABLE_OUTPUT_LINES_PER_MINUTE = 15  # a printed table's rows
FIGURE_LINES = 15  # a figure takes as long as 15 lines of output: half a minute
WRONG_FIRST_TIME = 0.5  # one checked answer in two is wrong the first time
RETRY_SHARE = 0.4  # and its retry, guided by the hint, takes 0.4 of its stated minutes
RETRY_ALLOWANCE = WRONG_FIRST_TIME * RETRY_SHARE  # so each exercise costs 1.2 its minutes
TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d*)?(?:e-?\d+)?|\S")
TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
TERM = re.compile(r"`[^`\n]+`|\$[^$\n]+\$|\[[^\]]+\]\([^)]*glossary[^)]*\)")
PRINTED_TABLE_ROW = re.compile(r"\|.*\||\S(?: {2,}|\t)\S+(?: {2,}|\t)\S")  # 3 columns or more
STATED_MINUTES = re.compile(r"\((\d+) min\)")
NOTEBOOK_LIMIT = 60
COURSE_LIMIT = 7 * 60

README = ROOT / "README.md"
HEADING = re.compile(r"^(#{2,3}) (.*)")
MINUTES_LINE = re.compile(
    r"\*\*Minutes:\*\* (\d+) teaching / (\d+) exercises(?: / (\d+) going deeper)?"
)
SKIPPED_TAGS = ("course-setup", "solution")  # not on the path: run once, or folded
KINDS = ("predict", "trace", "parsons", "write", "repair", "review")


class MinutesError(ValueError):
    """A notebook the model cannot measure, or one over its limit."""


def going_deeper_sections(nb) -> list[range]:
    """The cell ranges of each section whose heading says "Going deeper": from its heading to
    the next heading of the same or a higher level (or the key points, which close a
    notebook)."""
    headings = []
    for index, cell in enumerate(nb.cells):
        match = HEADING.match(cell.source) if cell.cell_type == "markdown" else None
        if match:
            headings.append((index, len(match.group(1)), match.group(2)))
    sections = []
    for position, (index, level, text) in enumerate(headings):
        if "going deeper" in text.lower():
            end = next(
                (i for i, lvl, _ in headings[position + 1 :] if lvl <= level), len(nb.cells) - 2
            )
            sections.append(range(index, end))
    return sections


def prose_words(markdown: str) -> int:
    """Words a learner reads: link targets, HTML comments and tags are not read."""
    text = re.sub(r"<!--.*?-->", " ", markdown, flags=re.DOTALL)
    text = re.sub(r"\]\([^)]*\)", "]", text)  # [text](url): read the text only
    text = re.sub(r"<[^>]+>", " ", text)
    return len(re.findall(r"[\w$`\\]+", text))


def markdown_minutes(markdown: str) -> float:
    """Prose at WORDS_PER_MINUTE, each term (:data:`TERM`) as TERM_WORDS words, and a table's
    rows at TABLE_WORDS_PER_MINUTE."""
    lines = markdown.splitlines()
    table = "\n".join(line for line in lines if TABLE_ROW.match(line))
    prose = "\n".join(line for line in lines if not TABLE_ROW.match(line))
    terms = len(TERM.findall(markdown)) * (TERM_WORDS - 1)  # each is already one word or more
    return (prose_words(prose) + terms) / WORDS_PER_MINUTE + (
        prose_words(table) / TABLE_WORDS_PER_MINUTE
    )


def code_lines(source: str) -> float:
    """Non-blank lines, a dense one (more than DENSE_LINE_TOKENS tokens) as tokens / that."""
    return sum(
        max(1.0, len(TOKEN.findall(line)) / DENSE_LINE_TOKENS)
        for line in source.splitlines()
        if line.strip()
    )


def text_lines(text: str) -> float:
    """Printed lines, a table's row counted as two (it is read at half the speed)."""
    ratio = OUTPUT_LINES_PER_MINUTE / TABLE_OUTPUT_LINES_PER_MINUTE
    return sum(
        ratio if PRINTED_TABLE_ROW.search(line) else 1.0 for line in text.rstrip("\n").splitlines()
    )


def output_lines(outputs) -> float:
    """Lines of printed output, a table's row as two lines, a figure as FIGURE_LINES."""
    lines = 0.0
    for output in outputs:
        if output.get("output_type") == "stream":
            lines += text_lines(output.get("text", ""))
        elif output.get("output_type") == "error":
            lines += 1 + len(str(output.get("evalue", "")).splitlines())  # the last line
        else:
            data = output.get("data", {})
            if "image/png" in data or "image/svg+xml" in data:
                lines += FIGURE_LINES
            elif "text/plain" in data:
                lines += text_lines("".join(data["text/plain"]))
    return lines


def exercise_kind(nb, index: int, path: Path) -> str:
    """An exercise cell's kind from its tag, "capstone" where its heading says so."""
    tags = nb.cells[index].metadata.get("tags", [])
    kinds = [t.removeprefix("exercise-") for t in tags if t.removeprefix("exercise-") in KINDS]
    if len(kinds) != 1:
        raise MinutesError(
            f"{path.name}, cell {index}: an exercise cell needs exactly one kind tag "
            f"({', '.join('exercise-' + kind for kind in KINDS)}), it has {tags}"
        )
    heading = next(
        (
            nb.cells[i].source.splitlines()[0]
            for i in range(index, -1, -1)
            if nb.cells[i].cell_type == "markdown" and nb.cells[i].source.startswith("#")
        ),
        "",
    )
    return "capstone" if "capstone" in heading.lower() else kinds[0]


def exercise_minutes(nb, index: int, path: Path) -> int:
    """The minutes the exercise's prompt states for its difficulty, "(2 min)" in the markdown
    cell just before it. Raises MinutesError for a prompt that states none, or two."""
    prompt = nb.cells[index - 1] if index else None
    stated = (
        STATED_MINUTES.findall(prompt.source)
        if prompt is not None and prompt.cell_type == "markdown"
        else []
    )
    if len(stated) != 1:
        raise MinutesError(
            f"{path.name}, cell {index - 1}: an exercise's prompt (the markdown cell just "
            f"before it) states its minutes once, by its difficulty, such as '(3 min)'; it "
            f"has {len(stated)}"
        )
    return int(stated[0])


def exercise_cost(nb, index: int, path: Path) -> float:
    """An exercise's stated minutes with the retry allowance (RETRY_ALLOWANCE)."""
    return exercise_minutes(nb, index, path) * (1 + RETRY_ALLOWANCE)


@dataclass
class Section:
    heading: str
    first_cell: int
    teaching: float = 0.0  # reading minutes
    exercises: float = 0.0  # stated minutes with the retry allowance
    going_deeper: bool = False

    @property
    def minutes(self) -> float:
        return self.teaching + self.exercises


@dataclass
class NotebookMinutes:
    path: Path
    title: str
    sections: list[Section] = field(default_factory=list)

    @property
    def main_path(self) -> list[Section]:
        return [s for s in self.sections if not s.going_deeper]

    @property
    def teaching(self) -> int:
        return math.ceil(sum(s.teaching for s in self.main_path))

    @property
    def exercises(self) -> int:
        return math.ceil(sum(s.exercises for s in self.main_path))

    @property
    def going_deeper(self) -> int:
        return math.ceil(sum(s.minutes for s in self.sections if s.going_deeper))

    @property
    def total(self) -> int:
        return self.teaching + self.exercises

    @property
    def stated(self) -> str:
        text = f"**Minutes:** {self.teaching} teaching / {self.exercises} exercises"
        return text + (f" / {self.going_deeper} going deeper" if self.going_deeper else "")


def overview_index(nb, path: Path) -> int:
    found = [i for i, c in enumerate(nb.cells) if "course-overview" in c.metadata.get("tags", [])]
    if len(found) != 1:
        raise MinutesError(
            f"{path.name}: a notebook needs one overview cell (tag course-overview) stating its "
            f"questions, objectives and minutes; it has {len(found)}"
        )
    if not MINUTES_LINE.search(nb.cells[found[0]].source):
        raise MinutesError(
            f"{path.name}, cell {found[0]}: the overview cell needs a line "
            "'**Minutes:** T teaching / E exercises' for the tool to fill in"
        )
    return found[0]


def measure(path: Path, nb=None, limit: int = NOTEBOOK_LIMIT) -> NotebookMinutes:
    """Each section's minutes by the reading model. Raises MinutesError for a notebook without
    an overview cell, an exercise without a kind, or a main path over ``limit`` minutes."""
    nb = read(path) if nb is None else nb
    overview_index(nb, path)
    deeper = {i for section in going_deeper_sections(nb) for i in section}
    result = NotebookMinutes(path, title(nb))
    section = Section("(before the first section)", 0)
    result.sections.append(section)
    running = 0.0
    for index, cell in enumerate(nb.cells):
        match = HEADING.match(cell.source) if cell.cell_type == "markdown" else None
        is_deeper = index in deeper
        if match and (len(match.group(1)) == 2 or is_deeper != section.going_deeper):
            section = Section(match.group(2), index, going_deeper=is_deeper)
            result.sections.append(section)
        tags = cell.metadata.get("tags", [])
        if any(tag in tags for tag in SKIPPED_TAGS):
            continue
        if "exercise" in tags:
            exercise_kind(nb, index, path)  # a clear error for a cell without one kind
            minutes = exercise_cost(nb, index, path)
            if index in deeper:
                section.teaching += minutes
            else:
                section.exercises += minutes
        elif cell.cell_type == "markdown":
            # the minutes line is not counted: writing it must not change what it states
            minutes = markdown_minutes(MINUTES_LINE.sub("", cell.source))
            section.teaching += minutes
        else:
            minutes = code_lines(cell.source) / CODE_LINES_PER_MINUTE
            minutes += output_lines(cell.get("outputs", [])) / OUTPUT_LINES_PER_MINUTE
            section.teaching += minutes
        if index not in deeper:
            running += minutes
            if running > limit:
                raise MinutesError(
                    f"{path.name}, cell {index}: the main path passes its limit of {limit} "
                    f"minutes here ({running:.0f} by the reading model); move what is not on "
                    "the learner's path into a 'Going deeper (optional)' section"
                )
    result.sections = [s for s in result.sections if s.minutes or s.first_cell]
    return result


def measure_course(
    paths: list[Path] | None = None, limit: int = NOTEBOOK_LIMIT, course_limit: int = COURSE_LIMIT
) -> list[NotebookMinutes]:
    notebooks = [measure(path, limit=limit) for path in (paths or notebook_paths())]
    total = sum(nb.total for nb in notebooks)
    if total > course_limit:
        raise MinutesError(
            f"the course's main path takes {total} minutes, more than {course_limit}"
        )
    return notebooks


# ------------------------------------------------------------------ writing them down
def readme_row_minutes(nb: NotebookMinutes) -> str:
    return f"{nb.teaching} / {nb.exercises}"


def rewrite_readme(text: str, notebooks: list[NotebookMinutes]) -> str:
    """The README's notebook table with each row's minutes and going-deeper minutes."""
    for nb in notebooks:
        pattern = re.compile(
            rf"^(\| \d+ \| \[[^\]]+\]\(notebooks/{re.escape(nb.path.name)}\) \| )"
            r"[^|]*\| [^|]*\|",
            re.MULTILINE,
        )
        if not pattern.search(text):
            raise MinutesError(f"README.md has no table row for {nb.path.name}")
        deeper = str(nb.going_deeper) if nb.going_deeper else ""
        text = pattern.sub(
            lambda m, nb=nb, deeper=deeper: f"{m.group(1)}{readme_row_minutes(nb)} | {deeper} |",
            text,
        )
    total = sum(nb.total for nb in notebooks)
    return re.sub(
        r"The main path takes \d+ minutes \([\d.]+ hours\)",
        f"The main path takes {total} minutes ({total / 60:.1f} hours)",
        text,
    )


def write_all(notebooks: list[NotebookMinutes]) -> list[Path]:
    changed = []
    for minutes in notebooks:
        nb = read(minutes.path)
        index = overview_index(nb, minutes.path)
        source = MINUTES_LINE.sub(minutes.stated, nb.cells[index].source)
        if source != nb.cells[index].source:
            nb.cells[index].source = source
            write(nb, minutes.path)
            changed.append(minutes.path)
    readme = README.read_text(encoding="utf-8")
    new = rewrite_readme(readme, notebooks)
    if new != readme:
        README.write_text(new, encoding="utf-8")
        changed.append(README)
    return changed


def drift(notebooks: list[NotebookMinutes]) -> list[str]:
    """Each place where a stated minute differs from the computed one."""
    problems = []
    for minutes in notebooks:
        nb = read(minutes.path)
        stated = MINUTES_LINE.search(nb.cells[overview_index(nb, minutes.path)].source).group(0)
        if stated != minutes.stated:
            problems.append(
                f"{minutes.path.name} states {stated!r}, the model gives {minutes.stated!r}"
            )
    readme = README.read_text(encoding="utf-8")
    if rewrite_readme(readme, notebooks) != readme:
        problems.append("README.md's notebook table or main-path total differs from the model")
    return problems


def report(notebooks: list[NotebookMinutes]) -> str:
    lines = []
    for nb in notebooks:
        lines.append(f"{nb.path.name}: {nb.total} min ({nb.stated.removeprefix('**Minutes:** ')})")
        for s in nb.sections:
            mark = "  (going deeper)" if s.going_deeper else ""
            lines.append(f"  [{s.first_cell:3}] {s.minutes:5.1f}  {s.heading}{mark}")
    total = sum(nb.total for nb in notebooks)
    lines.append(f"course main path: {total} min ({total / 60:.1f} h)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="write the stated minutes")
    parser.add_argument("--check", action="store_true", help="exit 1 on a stale minute")
    parser.add_argument("--no-limit", action="store_true", help="report without the limits")
    args = parser.parse_args(argv)
    try:
        if args.no_limit:
            notebooks = measure_course(limit=10**6, course_limit=10**6)
        else:
            notebooks = measure_course()
    except MinutesError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.check:
        problems = drift(notebooks)
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    if args.write:
        for path in write_all(notebooks):
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    print(report(notebooks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
