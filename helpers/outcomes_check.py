"""The course's outcomes check, before (notebook 00) and after (notebook 09): twelve short
items, four per outcome (:mod:`helpers.outcomes_items`). This module records a learner's
answers, scores them per outcome, and keeps the pre-check's result in a file so that the
post-check shows the change.

In a notebook::

    outcomes = OutcomesCheck("pre")        # notebook 00; "post" in notebook 09
    outcomes.answer("O1.1", 7.0)           # one cell per item: right or not, and what it shows
    outcomes.report()                      # the score per outcome and the misconceptions found

The file is ``.outcomes/pre-check.json`` in the course folder (git-ignored), or in the folder
that ``GM_OUTCOMES_DIR`` names (the tests use a temporary one).
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass
from pathlib import Path

from helpers.checks import NOT_ANSWERED, AnswerKindError, CheckResult, correct, is_unanswered, wrong
from helpers.outcomes_items import CHECKS, MISCONCEPTIONS, OUTCOMES, Item
from helpers.translation import _, translate

COURSE = Path(__file__).resolve().parents[1]
FOLDER_ENV_VAR = "GM_OUTCOMES_DIR"
PRE_CHECK_FILE = "pre-check.json"


def outcomes_folder() -> Path:
    """Where the pre-check's result is kept: ``GM_OUTCOMES_DIR``, else ``.outcomes`` in the
    course folder."""
    named = os.environ.get(FOLDER_ENV_VAR)
    return Path(named) if named else COURSE / ".outcomes"


@dataclass(frozen=True)
class Score:
    """Per outcome: ``right`` of ``asked`` items (``answered`` of them answered)."""

    right: int
    answered: int
    asked: int


class OutcomesReport:
    """What :meth:`OutcomesCheck.report` shows: the score per outcome, the misconceptions the
    wrong answers revealed, and with a pre-check on file, the change per outcome."""

    def __init__(self, which: str, scores: dict, found: list[str], before: dict | None):
        self.which, self.scores, self.found, self.before = which, scores, found, before

    def lines(self) -> list[str]:
        title = (
            _("Outcomes check, before the course")
            if self.which == "pre"
            else _("Outcomes check, after the course")
        )
        lines = [title]
        for outcome, score in self.scores.items():
            line = _("{outcome} ({what}): {right} of {asked} right").format(
                outcome=outcome, what=translate(OUTCOMES[outcome]), right=score.right,
                asked=score.asked,
            )  # fmt: skip
            if score.answered < score.asked:
                line += _(" ({left} not answered yet)").format(left=score.asked - score.answered)
            if self.before is not None and outcome in self.before:
                then = self.before[outcome]
                line += _("; before the course {then} of {asked}, {change:+d}").format(
                    then=then, asked=score.asked, change=score.right - then
                )
            lines.append("  " + line)
        if self.found:
            lines.append(_("What the wrong answers suggest you believed, and what holds:"))
            lines += ["  - " + translate(MISCONCEPTIONS[m]) for m in self.found]
        elif any(s.answered for s in self.scores.values()):
            lines.append(_("No wrong answer pointed to a known misconception."))
        if self.which == "post" and self.before is None:
            lines.append(_("No pre-check on file (notebook 00 keeps it): the score stands alone."))
        return lines

    def __repr__(self) -> str:
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        return "<pre>" + html.escape(repr(self)) + "</pre>"


class OutcomesCheck:
    """The learner's answers to one check, ``"pre"`` or ``"post"``; ``folder`` (default:
    :func:`outcomes_folder`) keeps the pre-check's result."""

    def __init__(self, which: str, folder: Path | str | None = None):
        if which not in CHECKS:
            raise ValueError(
                _("which must be {names}, got {which!r}").format(
                    names=_(" or ").join(repr(n) for n in CHECKS), which=which
                )
            )
        self.which = which
        self.folder = Path(folder) if folder is not None else outcomes_folder()
        self.items: dict[str, Item] = {item.id: item for item in CHECKS[which]}
        self.verdicts: dict[str, tuple[bool, str | None]] = {}

    def answer(self, item_id: str, answer: object) -> CheckResult:
        """Judge and record ``answer`` to item ``item_id`` (answering again replaces it)."""
        if item_id not in self.items:
            raise ValueError(
                _("item_id must be one of {ids}, got {item_id!r}").format(
                    ids=", ".join(self.items), item_id=item_id
                )
            )
        if is_unanswered(answer):
            self.verdicts.pop(item_id, None)
            return wrong(NOT_ANSWERED)
        try:
            right, misconception = self.items[item_id].judge(answer)
        except AnswerKindError as error:
            self.verdicts.pop(item_id, None)
            return wrong(str(error))
        self.verdicts[item_id] = (right, misconception)
        if right:
            return correct(_("recorded, and right."))
        if misconception is None:
            return wrong(_("recorded. The report at the end of the check says what it covers."))
        return wrong(
            _("recorded. This answer suggests: {belief}").format(
                belief=translate(MISCONCEPTIONS[misconception])
            )
        )

    def scores(self) -> dict[str, Score]:
        """Per outcome, in order: how many items are right, answered, and asked."""
        out = {}
        for outcome in OUTCOMES:
            ids = [i for i, item in self.items.items() if item.outcome == outcome]
            answered = [self.verdicts[i] for i in ids if i in self.verdicts]
            out[outcome] = Score(sum(right for right, _m in answered), len(answered), len(ids))
        return out

    def misconceptions_found(self) -> list[str]:
        """The misconceptions the wrong answers revealed, each once, in the items' order."""
        found = (self.verdicts[i][1] for i in self.items if i in self.verdicts)
        return list(dict.fromkeys(m for m in found if m is not None))

    def report(self) -> OutcomesReport:
        """The score per outcome and the misconceptions found. The pre-check keeps its result
        (once any item is answered); the post-check shows the change from it."""
        scores = self.scores()
        before = None
        path = self.folder / PRE_CHECK_FILE
        if self.which == "pre":
            if any(s.answered for s in scores.values()):
                self.folder.mkdir(parents=True, exist_ok=True)
                kept = {o: s.right for o, s in scores.items()}
                path.write_text(json.dumps({"right": kept}, indent=1), encoding="utf-8")
        else:
            before = read_pre_check(path)
        return OutcomesReport(self.which, scores, self.misconceptions_found(), before)


def read_pre_check(path: Path) -> dict | None:
    """The pre-check's right answers per outcome, or None without a readable file."""
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))["right"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(kept, dict) or not all(isinstance(v, int) for v in kept.values()):
        return None
    return {o: v for o, v in kept.items() if o in OUTCOMES}
