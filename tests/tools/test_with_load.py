"""tools/with_load.py: the command runs beside busy processes, which stop with it."""

import os
import sys
import time

import pytest
from with_load import main, run_loaded, spin, start_load


def test_the_command_runs_and_its_exit_code_is_returned():
    assert run_loaded([sys.executable, "-c", "raise SystemExit(7)"], workers=1, limit=60) == 7


def test_a_worker_spins_on_the_cpu_and_stops_at_its_deadline():
    started, cpu = time.monotonic(), time.process_time()
    spin(time.monotonic() + 0.3)
    assert time.process_time() - cpu > 0.02, "a worker computes, it does not sleep"
    assert time.monotonic() - started < 5


def test_a_command_over_the_limit_is_stopped():
    started = time.monotonic()
    code = run_loaded([sys.executable, "-c", "import time; time.sleep(30)"], workers=1, limit=2)
    assert code == 124 and time.monotonic() - started < 20


def test_bad_input_says_what_to_change(capsys):
    with pytest.raises(SystemExit):
        main(["--workers", "0", "--", "true"])
    assert "--workers must be at least 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([])
    assert "give the command to run after --" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--nice", "20", "--", "true"])
    assert "--nice must be from 0 to 19, got 20" in capsys.readouterr().err


@pytest.mark.parametrize("nice", [0, 5])
def test_the_busy_processes_run_at_the_niceness_asked_for(nice):
    [process] = start_load(1, time.monotonic() + 5, nice)
    try:
        deadline = time.monotonic() + 5
        while os.getpriority(os.PRIO_PROCESS, process.pid) != nice + os.nice(0):
            assert time.monotonic() < deadline, "the worker never took its niceness"
            time.sleep(0.05)
    finally:
        process.terminate()
        process.join()
