"""A pytest plugin for tools/gpu_suite.sh (``-p gpu_suite_plugin``, tools/ on PYTHONPATH): the
run ends in time and always leaves its junit XML.

- ``--gm-deadline=S``: no test starts later than S seconds after the session began; the rest
  are skipped with a reason that starts ``gm-deadline``, and the run fails.
- ``--gm-test-timeout=S``: a test whose call runs over S seconds fails (SIGALRM), for where
  pytest-timeout is not installed (where it is, its ``--timeout`` is used instead).
- SIGTERM (what ``timeout`` sends) interrupts the run like Ctrl-C, so pytest still writes
  its junit XML and summary instead of dying silently.
"""

from __future__ import annotations

import signal
import time

import pytest

DEADLINE_REASON = "gm-deadline: the suite's time ran out before this test started"
TIMEOUT_MESSAGE = "gm-test-timeout: the test ran over {seconds:g} s"


class _State:
    started = time.monotonic()
    deadline_skips = 0


def pytest_addoption(parser):
    group = parser.getgroup("gm-suite", "tools/gpu_suite.sh")
    group.addoption(
        "--gm-deadline",
        type=float,
        default=None,
        help="start no test later than this many seconds after the session began",
    )
    group.addoption(
        "--gm-test-timeout",
        type=float,
        default=None,
        help="fail a test whose call runs longer than this many seconds (SIGALRM)",
    )


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"stopped by signal {signum} (the suite's time ran out)")


def pytest_configure(config):
    _State.started = time.monotonic()
    _State.deadline_skips = 0
    signal.signal(signal.SIGTERM, _interrupt)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    deadline = item.config.getoption("gm_deadline")
    if deadline is not None and time.monotonic() - _State.started > deadline:
        _State.deadline_skips += 1
        pytest.skip(DEADLINE_REASON)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    seconds = item.config.getoption("gm_test_timeout")
    if not seconds or not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(signum, frame):
        pytest.fail(TIMEOUT_MESSAGE.format(seconds=seconds), pytrace=True)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def pytest_terminal_summary(terminalreporter):
    if _State.deadline_skips:
        terminalreporter.write_line(
            f"gm-deadline: {_State.deadline_skips} tests did not run (time ran out)", red=True
        )


def pytest_sessionfinish(session, exitstatus):
    if _State.deadline_skips and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
