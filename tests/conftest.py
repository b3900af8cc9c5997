import os

import pytest

# The suite's numbers are compared with CPU-made outputs; unit tests use the CPU too.
os.environ.setdefault("GM_DEVICE", "cpu")

# Under pytest-xdist (the README's test command) there are as many workers as cores: one
# torch thread each, and in the notebook kernels and processes they start, keeps them from
# competing for the cores (the outputs hold on one thread: CI checks them so).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture
def strict_checks(monkeypatch):
    """Failing exercise checks raise instead of returning a result."""
    monkeypatch.setenv("GM_STRICT_CHECKS", "1")
