"""The environment report of notebook 00: versions, device, and what to do when
something is missing or too old."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib import metadata

from helpers.device import describe_device, pick_device
from helpers.translation import _
from helpers.versions import (
    INSTALL_TORCH,
    TORCH_FLOOR,
    UPGRADE_TORCH,
    parse_version,
    python_verdict,
    running_on_colab,
    torch_verdict,
)

__all__ = ["CheckLine", "Requirement", "check_environment", "parse_version", "torch_line"]


@dataclass(frozen=True)
class Requirement:
    """A package the course needs, the oldest version it works with, and the fix."""

    name: str
    module: str
    minimum: tuple[int, ...]
    fix: str
    needed_on_colab: bool = True


def torch_fix(command: str = UPGRADE_TORCH) -> str:
    """The command that installs or upgrades torch, with how to get the small CPU build."""
    return _(
        "{command}  (CPU-only machines: add "
        "--index-url https://download.pytorch.org/whl/cpu for the small build)"
    ).format(command=command)


TORCH_FIX = torch_fix()
# torch's line is judged notebook by notebook (helpers.versions); the others by one minimum.
REQUIREMENTS = (
    Requirement("torch", "torch", TORCH_FLOOR, TORCH_FIX),
    Requirement("jupyterlab", "jupyterlab", (4, 0), "python -m pip install -U jupyterlab", False),
    Requirement("ipywidgets", "ipywidgets", (7, 6), "python -m pip install -U ipywidgets"),
    Requirement("matplotlib", "matplotlib", (3, 8), "python -m pip install -U matplotlib"),
)


@dataclass(frozen=True)
class CheckLine:
    """One line of the report: what was found and whether it is good enough: ``"OK"``,
    ``"WARN"`` (some notebooks cannot run) or ``"FAIL"``."""

    name: str
    found: str | None
    status: str
    fix: str

    @property
    def ok(self) -> bool:
        """Not a failure: every notebook runs (OK), or some do (WARN)."""
        return self.status != "FAIL"

    def __str__(self) -> str:
        detail = self.found if self.found is not None else _("not installed")
        text = f"{'[' + self.status + ']':<6} {self.name:<11} {detail}"
        return f"{text}  ->  {self.fix}" if self.fix and self.status != "OK" else text


def torch_line(found: str | None) -> CheckLine:
    """torch's line: OK when every notebook runs on ``found``; WARN naming the notebooks that
    need a newer torch; FAIL when none runs."""
    if found is None:
        return CheckLine("torch", None, "FAIL", torch_fix(INSTALL_TORCH))
    status, text = torch_verdict(found)
    if status == "OK":
        return CheckLine("torch", found, "OK", "")
    detail, _arrow, fix = text.rpartition(" -> ")
    return CheckLine("torch", detail, status, fix)


def check_environment() -> list[CheckLine]:
    """Python, the course's packages and the device, each marked OK, WARN or FAIL."""
    python_status, python_text = python_verdict()
    python_found, _arrow, python_fix = python_text.partition(" -> ")
    lines = [CheckLine("python", python_found, python_status, python_fix)]
    on_colab = running_on_colab()
    for requirement in REQUIREMENTS:
        try:  # read the installed version without importing (jupyterlab is slow to import)
            found = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            found = None
        if found is not None and importlib.util.find_spec(requirement.module) is None:
            found = None  # metadata left behind by a package that no longer imports
        if requirement.name == "torch":  # judged notebook by notebook
            lines.append(torch_line(found))
            continue
        if found is None:
            ok = on_colab and not requirement.needed_on_colab
        else:
            ok = parse_version(found) >= requirement.minimum
        lines.append(CheckLine(requirement.name, found, "OK" if ok else "FAIL", requirement.fix))
    try:
        lines.append(CheckLine("device", describe_device(pick_device()), "OK", ""))
    except ValueError as error:  # GM_DEVICE names a device this machine lacks
        lines.append(CheckLine("device", _("not available"), "FAIL", str(error)))
    return lines
