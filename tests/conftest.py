import os

import pytest

# The suite's numbers are compared with CPU-made outputs; unit tests use the CPU too.
os.environ.setdefault("GM_DEVICE", "cpu")


@pytest.fixture
def strict_checks(monkeypatch):
    """Failing exercise checks raise instead of returning a result."""
    monkeypatch.setenv("GM_STRICT_CHECKS", "1")
