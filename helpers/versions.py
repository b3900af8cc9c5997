"""The Python and torch versions the course runs on, stated once.

Every other place that names a minimum reads it from here or is checked against it by
``tests/core/test_versions.py``: ``pyproject.toml`` (the package's floor), ``requirements.txt`` and
``binder/requirements.txt`` (the whole course), notebook 00's report, every notebook's setup
cell and the README.

Each notebook's minimum torch was measured, not guessed: CI runs every notebook, with all its
checks, on the oldest torch it names here and on the newest release (README, "Tested on").

This module runs in the setup cell before anything else, so that a notebook started on a torch
or a Python that is too old stops there with a message and the command that fixes it, instead
of a traceback deep inside a helper. It therefore imports nothing of the course at import
time and keeps to syntax that Python 3.7 and newer parse. Its messages are in the language
``GM_LANG`` names when the course's translations load (:func:`_`), in English otherwise.
"""

from __future__ import annotations

import platform
import re
import sys

PYTHON_MINIMUM = (3, 11)

# The oldest torch release each notebook runs on, every check included (measured: README,
# "Tested on"). Why a notebook needs more than the floor:
#   07: DDP on torch 2.3 puts the whole small model in one bucket, where the notebook counts
#       the all-reduces of two (the capstone, 09, was part of that notebook when measured)
#   08: fully_shard (FSDP2) does not import on 2.3, fails on the CPU on 2.6 ('Stream' object
#       has no attribute 'record_event') and gives a wrong gradient on 2.8.0 (reported on 2.7.1)
TORCH_MINIMUMS = {
    "00_setup_check": (2, 3),
    "01_autograd_accumulates": (2, 3),
    "02_zero_grad_internals": (2, 3),
    "03_gradient_accumulation": (2, 3),
    "04_several_losses": (2, 3),
    "05_pitfalls": (2, 3),
    "06_loop_auditor": (2, 3),
    "07_accumulation_at_scale": (2, 4),
    "08_training_stacks": (2, 9),
    "09_capstone": (2, 4),
}
# The package's floor (pyproject.toml: the helpers and the loop auditor import and run on it)
# and the whole course's (requirements.txt, binder/: every notebook runs).
TORCH_FLOOR = min(TORCH_MINIMUMS.values())
TORCH_FOR_EVERY_NOTEBOOK = max(TORCH_MINIMUMS.values())
# The newest release CI runs every notebook on, and its Python (tools/torch_range.py).
TORCH_NEWEST_TESTED = (2, 15, 0)
PYTHON_NEWEST_TESTED = (3, 12)

UPGRADE_TORCH = "python -m pip install -U torch"
INSTALL_TORCH = "python -m pip install torch"


def _(message: str) -> str:
    """``message`` in the language ``GM_LANG`` names (:mod:`helpers.translation`), imported
    only now; English where the translations cannot load (a Python too old for them)."""
    try:
        from helpers.translation import translate
    except (ImportError, SyntaxError):
        return message
    return translate(message)


def parse_version(text: str) -> tuple[int, ...]:
    """Leading numeric parts of a version string: '2.13.0+cpu' -> (2, 13, 0)."""
    if not isinstance(text, str):
        raise TypeError(
            _("version must be a string such as '2.13.0', got {kind}").format(
                kind=type(text).__name__
            )
        )
    match = re.match(r"\d+(?:\.\d+)*", text.strip())
    if match is None:
        raise ValueError(
            _("cannot read a version number from {text!r}: write it as '2.13.0'").format(text=text)
        )
    return tuple(int(part) for part in match.group(0).split("."))


def dotted(version: tuple[int, ...]) -> str:
    """(2, 9) -> '2.9'."""
    return ".".join(str(part) for part in version)


def notebook_number(name: str) -> str:
    """'08_training_stacks' or '08_training_stacks.ipynb' -> '08'."""
    return name.split("_", 1)[0]


def _numbers_as_ranges(names: list[str], translated: bool = False) -> str:
    """['00', '01', '02', '05', '07'] -> '00-02, 05 and 07' (the course's notebooks in order;
    ``translated``: in the language of the messages)."""
    order = [notebook_number(name) for name in TORCH_MINIMUMS]
    positions = sorted(order.index(name) for name in names)
    parts, start = [], None
    for i, position in enumerate(positions):
        if start is None:
            start = position
        if i + 1 == len(positions) or positions[i + 1] != position + 1:
            first, last = order[start], order[position]
            parts.append(first if first == last else f"{first}-{last}")
            start = None
    if len(parts) == 1:
        return parts[0]
    if translated:
        return _("{notebooks} and {last}").format(notebooks=", ".join(parts[:-1]), last=parts[-1])
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _known_notebook(notebook: str) -> str:
    if not isinstance(notebook, str):
        raise TypeError(
            _("notebook must be a name such as '08_training_stacks', got {notebook!r}").format(
                notebook=notebook
            )
        )
    stem = notebook.rsplit("/", 1)[-1]
    stem = stem[: -len(".ipynb")] if stem.endswith(".ipynb") else stem
    if stem not in TORCH_MINIMUMS:
        raise ValueError(
            _("no notebook named {notebook!r}: use one of {names}").format(
                notebook=notebook, names=", ".join(TORCH_MINIMUMS)
            )
        )
    return stem


def installed_torch_version() -> str | None:
    """The version of the torch this kernel imports, or None when there is none."""
    try:
        import torch
    except ImportError:
        return None
    return str(torch.__version__)


def running_on_colab() -> bool:
    """True inside Google Colab (its ``google.colab`` module is loaded there)."""
    return "google.colab" in sys.modules


def upgrade_instruction() -> str:
    """How to get a newer torch into this kernel, on Colab or elsewhere."""
    if running_on_colab():
        return _("run `!pip install -U torch` in a cell, then Runtime > Restart session")
    return _("run `{command}`, then restart the kernel").format(command=UPGRADE_TORCH)


def _by_minimum(below: tuple[int, ...] | None = None) -> list[tuple[tuple[int, ...], list[str]]]:
    """The notebooks' numbers grouped by their minimum torch, oldest first; with ``below``,
    only those that need more than it."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for name, minimum in TORCH_MINIMUMS.items():
        if below is None or below < minimum:
            groups.setdefault(minimum, []).append(notebook_number(name))
    return sorted(groups.items())


def _needs(version: tuple[int, ...]) -> str:
    """What the notebooks that cannot run on ``version`` need: '06 needs 2.4 or newer; 07
    needs 2.9 or newer'."""
    return _("; ").join(
        (
            _("{notebook} needs {version} or newer")
            if len(names) == 1
            else _("{notebooks} need {version} or newer")
        ).format(
            notebook=names[0], notebooks=_numbers_as_ranges(names, True), version=dotted(minimum)
        )
        for minimum, names in _by_minimum(below=version)
    )


def runs_on(found: str) -> list[str]:
    """The numbers of the notebooks that run on torch ``found``."""
    version = parse_version(found)
    return [notebook_number(n) for n, minimum in TORCH_MINIMUMS.items() if version >= minimum]


def torch_verdict(found: str | None) -> tuple[str, str]:
    """How far a torch version carries the course: ``(status, text)``, status ``"OK"`` when
    every notebook runs, ``"WARN"`` when some do, ``"FAIL"`` when none does or torch is
    missing. The text names what cannot run and the command that fixes it."""
    if found is None:
        return "FAIL", _("not installed -> {command}").format(command=INSTALL_TORCH)
    runs = runs_on(found)
    if len(runs) == len(TORCH_MINIMUMS):
        return "OK", found
    needs = _needs(parse_version(found))
    if runs:
        text = _("{found}: notebooks {runs} run; {needs} -> {command}").format(
            found=found, runs=_numbers_as_ranges(runs, True), needs=needs, command=UPGRADE_TORCH
        )
    else:
        text = _("{found}: {needs} -> {command}").format(
            found=found, needs=needs, command=UPGRADE_TORCH
        )
    return ("WARN" if runs else "FAIL"), text


def python_verdict(found: str | None = None) -> tuple[str, str]:
    """``("OK" | "FAIL", text)`` for this Python (or ``found``)."""
    found = platform.python_version() if found is None else found
    if parse_version(found) >= PYTHON_MINIMUM:
        return "OK", found
    return "FAIL", _(
        "{found}: the course needs Python {minimum} or newer -> make a new "
        "environment with Python {minimum} or newer and install the course there"
    ).format(found=found, minimum=dotted(PYTHON_MINIMUM))


class CourseSetupError(RuntimeError):
    """A notebook cannot run here. Jupyter shows only the message (no traceback), and a
    "Run All" stops at the setup cell."""

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


def why_it_cannot_run(
    notebook: str, python: str | None = None, torch: str | None = ""
) -> str | None:
    """Why this Python or torch cannot run ``notebook``, with what it needs and the command
    that fixes it; None when it can. ``python`` and ``torch`` default to this kernel's
    (``torch=None`` means not installed)."""
    stem = _known_notebook(notebook)
    number = notebook_number(stem)
    status, text = python_verdict(python)
    if status != "OK":
        return _("Notebook {number} cannot run on Python {text}.").format(number=number, text=text)
    found = installed_torch_version() if torch == "" else torch
    if found is None:
        return _(
            "Notebook {number} needs torch, and this kernel has none: run `{command}`, "
            "then restart the kernel."
        ).format(number=number, command=INSTALL_TORCH)
    minimum = TORCH_MINIMUMS[stem]
    if parse_version(found) >= minimum:
        return None
    runs = runs_on(found)
    others = ""
    if runs:
        others = _(" (notebooks {runs} run on it)").format(runs=_numbers_as_ranges(runs, True))
    return _(
        "Notebook {number} needs torch {minimum} or newer, and this kernel has "
        "torch {found}{others}. To upgrade, {instruction}."
    ).format(
        number=number,
        minimum=dotted(minimum),
        found=found,
        others=others,
        instruction=upgrade_instruction(),
    )


def stop_unless_supported(notebook: str, python: str | None = None, torch: str | None = "") -> None:
    """Raise :class:`CourseSetupError` when this Python or torch cannot run ``notebook``
    (:func:`why_it_cannot_run` says why); silent otherwise. Every setup cell calls it."""
    reason = why_it_cannot_run(notebook, python, torch)
    if reason is not None:
        raise CourseSetupError(reason)


def minimums_sentence() -> str:
    """The minimums in words, as notebook 00 and the README state them: 'Notebooks 00-06 run
    on torch 2.3 or newer; 07 and 09 on 2.4 or newer; 08 on 2.9 or newer.'"""
    parts = [
        f"{_numbers_as_ranges(names)} on {dotted(minimum)} or newer"
        for minimum, names in _by_minimum()
    ]
    parts[0] = parts[0].replace(" on ", " run on torch ", 1)
    return f"Notebooks {'; '.join(parts)}."
