import pytest
import torch

from helpers import device
from helpers.device import describe_device, pick_device


@pytest.fixture
def no_override(monkeypatch):
    monkeypatch.delenv("GM_DEVICE", raising=False)


def fake_available(monkeypatch, cuda: bool, mps: bool):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize(
    ("cuda", "mps", "expected"),
    [(True, True, "cuda"), (True, False, "cuda"), (False, True, "mps"), (False, False, "cpu")],
)
def test_prefers_cuda_then_mps_then_cpu(monkeypatch, no_override, cuda, mps, expected):
    fake_available(monkeypatch, cuda, mps)
    assert pick_device() == torch.device(expected)


def test_environment_variable_overrides_the_choice(monkeypatch):
    fake_available(monkeypatch, cuda=True, mps=False)
    monkeypatch.setenv("GM_DEVICE", "cpu")
    assert pick_device() == torch.device("cpu")


def test_explicit_preference_wins_and_is_case_insensitive(monkeypatch, no_override):
    fake_available(monkeypatch, cuda=False, mps=True)
    assert pick_device(" MPS ") == torch.device("mps")


def test_unknown_or_unavailable_devices_are_refused(monkeypatch, no_override):
    fake_available(monkeypatch, cuda=False, mps=False)
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        pick_device("gpu")
    with pytest.raises(ValueError, match="'cuda' was asked for but is not available"):
        pick_device("cuda")
    with pytest.raises(TypeError, match="must be a string"):
        pick_device(0)


def test_describe_device():
    assert describe_device(torch.device("cpu")) == "cpu"
    assert describe_device(torch.device("mps")) == "mps (Apple GPU)"
    with pytest.raises(TypeError):
        describe_device("cpu")
    assert device.DEVICE_ENV_VAR == "GM_DEVICE"
