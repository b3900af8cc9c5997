"""The command: run a training script as it is, under the loop auditor.

    python -m loop_auditor [--accumulation-steps K] [--allow CODE] [--exit-zero] train.py [args]

It runs the script as ``python train.py`` would (same ``sys.argv``, its folder first on
``sys.path``, ``__name__ == "__main__"``), audits every optimizer the script builds, and when
the script ends prints the findings to stderr, in one write (under torchrun, the reports of
two ranks do not interleave). Exit status: the script's own when it failed; otherwise 3 when
there are findings (0 with ``--exit-zero``) and 0 when there are none.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
from pathlib import Path

from loop_auditor.findings import CODES
from loop_auditor.language import _
from loop_auditor.session import AuditSession

FINDINGS_STATUS = 3


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            _("must be a whole number, got {text}").format(text=repr(text))
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(_("must be 1 or more, got {value}").format(value=value))
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loop_auditor",
        description=_("Run a PyTorch training script unchanged and report its gradient bugs."),
        epilog=_(
            "Exit status: the script's own if it failed; {status} if the auditor has findings "
            "(unless --exit-zero); 0 otherwise. Findings go to stderr."
        ).format(status=FINDINGS_STATUS),
    )
    parser.add_argument(
        "--accumulation-steps",
        type=positive_int,
        metavar="K",
        help=_("micro-batches per optimizer step the script intends (default: 1)"),
    )
    parser.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="CODE",
        choices=list(CODES),
        help=_("a code the script does on purpose (repeat for several)"),
    )
    parser.add_argument(
        "--exit-zero",
        action="store_true",
        help=_(
            "report findings without exit status {status} (the script's own status, else 0), "
            "so that torchrun does not stop the other ranks"
        ).format(status=FINDINGS_STATUS),
    )
    parser.add_argument("script", help=_("the training script, run as `python script`"))
    # main() splits the script's arguments off before parsing: "*" only shows them in --help
    # (REMAINDER, or "*" without a default, would make them required: named when the script
    # is missing)
    parser.add_argument("args", nargs="*", default=[], help=_("the script's own arguments"))
    return parser


def _forget_course_helpers() -> None:
    """``python -m helpers.audit`` imported the course's ``helpers``; drop it, so that the
    script's own ``import helpers`` finds the script's module, as it would without us."""
    for name in [n for n in sys.modules if n == "helpers" or n.startswith("helpers.")]:
        del sys.modules[name]


def _status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """The command's own arguments (up to the script) and the script's, kept verbatim."""
    takes_value = {"--accumulation-steps", "--allow"}
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in takes_value:
            i += 2
        elif token.startswith("-"):
            i += 1
        else:
            return argv[: i + 1], argv[i + 1 :]
    return argv, []


def _report(session: AuditSession, script: Path, ran_to_end: bool) -> str:
    """What the command prints when the script ends: the findings, or that there are none;
    nothing when the script stopped before any optimizer step (its ``--help``, an error in its
    arguments), and a short note when it ran to its end without one (its optimizers were in
    processes it started, or it has none)."""
    rank = os.environ.get("RANK")
    who = _("loop auditor (rank {rank})").format(rank=rank) if rank else _("loop auditor")
    if not session.findings and session.steps == 0:
        if not ran_to_end:
            return ""
        return (
            _("{who}: nothing to audit: {script} took no optimizer step in this process.").format(
                who=who, script=script
            )
            + "\n"
        )
    return session.report(str(script), who) + "\n"


def _write_whole(text: str) -> None:
    """Write ``text`` to stderr in one ``os.write`` on its file descriptor, after what is
    buffered: two processes that share stderr (torchrun's ranks) then cannot interleave their
    lines. Without a file descriptor (stderr captured in Python), in one ``write``."""
    if not text or sys.stderr is None:
        return
    sys.stderr.flush()
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        sys.stderr.write(text)
        sys.stderr.flush()
        return
    data = text.encode(getattr(sys.stderr, "encoding", None) or "utf-8", "backslashreplace")
    while data:  # one call writes it all, but for a signal or a full, non-blocking pipe
        data = data[os.write(fd, data) :]


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    own, script_args = _split(list(sys.argv[1:] if argv is None else argv))
    options = parser.parse_args(own)
    options.args = script_args
    script = Path(options.script)
    if not script.is_file():
        parser.error(_("no such script: {script}").format(script=options.script))
    _forget_course_helpers()
    sys.argv = [str(script), *options.args]
    sys.path[0] = str(script.resolve().parent)
    status, ran_to_end = 0, False
    with AuditSession(options.accumulation_steps, allow=options.allow) as session:
        try:
            runpy.run_path(str(script), run_name="__main__")
            ran_to_end = True
        except SystemExit as exit_:
            status = _status(exit_.code)
        except KeyboardInterrupt:
            status = 130
        except BaseException:
            traceback.print_exc()
            status = 1
        session.aborted = status != 0
    sys.stdout.flush()
    _write_whole(_report(session, script, ran_to_end))
    if status:
        return status
    return FINDINGS_STATUS if session.findings and not options.exit_zero else 0
