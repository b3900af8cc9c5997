"""tools/measure_notebooks.py: the verdict is relative to the floor measured in the same round,
so a slower or busy machine does not fail a notebook, and a notebook that got slower does.
No notebook is executed here: measurements are made up, the child process is faked."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import measure_notebooks as mn
import pytest
from course import NOTEBOOKS, notebook_paths

FLOOR = mn.FLOOR


def make_rounds(floor, peak=None, **notebooks):
    """Rounds from per-round times: ``make_rounds([2, 2], a=[5, 6])``; peaks as ``peak={...}``."""
    peak = peak or {}
    count = len(floor)
    assert all(len(times) == count for times in notebooks.values())
    return [
        {
            name: {"seconds": times[i], "peak_mib": peak.get(name, [300.0] * count)[i]}
            for name, times in [(FLOOR, floor), *notebooks.items()]
        }
        for i in range(count)
    ]


def verdicts(rounds):
    return {row.name: row.ok for row in mn.summarize(rounds)}


def extras(rounds):
    return {row.name: row.extra for row in mn.summarize(rounds)}


def transform(rounds, change, only_round=None):
    """Apply ``change`` to every time (of one round, or of all)."""
    return [
        {name: {**m, "seconds": change(m["seconds"])} for name, m in measured.items()}
        if only_round in (None, i)
        else measured
        for i, measured in enumerate(rounds)
    ]


def extras_in_floors(rounds):
    return {row.name: row.extra_floors for row in mn.summarize(rounds)}


# A notebook well within budget, one just within, one just over: extra 1.5, 2.45 and 2.6
# floors (the floor's time of the same round), against a budget of 2.5.
FLOORS = [2.0, 2.2, 2.1]
BASE = make_rounds(
    FLOORS,
    fast=[f * 2.5 for f in FLOORS],
    close=[f * 3.45 for f in FLOORS],
    slow=[f * 3.6 for f in FLOORS],
)
BASE_VERDICTS = {FLOOR: None, "fast": True, "close": True, "slow": False}


def test_base_verdicts_follow_the_budget_in_floors():
    assert mn.EXTRA_FLOORS == 2.5
    assert verdicts(BASE) == BASE_VERDICTS
    assert extras_in_floors(BASE)["close"] == pytest.approx(2.45)
    assert extras(BASE)["close"] == pytest.approx(2.1 * 2.45)  # the seconds, shown beside


@pytest.mark.parametrize("factor", [0.6, 1.7, 2.5])
def test_a_machine_slower_or_faster_in_everything_changes_no_verdict(factor):
    """A CPU 1.7 times slower (a CI machine's floor took 3.4 s where the budgets' took 2.0 s,
    and every notebook's extra time grew alike) scales the floor too."""
    other_machine = transform(BASE, lambda s: s * factor)
    assert verdicts(other_machine) == BASE_VERDICTS
    assert extras_in_floors(other_machine) == pytest.approx(extras_in_floors(BASE))


@pytest.mark.parametrize("only_round", [None, 0, 1, 2])
def test_every_run_three_seconds_slower_fails_no_notebook_that_passed(only_round):
    """Time added to every run (a slower start) slows the floor as much: it can only make the
    verdict more lenient."""
    slower = verdicts(transform(BASE, lambda s: s + 3.0, only_round))
    assert all(slower[name] for name, ok in BASE_VERDICTS.items() if ok)


@pytest.mark.parametrize("only_round", [0, 1, 2])
def test_one_round_where_the_notebook_ran_twice_as_slow_changes_no_verdict(only_round):
    rounds = [{name: dict(m) for name, m in measured.items()} for measured in BASE]
    rounds[only_round]["close"]["seconds"] *= 2.0  # a load that hit the notebook, not the floor
    assert verdicts(rounds) == BASE_VERDICTS
    # That round alone, like a single run, would fail the notebook that is within budget.
    assert verdicts([rounds[only_round]])["close"] is False


def test_a_notebook_that_got_slower_fails_on_the_same_machine():
    slower_notebook = transform(BASE, lambda s: s)
    for measured in slower_notebook:
        measured["close"]["seconds"] += 1.0  # half a floor more
    assert verdicts(slower_notebook)["close"] is False


def test_a_notebook_that_got_slower_fails_on_a_slower_machine_too():
    slower_machine = transform(BASE, lambda s: s * 1.7)
    for measured in slower_machine:
        measured["close"]["seconds"] += 1.7
    assert verdicts(slower_machine)["close"] is False


@pytest.mark.parametrize("loaded", [0, 1, 2])
def test_the_median_ignores_one_loaded_round(loaded):
    rounds = transform(BASE, lambda s: s)
    rounds[loaded]["close"]["seconds"] += 20.0  # a load that hit the notebook, not the floor
    assert verdicts(rounds)["close"] is True
    assert extras_in_floors(rounds)["close"] == pytest.approx(2.45)


def test_a_loaded_floor_in_one_round_does_not_pass_a_slow_notebook():
    rounds = transform(BASE, lambda s: s)
    rounds[1][FLOOR]["seconds"] += 20.0  # that round's extra goes very negative
    assert verdicts(rounds)["slow"] is False


def test_two_slow_rounds_of_three_fail():
    rounds = transform(BASE, lambda s: s)
    rounds[1]["close"]["seconds"] += 2.0
    rounds[2]["close"]["seconds"] += 2.0
    assert verdicts(rounds)["close"] is False


def test_extra_is_the_median_of_differences_not_the_difference_of_medians():
    # Differences 3, 3, 6 -> 3; median(nb) - median(floor) would be 8 - 3 = 5.
    assert mn.median_extra([4.0, 8.0, 9.0], [1.0, 5.0, 3.0]) == pytest.approx(3.0)
    assert mn.median_extra([5.0, 9.0], [2.0, 4.0]) == pytest.approx(4.0)  # even: the mean of two
    # In floors: 3/1, 3/5, 6/3 -> 2; (median(nb) - median(floor)) / median(floor) would be 5/3.
    assert mn.median_extra_floors([4.0, 8.0, 9.0], [1.0, 5.0, 3.0]) == pytest.approx(2.0)


def test_rows_report_median_wall_time_and_max_peak_memory():
    rounds = make_rounds(
        [2.0, 9.0, 3.0],
        peak={FLOOR: [270.0, 280.0, 275.0], "nb": [350.0, 420.0, 360.0]},
        nb=[5.0, 6.0, 30.0],
    )
    floor_row, row = mn.summarize(rounds)
    assert (floor_row.name, floor_row.seconds, floor_row.peak_mib, floor_row.ok) == (
        FLOOR,
        3.0,
        280.0,
        None,
    )
    assert (row.name, row.seconds, row.extra, row.peak_mib) == ("nb", 6.0, 3.0, 420.0)
    assert row.extra_floors == pytest.approx(1.5)  # 3/2, -3/9, 27/3


def test_memory_verdict_is_twice_the_floors_peak():
    assert mn.MEMORY_FACTOR == 2.0
    assert mn.within_budget(1.0, 600.0, 300.0)
    assert not mn.within_budget(1.0, 600.5, 300.0)


def test_memory_over_budget_in_one_round_fails_a_fast_notebook():
    rounds = make_rounds(
        [2.0, 2.0, 2.0],
        peak={FLOOR: [300.0] * 3, "nb": [400.0, 650.0, 400.0]},
        nb=[3.0, 3.0, 3.0],
    )
    assert verdicts(rounds)["nb"] is False
    rounds[1]["nb"]["peak_mib"] = 590.0
    assert verdicts(rounds)["nb"] is True


def test_a_notebook_with_its_own_budget_is_judged_by_it_and_only_it():
    name = next(iter(mn.EXTRA_FLOORS_FOR))
    own = mn.EXTRA_FLOORS_FOR[name]
    assert own > mn.EXTRA_FLOORS
    between = (mn.EXTRA_FLOORS + own) / 2
    floor = [2.0, 2.0, 2.0]
    rounds = make_rounds(
        floor, **{name: [2.0 * (1 + between)] * 3, "other.ipynb": [2.0 * (1 + between)] * 3}
    )
    assert verdicts(rounds) == {FLOOR: None, name: True, "other.ipynb": False}
    over = make_rounds(floor, **{name: [2.0 * (1 + own + 0.1)] * 3})
    assert verdicts(over)[name] is False
    assert f"{name.split('_')[0]}: {own:g}" in mn.how_measured(3, pinned=True)


def test_time_verdict_boundary():
    assert mn.within_budget(2.5, 300.0, 300.0)
    assert not mn.within_budget(2.51, 300.0, 300.0)


def test_a_floor_of_no_time_is_refused():
    with pytest.raises(ValueError, match=r"a floor time must be above 0 s, got 0\.0"):
        mn.median_extra_floors([1.0], [0.0])


# --- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "argument --rounds: must be at least 1, got 0"),
        ("-2", "at least 1"),
        ("three", "whole number"),
    ],
)
def test_bad_rounds_is_a_clear_error(value, message, capsys, monkeypatch):
    monkeypatch.setattr(mn, "measure", pytest.fail)  # nothing may be measured
    with pytest.raises(SystemExit) as exit_info:
        mn.main(["--rounds", value])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "argument --cores: must be at least 1, got 0"),
        ("two", "whole number"),
        ("4096", "this machine gives it"),
    ],
)
def test_bad_cores_is_a_clear_error(value, message, capsys, monkeypatch):
    monkeypatch.setattr(mn, "measure", pytest.fail)  # nothing may be measured
    with pytest.raises(SystemExit) as exit_info:
        mn.main(["--cores", value])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_main_measures_on_the_cores_asked_and_says_so(capsys, monkeypatch):
    cores = []

    def fake(path, core=0):
        cores.append(core)
        return {"seconds": 2.0 if path.name == "floor.ipynb" else 3.0, "peak_mib": 300.0}

    monkeypatch.setattr(mn, "available_cores", int)  # a 1-core machine may run this test too
    monkeypatch.setattr(mn, "measure", fake)
    notebook = str(NOTEBOOKS / "00_setup_check.ipynb")
    assert mn.main(["--rounds", "4", "--cores", "2", notebook]) == 0
    assert sorted(cores) == [0] * 4 + [1] * 4
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("Median of 4 rounds on 2 cores, a round on each at a time")


def test_pure_functions_reject_empty_or_mismatched_rounds():
    with pytest.raises(ValueError, match="no rounds"):
        mn.summarize([])
    with pytest.raises(ValueError, match="no rounds"):
        mn.median_extra([], [])
    with pytest.raises(ValueError, match="one floor time per round"):
        mn.median_extra([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="at least 1"):
        mn.run_rounds(Path("floor.ipynb"), [], 0, pytest.fail)
    with pytest.raises(ValueError, match="cores must be at least 1"):
        mn.run_rounds(Path("floor.ipynb"), [], 1, pytest.fail, cores=0)


def test_summarize_rejects_rounds_without_the_floor_or_with_different_notebooks():
    with pytest.raises(ValueError, match="floor"):
        mn.summarize([{"nb": {"seconds": 1.0, "peak_mib": 1.0}}])
    rounds = make_rounds([2.0, 2.0], a=[3.0, 3.0], b=[3.0, 3.0])
    del rounds[1]["b"]
    with pytest.raises(ValueError, match="round 2"):
        mn.summarize(rounds)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["notebooks/99_missing.ipynb"], "no such notebook"),
        (["README.md"], "not a notebook"),
        (["--update-readme", "notebooks/00_setup_check.ipynb"], "name no notebooks"),
    ],
)
def test_bad_notebook_selection_is_a_clear_error(argv, message, capsys, monkeypatch):
    monkeypatch.chdir(NOTEBOOKS.parent)
    monkeypatch.setattr(mn, "measure", pytest.fail)
    with pytest.raises(SystemExit) as exit_info:
        mn.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# --- selection, rounds, output ----------------------------------------------------------


def test_select_notebooks_defaults_to_every_notebook_and_keeps_each_once():
    assert mn.select_notebooks([]) == notebook_paths()
    first, second = notebook_paths()[:2]
    relative = first.relative_to(Path.cwd()) if first.is_relative_to(Path.cwd()) else first
    assert mn.select_notebooks([second, first, relative]) == [second, first]


def test_rounds_interleave_the_floor_with_the_notebooks():
    calls = []

    def fake(path, core):
        calls.append((path.name, core))
        return {"seconds": 1.0, "peak_mib": 1.0}

    floor = Path("floor.ipynb")
    measured = mn.run_rounds(floor, [Path("a.ipynb"), Path("b.ipynb")], 3, fake)
    assert calls == [(name, 0) for name in ["floor.ipynb", "a.ipynb", "b.ipynb"] * 3]
    assert [list(m) for m in measured] == [[FLOOR, "a.ipynb", "b.ipynb"]] * 3


def test_rounds_on_two_cores_run_two_at_a_time_each_on_its_core():
    started = threading.Barrier(2, timeout=10)  # both cores' first runs must overlap
    calls = []

    def fake(path, core):
        if path.name == "floor.ipynb" and not any(c == core for _, c, _ in calls):
            started.wait()
        calls.append((path.name, core, threading.get_ident()))
        return {"seconds": 2.0 + core, "peak_mib": 1.0}

    measured = mn.run_rounds(Path("floor.ipynb"), [Path("a.ipynb")], 3, fake, cores=2)
    names_on = {core: [n for n, c, _ in calls if c == core] for core in (0, 1)}
    assert names_on == {0: ["floor.ipynb", "a.ipynb"] * 2, 1: ["floor.ipynb", "a.ipynb"]}
    assert len({thread for _, _, thread in calls}) == 2
    # round k ran on core k mod 2: rounds 1 and 3 on core 0 (2 s), round 2 on core 1 (3 s)
    assert [m[FLOOR]["seconds"] for m in measured] == [2.0, 3.0, 2.0]


def test_a_notebook_that_fails_on_one_core_fails_the_measurement():
    def fake(path, core):
        if core == 1 and path.name == "a.ipynb":
            raise RuntimeError("a.ipynb failed")
        return {"seconds": 1.0, "peak_mib": 1.0}

    with pytest.raises(RuntimeError, match=r"a\.ipynb failed"):
        mn.run_rounds(Path("floor.ipynb"), [Path("a.ipynb")], 2, fake, cores=2)


def fake_measure(times):
    """A stand-in for ``measure``: the floor takes 2 s, the notebooks ``times`` in turn."""
    calls = []
    remaining = list(times)

    def fake(path, core=0):
        calls.append(path.name)
        seconds = 2.0 if path.name == "floor.ipynb" else remaining.pop(0)
        return {"seconds": seconds, "peak_mib": 300.0}

    return fake, calls


def test_main_measures_only_the_named_notebook_and_prints_the_table(capsys, monkeypatch):
    fake, calls = fake_measure([4.0, 30.0])  # round 2 loaded: median (1 + 14) / 2 = 7.5 floors
    monkeypatch.setattr(mn, "measure", fake)
    code = mn.main(["--rounds", "2", str(NOTEBOOKS / "00_setup_check.ipynb")])
    out = capsys.readouterr().out
    assert calls == ["floor.ipynb", "00_setup_check.ipynb"] * 2
    assert code == 1  # two rounds: the median is the mean, a loaded round counts half
    assert out.startswith("Median of 2 rounds on one")
    assert "extra over floor (s), median" in out
    assert "00_setup_check.ipynb" in out and "NO" in out and "over budget" in out


def test_main_passes_a_notebook_within_budget(capsys, monkeypatch):
    fake, _ = fake_measure([4.0, 30.0, 4.5])  # three rounds: the loaded one is outvoted
    monkeypatch.setattr(mn, "measure", fake)
    assert mn.main([str(NOTEBOOKS / "00_setup_check.ipynb")]) == 0
    assert "over budget" not in capsys.readouterr().out


def test_markdown_table_says_how_it_was_measured_and_fits_the_readme(tmp_path):
    rows = mn.summarize(make_rounds([2.0, 2.0, 2.0], a=[4.0, 4.0, 4.0], b=[9.0, 9.0, 9.0]))
    text = mn.render(rows, 3, pinned=True, markdown=True)
    paragraph, table = text.split("\n\n")
    assert all(len(line) <= 100 for line in paragraph.splitlines())
    paragraph = " ".join(paragraph.splitlines())
    assert paragraph.startswith("Median of 3 rounds on one core (taskset -c 0), one thread")
    assert "within 2.5 floors" in paragraph and "within 2x the floor's" in paragraph
    lines = table.splitlines()
    assert lines[0] == "| " + " | ".join(mn.HEADER) + " |"
    assert lines[1].count("|") == lines[0].count("|")
    assert lines[2:] == [
        f"| {FLOOR} | 2.0 | — | — | 300 | (reference) |",
        "| a | 4.0 | 2.0 | 1.00 | 300 | yes |",
        "| b | 9.0 | 7.0 | 3.50 | 300 | **no** |",
    ]
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- speed-table -->\nold\n<!-- /speed-table -->\nrest\n")
    mn.update_readme(text, readme)
    mn.update_readme(text, readme)  # idempotent
    block = f"<!-- speed-table -->\n{text}\n<!-- /speed-table -->"
    assert readme.read_text() == f"intro\n{block}\nrest\n"


def test_plain_table_marks_a_failing_notebook_and_an_unpinned_run():
    rows = mn.summarize(make_rounds([2.0], a=[9.0]))
    text = mn.render(rows, 1, pinned=False, markdown=False)
    assert text.startswith("Median of 1 round on one thread (not pinned to a core)")
    assert text.splitlines()[-1].split()[-1] == "NO"


# --- the child process --------------------------------------------------------------------


def test_a_failing_notebook_raises_with_its_stderr_tail(monkeypatch):
    stderr = "x" * 5000 + "CellError: cell 3 raised ZeroDivisionError"

    def failed_run(command, **kwargs):
        assert kwargs["env"]["OMP_NUM_THREADS"] == "1" and kwargs["env"]["GM_DEVICE"] == "cpu"
        return subprocess.CompletedProcess(command, 1, stdout="", stderr=stderr)

    monkeypatch.setattr(mn.subprocess, "run", failed_run)
    with pytest.raises(RuntimeError, match=r"05_pitfalls\.ipynb failed") as error:
        mn.measure(NOTEBOOKS / "05_pitfalls.ipynb")
    assert str(error.value).endswith(stderr[-3000:])
    assert "x" * 3001 not in str(error.value)


def test_measure_here_runs_the_notebook_with_run_notebooks_execute(monkeypatch):
    calls = []
    monkeypatch.setattr(mn, "execute", lambda nb, cwd: calls.append((nb, cwd)))
    result = mn.measure_here(NOTEBOOKS / "00_setup_check.ipynb")
    assert len(calls) == 1 and calls[0][1] == NOTEBOOKS and calls[0][0].cells
    assert set(result) == {"seconds", "peak_mib"} and result["seconds"] >= 0


def test_every_notebook_with_a_budget_of_its_own_exists():
    names = {path.name for path in notebook_paths()}
    assert set(mn.EXTRA_FLOORS_FOR) <= names, set(mn.EXTRA_FLOORS_FOR) - names
