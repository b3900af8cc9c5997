"""Write the instructor guide, workshop/instructor-guide.md, from what the notebooks declare
(titles, minutes, objectives, key points) and the hand-written notes in workshop/notes/.

    python tools/build_workshop.py          # rewrite the guide
    python tools/build_workshop.py --check  # exit 1 if the committed guide has drifted

The schedule is computed from each notebook's "Minutes: T teaching / E exercises", so the
guide and the notebooks cannot disagree.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

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
IN_WORKSHOP = ("01", "03", "05")  # the rest is self-study after it
OPENING, CLOSING, BREAK = 10, 10, 10
MINUTES = r"\*\*Minutes:\*\* (\d+) teaching / (\d+) exercises(?: / (\d+) going deeper)?"


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
        minutes = re.search(MINUTES, overview)
        if minutes is None:
            raise ValueError(f"{path.name}: the overview cell declares no minutes")
        objectives = overview.split("**Objectives**", 1)[1].split("**Minutes:**", 1)[0]
        key_points = nb.cells[-2].source.split("## Key points", 1)[1]
        notebooks.append(
            Notebook(
                number=path.name[:2],
                name=path.name,
                title=title(nb),
                teaching=int(minutes.group(1)),
                exercises=int(minutes.group(2)),
                objectives=_bullets(objectives),
                key_points=_bullets(key_points),
                going_deeper=int(minutes.group(3) or 0),
            )
        )
    return notebooks


def _clock(minute: int) -> str:
    return f"{minute // 60}:{minute % 60:02d}"


def schedule(notebooks: list[Notebook]) -> list[tuple[str, str, int, int, str]]:
    """Rows (start, end, teaching, exercises, what): the opening, the workshop's notebooks
    with a break between each two, the closing. Raises if they overrun the workshop."""
    by_number = {nb.number: nb for nb in notebooks}
    missing = [n for n in IN_WORKSHOP if n not in by_number]
    if missing:
        raise ValueError(f"the workshop plan names notebooks that do not exist: {missing}")
    rows, now = [], 0

    def add(minutes: int, what: str, teaching: int = 0, exercises: int = 0) -> None:
        nonlocal now
        rows.append((_clock(now), _clock(now + minutes), teaching, exercises, what))
        now += minutes

    add(OPENING, "Welcome; check that everyone ran notebook 00 (setup check)")
    for position, number in enumerate(IN_WORKSHOP):
        nb = by_number[number]
        if position:
            add(BREAK, "Break")
        add(nb.minutes, f"[{nb.title}](../notebooks/{nb.name})", nb.teaching, nb.exercises)
    add(CLOSING, "Wrap-up: key points, what to study next, questions")
    if now > WORKSHOP_MINUTES:
        raise ValueError(f"the plan takes {now} minutes, more than {WORKSHOP_MINUTES}")
    return rows


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
        f"The whole course is {total_teaching} minutes of teaching and {total_exercises} of "
        f"exercises, more than a {WORKSHOP_MINUTES // 60}-hour workshop holds. The workshop "
        f"below teaches the core path: autograd accumulates (01), accumulation on purpose "
        f"(03) and the pitfalls with the loop auditor (05). Learners run the setup check "
        f"(00) before it, following the [setup page](setup.md), and the other notebooks are "
        f"self-study after it. Words the course uses are in the [glossary](glossary.md).",
        "",
        f"## A {WORKSHOP_MINUTES // 60}-hour workshop",
        "",
        "| start | end | teaching | exercises | what |",
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
        + ". After it, for self-study: "
        + ", ".join(
            f"[{nb.title}](../notebooks/{nb.name}) ({nb.teaching} / {nb.exercises} minutes)"
            for nb in notebooks
            if nb.number not in (PRE_WORK, *IN_WORKSHOP)
        )
        + ".",
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
