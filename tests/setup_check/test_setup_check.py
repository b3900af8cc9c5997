import sys
import types

import pytest

from helpers.setup_check import environment
from helpers.setup_check.environment import CheckLine, check_environment, parse_version


def test_parse_version():
    assert parse_version("2.13.0+cpu") == (2, 13, 0)
    assert parse_version("8.1.9") == (8, 1, 9)
    with pytest.raises(ValueError, match="cannot read a version"):
        parse_version("dev")
    with pytest.raises(TypeError):
        parse_version(2.13)


def test_this_environment_passes_and_names_the_device():
    lines = check_environment()
    assert [line.name for line in lines] == [
        "python",
        "torch",
        "jupyterlab",
        "ipywidgets",
        "matplotlib",
        "device",
    ]
    assert all(line.ok for line in lines), [str(line) for line in lines]
    assert str(lines[-1]) == "[OK]   device      cpu"


def test_missing_or_old_packages_fail_with_their_fix(monkeypatch):
    monkeypatch.setattr(
        environment,
        "REQUIREMENTS",
        (
            environment.Requirement("nothere", "no_such_module_xyz", (1,), "pip install nothere"),
            environment.Requirement("torch", "torch", (99,), "upgrade torch"),
        ),
    )
    _, missing, torch_line, _ = check_environment()
    assert not missing.ok and str(missing).endswith("not installed  ->  pip install nothere")
    assert torch_line.name == "torch"  # judged by helpers.versions, not by its Requirement


def test_an_unavailable_device_choice_is_a_fail_line_not_a_crash(monkeypatch):
    monkeypatch.setenv("GM_DEVICE", "cuda")
    monkeypatch.setattr(environment, "REQUIREMENTS", ())
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    device = check_environment()[-1]
    assert not device.ok and "'cuda' was asked for but is not available" in str(device)


def test_fixes_upgrade_what_is_too_old():
    for requirement in environment.REQUIREMENTS:
        assert "pip install -U" in requirement.fix


def test_jupyterlab_is_optional_on_colab(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(
        environment,
        "REQUIREMENTS",
        (environment.Requirement("jupyterlab", "no_such_module_xyz", (4,), "pip", False),),
    )
    assert check_environment()[1].ok
    assert CheckLine("x", "1", "OK", "").ok


@pytest.mark.parametrize(
    ("found", "ok"), [("2.2.2", False), ("2.3.0", True), ("2.14.1+cu128", True)]
)
def test_torch_below_the_course_floor_fails_with_the_upgrade(monkeypatch, found, ok):
    """Between the floor and the release every notebook runs on, a WARN
    (tests/core/test_versions.py)."""
    real_version = environment.metadata.version
    monkeypatch.setattr(
        environment.metadata,
        "version",
        lambda name: found if name == "torch" else real_version(name),
    )
    torch_line = next(line for line in check_environment() if line.name == "torch")
    assert torch_line.ok is ok
    if not ok:
        assert str(torch_line).startswith(f"[FAIL] torch       {found}: ")
        assert str(torch_line).endswith("  ->  python -m pip install -U torch")
