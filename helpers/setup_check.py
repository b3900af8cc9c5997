"""The environment report of notebook 00: versions, device, and what to do when
something is missing or too old."""

from __future__ import annotations

import importlib.util
import platform
import re
import sys
from dataclasses import dataclass
from importlib import metadata

from helpers.device import describe_device, pick_device


@dataclass(frozen=True)
class Requirement:
    """A package the course needs, the oldest version it works with, and the fix."""

    name: str
    module: str
    minimum: tuple[int, ...]
    fix: str
    needed_on_colab: bool = True


TORCH_FIX = (
    "python -m pip install -U torch  (CPU-only machines: add "
    "--index-url https://download.pytorch.org/whl/cpu for the small build)"
)
REQUIREMENTS = (
    Requirement("torch", "torch", (2, 3), TORCH_FIX),  # pyproject.toml's (a test checks)
    Requirement("jupyterlab", "jupyterlab", (4, 0), "python -m pip install -U jupyterlab", False),
    Requirement("ipywidgets", "ipywidgets", (7, 6), "python -m pip install -U ipywidgets"),
    Requirement("matplotlib", "matplotlib", (3, 8), "python -m pip install -U matplotlib"),
)
MINIMUM_PYTHON = (3, 10)


@dataclass(frozen=True)
class CheckLine:
    """One line of the report: what was found and whether it is good enough."""

    name: str
    found: str | None
    ok: bool
    fix: str

    def __str__(self) -> str:
        status = "[OK]  " if self.ok else "[FAIL]"
        detail = self.found if self.found is not None else "not installed"
        text = f"{status} {self.name:<11} {detail}"
        return text if self.ok else f"{text}  ->  {self.fix}"


def parse_version(text: str) -> tuple[int, ...]:
    """Leading numeric parts of a version string: '2.13.0+cpu' -> (2, 13, 0)."""
    if not isinstance(text, str):
        raise TypeError(f"version must be a string, got {type(text).__name__}")
    match = re.match(r"\d+(?:\.\d+)*", text.strip())
    if match is None:
        raise ValueError(f"cannot read a version number from {text!r}")
    return tuple(int(part) for part in match.group(0).split("."))


def running_on_colab() -> bool:
    """True inside Google Colab (its ``google.colab`` module is loaded there)."""
    return "google.colab" in sys.modules


def check_environment() -> list[CheckLine]:
    """Python, the course's packages and the device, each marked OK or FAIL."""
    python = platform.python_version()
    lines = [
        CheckLine(
            "python",
            python,
            parse_version(python) >= MINIMUM_PYTHON,
            f"install Python {'.'.join(map(str, MINIMUM_PYTHON))} or newer",
        )
    ]
    on_colab = running_on_colab()
    for requirement in REQUIREMENTS:
        try:  # read the installed version without importing (jupyterlab is slow to import)
            found = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            found = None
        if found is None or importlib.util.find_spec(requirement.module) is None:
            found, ok = None, on_colab and not requirement.needed_on_colab
        else:
            ok = parse_version(found) >= requirement.minimum
        lines.append(CheckLine(requirement.name, found, ok, requirement.fix))
    try:
        lines.append(CheckLine("device", describe_device(pick_device()), True, ""))
    except ValueError as error:  # GM_DEVICE names a device this machine lacks
        lines.append(CheckLine("device", "not available", False, str(error)))
    return lines
