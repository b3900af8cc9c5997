"""Write the instructor guide, workshop/instructor-guide.md, from what the notebooks declare
(titles, objectives, key points), their minutes by the reading model (tools/minutes.py) and
the hand-written notes in workshop/notes/.

    python tools/build_workshop.py          # rewrite the guide
    python tools/build_workshop.py --check  # exit 1 if the committed guide has drifted

The workshop is the sections named in ``LIVE``: each section's minutes come from the reading
model, so the schedule and the notebooks cannot disagree, and ``schedule`` refuses a plan that
does not fit. Every other section of the main path is named as reading after the workshop.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import minutes as reading
from course import ROOT, cells_tagged, notebook_paths, read, title

GUIDE = ROOT / "workshop" / "instructor-guide.md"
NOTES = ROOT / "workshop" / "notes"
NOTE_HEADINGS = (
    "### Questions learners ask",
    "### Live-coding tips",
    "### Where learners get stuck",
)

WORKSHOP_MINUTES = 180
PRE_WORK = "00"  # learners run the setup check before the workshop
OPENING, CLOSING, BREAK = 10, 10, 10
# A notebook's opening lines, its sources and its key points: read with whatever is read.
FRAMING = ("(before the first section)", "Sources", "Key points")
# The sections taught live, in blocks with a break between two blocks: each section by its
# notebook's number and the start of its heading. The rest of the main path is reading after
# the workshop.
LIVE = (
    (  # why .grad adds up, and what forgetting zero_grad does
        ("01", "1."),
        ("01", "2."),
        ("01", "4."),
        ("01", "5."),
        ("01", "Exercise 01.1"),
        ("01", "Exercise 01.2"),
    ),
    (  # what zero_grad does, and accumulation on purpose
        ("02", "2."),
        ("02", "4."),
        ("02", "Exercise 02.1"),
        ("03", "1."),
        ("03", "2."),
        ("03", "Exercise 03.1"),
        ("03", "3."),
        ("03", "Exercise 03.2"),
    ),
    (  # the classic bugs, and the auditor that finds them
        ("05", "1."),
        ("05", "2."),
        ("05", "3."),
        ("05", "5."),
        ("05", "6."),
        ("06", "1."),
        ("06", "2."),
        ("06", "Exercise 06.1"),
        ("06", "3."),
        ("06", "Exercise 06.2"),
    ),
)


@dataclass
class Notebook:
    number: str
    name: str  # file name
    title: str
    teaching: int
    exercises: int
    objectives: list[str]
    key_points: list[str]
    going_deeper: int = 0  # optional sections: not taught in the workshop, not in `minutes`
    sections: tuple[reading.Section, ...] = ()  # the main path's, by the reading model

    @property
    def minutes(self) -> int:
        return self.teaching + self.exercises


def _bullets(text: str) -> list[str]:
    """Markdown bullets, each joined onto one line."""
    items: list[str] = []
    for line in text.splitlines():
        if line.startswith("- "):
            items.append(line[2:].strip())
        elif items and line.startswith("  "):
            items[-1] += " " + line.strip()
    return items


def load_notebooks() -> list[Notebook]:
    notebooks = []
    for path in notebook_paths():
        nb = read(path)
        [index] = cells_tagged(nb, "course-overview")
        overview = nb.cells[index].source
        measured = reading.measure(path, nb)
        objectives = overview.split("**Objectives**", 1)[1].split("**Minutes:**", 1)[0]
        [key_points] = [c.source for c in nb.cells if c.source.startswith("## Key points")]
        key_points = key_points.split("## Key points", 1)[1]
        notebooks.append(
            Notebook(
                number=path.name[:2],
                name=path.name,
                title=title(nb),
                teaching=measured.teaching,
                exercises=measured.exercises,
                objectives=_bullets(objectives),
                key_points=_bullets(key_points),
                going_deeper=measured.going_deeper,
                sections=tuple(measured.main_path),
            )
        )
    return notebooks


def _clock(minute: int) -> str:
    return f"{minute // 60}:{minute % 60:02d}"


def live_sections(nb: Notebook) -> list[reading.Section]:
    """The sections of ``nb`` that ``LIVE`` names, in its order. Raises for a name that is no
    main-path section (a typo, a section moved to "Going deeper", a renumbered exercise)."""
    found = []
    for number, start in (item for block in LIVE for item in block):
        if number != nb.number:
            continue
        matches = [s for s in nb.sections if s.heading.startswith(start)]
        if len(matches) != 1:
            raise ValueError(
                f"LIVE names {start!r} in {nb.name}: its main path has {len(matches)} sections "
                f"whose heading starts so (they are: {[s.heading for s in nb.sections]})"
            )
        found.append(matches[0])
    return found


def section_minutes(section: reading.Section) -> tuple[int, int]:
    """(teaching, exercises) of one section, in whole minutes."""
    return math.ceil(section.teaching), section.exercises


def schedule(notebooks: list[Notebook]) -> list[tuple[str, str, int, int, str]]:
    """Rows (start, end, teaching, exercises, what): the opening, each live section with a break
    between two blocks, the closing. Raises if they overrun the workshop."""
    by_number = {nb.number: nb for nb in notebooks}
    missing = sorted({n for block in LIVE for n, _ in block} - set(by_number))
    if missing:
        raise ValueError(f"the workshop plan names notebooks that do not exist: {missing}")
    sections = {n: iter(live_sections(by_number[n])) for n in by_number}
    rows, now = [], 0

    def add(minutes: int, what: str, teaching: int = 0, exercises: int = 0) -> None:
        nonlocal now
        rows.append((_clock(now), _clock(now + minutes), teaching, exercises, what))
        now += minutes

    add(OPENING, "Welcome; check that everyone ran notebook 00 (setup check)")
    for position, block in enumerate(LIVE):
        if position:
            add(BREAK, "Break")
        for number, _ in block:
            nb, section = by_number[number], next(sections[number])
            teaching, exercises = section_minutes(section)
            what = f"[{nb.number}](../notebooks/{nb.name}) {section.heading}"
            add(teaching + exercises, what, teaching, exercises)
    add(CLOSING, "Wrap-up: key points, what to read next, questions")
    if now > WORKSHOP_MINUTES:
        raise ValueError(f"the plan takes {now} minutes, more than {WORKSHOP_MINUTES}")
    return rows


def reading_after(notebooks: list[Notebook]) -> list[tuple[Notebook, list[reading.Section]]]:
    """Each notebook's main-path sections that the workshop does not teach live."""
    after = []
    for nb in notebooks:
        if nb.number == PRE_WORK:
            continue
        live = {id(s) for s in live_sections(nb)}
        rest = [
            s
            for s in nb.sections
            if id(s) not in live and s.minutes >= 0.5 and s.heading not in FRAMING
        ]
        if rest:
            after.append((nb, rest))
    return after


def notes_for(nb: Notebook) -> str:
    path = NOTES / f"{Path(nb.name).stem}.md"
    if not path.exists():
        raise FileNotFoundError(f"write the instructor notes for {nb.name}: {path}")
    text = path.read_text(encoding="utf-8").strip()
    positions = [text.find(heading) for heading in NOTE_HEADINGS]
    if -1 in positions or positions != sorted(positions) or positions[0] != 0:
        raise ValueError(f"{path.name} must have exactly the sections {NOTE_HEADINGS}, in order")
    return text.replace("### ", "#### ")


def guide(notebooks: list[Notebook]) -> str:
    total_teaching = sum(nb.teaching for nb in notebooks)
    total_exercises = sum(nb.exercises for nb in notebooks)
    lines = [
        "# Instructor guide",
        "",
        "<!-- Written by tools/build_workshop.py from the notebooks and workshop/notes/: "
        "edit those, then run it. -->",
        "",
        f"The course's main path is {total_teaching} minutes of teaching and "
        f'{total_exercises} of exercises by the reading model (README, "Notebooks"), more '
        f"than a {WORKSHOP_MINUTES // 60}-hour workshop holds. The workshop below teaches the "
        f"sections named in its schedule live, each timed by the same model; learners run the "
        f"setup check (00) before it, following the [setup page](setup.md), and read the rest "
        f"after it (listed below the schedule). Words the course uses are in the "
        f"[glossary](glossary.md).",
        "",
        f"## A {WORKSHOP_MINUTES // 60}-hour workshop",
        "",
        "| start | end | teaching | exercises | notebook and section |",
        "|---|---|---:|---:|---|",
    ]
    rows = schedule(notebooks)
    for start, end, teaching, exercises, what in rows:
        lines.append(f"| {start} | {end} | {teaching or ''} | {exercises or ''} | {what} |")
    hours, minutes = rows[-1][1].split(":")
    used = int(hours) * 60 + int(minutes)  # the schedule ends when the workshop's time is used
    lines += [
        "",
        f"That is {used} of {WORKSHOP_MINUTES} minutes"
        + (
            f"; {WORKSHOP_MINUTES - used} are left for questions."
            if used < WORKSHOP_MINUTES
            else ": keep the exercise minutes, they are the workshop's questions time."
        ),
        "",
        "Before the workshop: "
        + ", ".join(
            f"[{nb.title}](../notebooks/{nb.name})" for nb in notebooks if nb.number == PRE_WORK
        )
        + ".",
        "",
        "Reading after the workshop (the main path's other sections, by the same model):",
        "",
        *[
            f"- [{nb.title}](../notebooks/{nb.name}): "
            + "; ".join(f"{s.heading} ({math.ceil(s.minutes)})" for s in rest)
            + f". {math.ceil(sum(s.minutes for s in rest))} minutes."
            for nb, rest in reading_after(notebooks)
        ],
        "",
        "Teaching it: the notebooks' exercise cells check answers at once; give the room the "
        "exercise minutes, then reveal the folded solution. `python tools/strip_solutions.py "
        "OUT` writes a copy of the course whose notebooks have no solutions, for sessions "
        "where you hand them out later.",
        "",
        "## Notebook by notebook",
    ]
    for nb in notebooks:
        lines += [
            "",
            f"### {nb.title}",
            "",
            f"[Open the notebook](../notebooks/{nb.name}) · {nb.teaching} minutes teaching, "
            f"{nb.exercises} minutes exercises"
            + (
                f", and {nb.going_deeper} minutes of optional going-deeper sections that the "
                "workshop skips (learners read them after it)."
                if nb.going_deeper
                else "."
            ),
            "",
            "**Objectives**",
            *[f"- {item}" for item in nb.objectives],
            "",
            "**Key points** (the notebook's own)",
            *[f"- {item}" for item in nb.key_points],
            "",
            notes_for(nb),
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only report drift")
    args = parser.parse_args(argv)
    text = guide(load_notebooks())
    if args.check:
        current = GUIDE.read_text(encoding="utf-8") if GUIDE.exists() else ""
        if current != text:
            print(f"{GUIDE.relative_to(ROOT)} has drifted: run python tools/build_workshop.py")
            return 1
        return 0
    GUIDE.parent.mkdir(exist_ok=True)
    GUIDE.write_text(text, encoding="utf-8")
    print(f"wrote {GUIDE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
