"""Run a command while other processes keep every core busy: the suite's test under load.

    python tools/with_load.py -- python -m pytest
    python tools/with_load.py --workers 2 --limit 1800 -- python -m pytest notebooks

Each worker is a process that spins in Python (no I/O, no network) at normal priority, so
the command competes for every core as on a loaded CI machine or a shared workshop server.
The workers stop when the command ends, or after ``--limit`` seconds at the latest (then
the command is stopped too). Exit status: the command's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time


def spin(deadline: float, nice: int = 0) -> None:
    """Keep one core busy until ``deadline`` (``time.monotonic()``), at niceness ``nice``."""
    if nice:
        os.nice(nice)
    count = 0
    while time.monotonic() < deadline:
        for _ in range(100_000):
            count += 1


def start_load(workers: int, deadline: float, nice: int = 0) -> list:
    """``workers`` processes that spin at niceness ``nice`` until ``deadline``, started."""
    context = multiprocessing.get_context("spawn")
    load = [
        context.Process(target=spin, args=(deadline, nice), daemon=True) for _ in range(workers)
    ]
    for process in load:
        process.start()
    return load


def run_loaded(command: list[str], workers: int, limit: float, nice: int = 0) -> int:
    """Run ``command`` with ``workers`` spinning processes beside it; its exit code."""
    if not command:
        raise ValueError("give the command to run after --, e.g. -- python -m pytest")
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    if not 0 <= nice <= 19:
        raise ValueError(f"--nice must be from 0 to 19, got {nice}")
    load = start_load(workers, time.monotonic() + limit, nice)
    print(
        f"with_load: {workers} busy processes (nice {nice}) beside: {' '.join(command)}",
        flush=True,
    )
    try:
        return subprocess.run(command, check=False, timeout=limit).returncode
    except subprocess.TimeoutExpired:
        print(f"with_load: the command ran over {limit:g} s and was stopped", file=sys.stderr)
        return 124
    finally:
        for process in load:
            process.terminate()
        for process in load:
            process.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="busy processes")
    parser.add_argument("--limit", type=float, default=1800, help="seconds at most")
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="the busy processes' niceness, 0 (as the command) to 19: at 5 each takes about a "
        "quarter of a core that the command also wants, and still preempts it",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        return run_loaded(command, args.workers, args.limit, args.nice)
    except ValueError as error:
        parser.error(str(error))


if __name__ == "__main__":
    sys.exit(main())
