"""Measure each notebook's wall time and peak memory on one CPU core against the floor.

The floor is a notebook that only imports torch, matplotlib and the helpers.

    python tools/measure_notebooks.py                      # table; exit 1 if over budget
    python tools/measure_notebooks.py notebooks/06_*.ipynb # only these (and the floor)
    python tools/measure_notebooks.py --rounds 5           # more rounds: steadier medians
    python tools/measure_notebooks.py --rounds 4 --cores 2 # 2 rounds at a time
    python tools/measure_notebooks.py --update-readme      # also write the table into README.md

It measures in rounds (``--rounds``, default 3). Each round runs the floor and then every
notebook once, each in a fresh child process and kernel, pinned to core 0 (taskset -c 0, where
taskset exists) with one thread (OMP_NUM_THREADS=1). With ``--cores N``, N rounds run at a
time, round k on core k mod N, so that every core measures (4 rounds on 2 cores take the
time of 2). A notebook's extra time is its wall time
minus the floor's in the same round; its verdict is on that extra time in floors, the extra
divided by the floor's time of the same round, the median over rounds. So the verdict is
relative to the floor measured alongside it: a machine slower in everything (a slower CPU)
slows the floor as much, time the machine adds to every run (a slower start, a busy neighbour)
only makes it more lenient, and one round disturbed by a passing load is outvoted. Peak memory
is the maximum over rounds.

Budget per notebook: extra time within EXTRA_FLOORS (2.5 floors: 5 s where the floor takes
2 s; a notebook named in EXTRA_FLOORS_FOR gets its own: 03 and 04 measure memory in a fresh
Python process that imports torch, about 1.5 s of start-up on one core, 3.5 floors; 07 starts
a 2-process run, about 2.5 s of start-up, 3.5 floors; 08 starts one for all its multi-process
sections and compiles, 5 floors), peak memory within MEMORY_FACTOR (2x) the floor's peak.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat
from course import NOTEBOOKS, ROOT, notebook_paths, read, repository_url
from run_notebooks import execute
from sync_notebooks import setup_source

# Extra time over the floor, in floors (the floor's time of the same round): on the machine the
# budgets were set on, the floor took 2.0 s, so 2.5 floors were 5 s there.
EXTRA_FLOORS = 2.5
# Notebooks with a budget of their own: what they teach needs the time, and the README says so.
EXTRA_FLOORS_FOR = {
    "03_gradient_accumulation.ipynb": 3.5,
    "04_several_losses.ipynb": 3.5,
    "07_accumulation_at_scale.ipynb": 3.5,
    "08_training_stacks.ipynb": 5.0,
}
MEMORY_FACTOR = 2.0
DEFAULT_ROUNDS = 3
FLOOR = "floor (imports only)"
FLOOR_IMPORTS = """\
import torch
import matplotlib
import helpers.plots
import helpers.training
import helpers.widgets"""

Measurement = dict  # {"seconds": float, "peak_mib": float}: one run of one notebook
Round = dict  # name -> Measurement, the floor first, as measured in one round


@dataclass(frozen=True)
class Row:
    """One notebook's summary over all rounds."""

    name: str
    seconds: float  # median wall time
    extra: float  # median over rounds of (its time - the floor's time in the same round)
    peak_mib: float  # maximum over rounds
    ok: bool | None  # within budget; None for the floor, the reference
    extra_floors: float = 0.0  # median over rounds of that difference / the floor's time


# --- pure logic ---------------------------------------------------------------------------


def median_extra(seconds: Sequence[float], floor_seconds: Sequence[float]) -> float:
    """Median over rounds of ``seconds[i] - floor_seconds[i]``: each run minus the floor run
    of the same round."""
    if not seconds:
        raise ValueError("no rounds measured")
    if len(seconds) != len(floor_seconds):
        raise ValueError(
            f"{len(seconds)} notebook times but {len(floor_seconds)} floor times: "
            "one floor time per round is needed"
        )
    return statistics.median(s - f for s, f in zip(seconds, floor_seconds, strict=True))


def median_extra_floors(seconds: Sequence[float], floor_seconds: Sequence[float]) -> float:
    """Median over rounds of ``(seconds[i] - floor_seconds[i]) / floor_seconds[i]``: each
    run's extra time in floors of the same round."""
    median_extra(seconds, floor_seconds)  # the same checks of its input
    if min(floor_seconds) <= 0:
        raise ValueError(f"a floor time must be above 0 s, got {min(floor_seconds)}")
    pairs = zip(seconds, floor_seconds, strict=True)
    return statistics.median((s - f) / f for s, f in pairs)


def allowed_extra(name: str) -> float:
    """The extra time over the floor, in floors, that notebook ``name`` may take."""
    return EXTRA_FLOORS_FOR.get(name, EXTRA_FLOORS)


def within_budget(
    extra_floors: float, peak_mib: float, floor_peak_mib: float, allowed: float = EXTRA_FLOORS
) -> bool:
    """Within ``allowed`` floors of extra wall time (EXTRA_FLOORS unless the notebook has its
    own) and MEMORY_FACTOR x the floor's peak memory."""
    return extra_floors <= allowed and peak_mib <= MEMORY_FACTOR * floor_peak_mib


def summarize(rounds: Sequence[Round]) -> list[Row]:
    """The floor's row, then one row per notebook, from rounds that each measured the floor
    (under ``FLOOR``) and the same notebooks."""
    if not rounds:
        raise ValueError("no rounds measured")
    names = list(rounds[0])
    if FLOOR not in names:
        raise ValueError(f"every round must measure the floor ({FLOOR!r})")
    for number, measured in enumerate(rounds, start=1):
        if set(measured) != set(names):
            raise ValueError(
                f"round {number} measured {sorted(measured)}, round 1 measured {sorted(names)}"
            )
    floor_seconds = [measured[FLOOR]["seconds"] for measured in rounds]
    floor_peak = max(measured[FLOOR]["peak_mib"] for measured in rounds)
    rows = [Row(FLOOR, statistics.median(floor_seconds), 0.0, floor_peak, None)]
    for name in names:
        if name == FLOOR:
            continue
        seconds = [measured[name]["seconds"] for measured in rounds]
        extra = median_extra(seconds, floor_seconds)
        in_floors = median_extra_floors(seconds, floor_seconds)
        peak = max(measured[name]["peak_mib"] for measured in rounds)
        ok = within_budget(in_floors, peak, floor_peak, allowed_extra(name))
        rows.append(Row(name, statistics.median(seconds), extra, peak, ok, in_floors))
    return rows


def all_within(rows: Iterable[Row]) -> bool:
    return all(row.ok is not False for row in rows)


def how_measured(rounds: int, pinned: bool, cores: int = 1) -> str:
    """The line above the table that says how it was measured."""
    if cores > 1:
        taskset = f" (taskset -c 0 to {cores - 1})" if pinned else " (not pinned)"
        where = f"{cores} cores, a round on each at a time{taskset}, one thread"
    else:
        taskset = "one core (taskset -c 0)" if pinned else "one thread (not pinned to a core)"
        where = f"{taskset}, one thread" if pinned else taskset
    plural = "round" if rounds == 1 else "rounds"
    return (
        f"Median of {rounds} {plural} on {where}; each round runs the floor, then each notebook,"
        f" each in a fresh kernel. Extra = the notebook's time minus the floor's in the same round;"
        f" in floors, divided by the floor's time of that round. Budget: extra within"
        f" {EXTRA_FLOORS:g} floors{own_budgets()}, peak memory (max over rounds) within"
        f" {MEMORY_FACTOR:g}x the floor's."
    )


def own_budgets() -> str:
    """The notebooks with a budget of their own, as a parenthesis for the how-measured line."""
    if not EXTRA_FLOORS_FOR:
        return ""
    named = ", ".join(f"{name.split('_')[0]}: {s:g}" for name, s in EXTRA_FLOORS_FOR.items())
    return f" ({named})"


HEADER = (
    "notebook",
    "wall time (s), median",
    "extra over floor (s), median",
    "extra in floors, median",
    "peak memory (MiB), max",
    "within budget",
)


def render(rows: Sequence[Row], rounds: int, pinned: bool, markdown: bool, cores: int = 1) -> str:
    """The table, markdown (for the README) or plain text, under the how-measured paragraph."""
    lines = textwrap.wrap(how_measured(rounds, pinned, cores), width=95)
    if markdown:
        lines += ["", "| " + " | ".join(HEADER) + " |", "|---|---:|---:|---:|---:|---|"]
        for row in rows:
            extra = "—" if row.ok is None else f"{row.extra:.1f}"
            floors = "—" if row.ok is None else f"{row.extra_floors:.2f}"
            verdict = "(reference)" if row.ok is None else ("yes" if row.ok else "**no**")
            lines.append(
                f"| {row.name} | {row.seconds:.1f} | {extra} | {floors} | {row.peak_mib:.0f}"
                f" | {verdict} |"
            )
    else:
        widths = (34, 21, 28, 23, 22)
        lines.append(
            f"{HEADER[0]:<{widths[0]}} {HEADER[1]:>{widths[1]}} {HEADER[2]:>{widths[2]}}"
            f" {HEADER[3]:>{widths[3]}} {HEADER[4]:>{widths[4]}}  {HEADER[5]}"
        )
        for row in rows:
            extra = "-" if row.ok is None else f"{row.extra:.1f}"
            floors = "-" if row.ok is None else f"{row.extra_floors:.2f}"
            verdict = "(reference)" if row.ok is None else ("yes" if row.ok else "NO")
            lines.append(
                f"{row.name:<{widths[0]}} {row.seconds:>{widths[1]}.1f} {extra:>{widths[2]}}"
                f" {floors:>{widths[3]}} {row.peak_mib:>{widths[4]}.0f}  {verdict}"
            )
    return "\n".join(lines)


def select_notebooks(paths: Sequence[Path]) -> list[Path]:
    """The notebooks named (each once, in order), or every course notebook when none is."""
    if not paths:
        return notebook_paths()
    chosen: dict[str, Path] = {}
    for path in paths:
        if path.suffix != ".ipynb":
            raise ValueError(f"not a notebook (.ipynb): {path}")
        if not path.is_file():
            raise ValueError(f"no such notebook: {path}")
        if chosen.setdefault(path.name, path.resolve()) != path.resolve():
            raise ValueError(f"two notebooks named {path.name}: {chosen[path.name]} and {path}")
    return list(chosen.values())


def positive_rounds(text: str) -> int:
    """argparse type for ``--rounds``: an integer of at least 1."""
    try:
        rounds = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if rounds < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {rounds}")
    return rounds


def available_cores(text: str) -> int:
    """argparse type for ``--cores``: from 1 to the cores this process may run on."""
    cores = positive_rounds(text)
    have = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cores > (have or 1):
        raise argparse.ArgumentTypeError(f"this machine gives it {have} core(s), got {cores}")
    return cores


# --- measuring ----------------------------------------------------------------------------


def floor_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(setup_source(repository_url(), "00_setup_check")),
        nbformat.v4.new_code_cell(FLOOR_IMPORTS),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


def measure_here(path: Path) -> dict:
    """Execute one notebook (in this process's only kernel) and measure it."""
    nb = read(path)
    started = time.perf_counter()
    execute(nb, NOTEBOOKS)
    seconds = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the kernel's peak
    return {"seconds": seconds, "peak_mib": peak_kib / 1024}


def pinned() -> bool:
    """Whether child processes are pinned to one core (taskset is available)."""
    return shutil.which("taskset") is not None


def measure(path: Path, core: int = 0) -> dict:
    """Measure ``path`` in a child process pinned to core ``core`` with one thread."""
    env = dict(os.environ, GM_DEVICE="cpu", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("GM_STRICT_CHECKS", None)
    command = [sys.executable, __file__, "--one", str(path)]
    if pinned():
        command = ["taskset", "-c", str(core), *command]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{path.name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_rounds(
    floor_path: Path,
    paths: Sequence[Path],
    rounds: int,
    measure_one: Callable[[Path, int], Measurement],
    log: Callable[[str], None] = lambda line: None,
    cores: int = 1,
) -> list[Round]:
    """``rounds`` rounds, each measuring the floor and then every notebook once, with
    ``measure_one(path, core)``: round k (from 0) on core k mod ``cores``, ``cores`` rounds
    at a time (one thread per core, each measuring its rounds in turn)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    if cores < 1:
        raise ValueError(f"cores must be at least 1, got {cores}")
    measured_rounds: list[Round] = [{} for _ in range(rounds)]

    def measure_on(core: int) -> None:
        for number in range(core, rounds, cores):
            measured = measured_rounds[number]
            for name, path in [(FLOOR, floor_path), *((path.name, path) for path in paths)]:
                measured[name] = result = measure_one(path, core)
                log(
                    f"round {number + 1}/{rounds} (core {core}): {name}: "
                    f"{result['seconds']:.1f} s, {result['peak_mib']:.0f} MiB"
                )

    with ThreadPoolExecutor(max_workers=cores) as pool:
        for done in [pool.submit(measure_on, core) for core in range(min(cores, rounds))]:
            done.result()  # a notebook that failed fails the measurement
    return measured_rounds


def table(paths: Sequence[Path], rounds: int, markdown: bool, cores: int = 1) -> tuple[str, bool]:
    """Measure ``paths`` and the floor in ``rounds`` rounds on ``cores`` cores: the table and
    whether all fit."""
    with tempfile.TemporaryDirectory() as folder:
        floor_path = Path(folder) / "floor.ipynb"
        nbformat.write(floor_notebook(), floor_path)
        measured = run_rounds(
            floor_path,
            paths,
            rounds,
            measure,
            log=lambda line: print(line, file=sys.stderr, flush=True),
            cores=cores,
        )
    rows = summarize(measured)
    return render(rows, rounds, pinned(), markdown, cores), all_within(rows)


def update_readme(text: str, readme: Path = ROOT / "README.md") -> None:
    """Replace the table between the README's speed-table markers."""
    start, end = "<!-- speed-table -->", "<!-- /speed-table -->"
    before, rest = readme.read_text(encoding="utf-8").split(start)
    _, after = rest.split(end)
    readme.write_text(f"{before}{start}\n{text}\n{end}{after}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "paths", nargs="*", type=Path, help="notebooks to measure (default: every one)"
    )
    parser.add_argument(
        "--rounds",
        type=positive_rounds,
        default=DEFAULT_ROUNDS,
        help=f"rounds of floor + notebooks (default {DEFAULT_ROUNDS})",
    )
    parser.add_argument(
        "--cores",
        type=available_cores,
        default=1,
        help="rounds measured at a time, each on a core of its own (default 1: core 0)",
    )
    parser.add_argument("--update-readme", action="store_true", help="write the README's table")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_here(args.one)))
        return 0
    if args.update_readme and args.paths:
        parser.error("--update-readme writes the table of every notebook: name no notebooks")
    try:
        paths = select_notebooks(args.paths)
    except ValueError as error:
        parser.error(str(error))
    text, within = table(paths, args.rounds, markdown=args.update_readme, cores=args.cores)
    print(text)
    if args.update_readme:
        update_readme(text)
    if not within:
        print(
            f"over budget: keep each notebook's extra time within {EXTRA_FLOORS:g} floors"
            f"{own_budgets()} and its peak memory within {MEMORY_FACTOR:g}x the floor's"
        )
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
