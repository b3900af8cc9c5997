"""helpers.processes.launcher: ranks started as torchrun starts them, failures and SIGTERM passed
on, and the DDP program of notebook 06 giving the same counts under the real torchrun."""

import ast
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.processes.launcher import rank_environment
from helpers.processes.run_ranks import free_port

ROOT = Path(__file__).resolve().parents[2]


# Four runs of the launcher's command in one Python process, which imports torch and
# torch._dynamo (what the launcher imports before it forks) once instead of four times: each
# runs helpers.processes.launcher as __main__, with its own arguments, working folder and
# stderr (file descriptor 2, which the forked ranks inherit), and gives the exit status its
# `sys.exit(main())` asks for, and whether a rank was left unreaped.
PROGRAMS = {
    "args": (
        3,
        """
        import os, pathlib, sys
        if __name__ == "__main__":
            rank = os.environ["RANK"]
            pathlib.Path(f"rank{rank}.txt").write_text(
                " ".join([os.environ["WORLD_SIZE"], os.environ["MASTER_PORT"], *sys.argv[1:]])
            )
        """,
    ),
    "exception": (2, "raise ValueError('k must be positive')"),
    "message": (2, "import sys; sys.exit('no data for this rank')"),
    "failing": (
        2,
        """
        import os, pathlib, sys, time
        if os.environ["RANK"] == "1":
            sys.exit(3)
        time.sleep(60)  # rank 0 would wait for rank 1 for ever
        pathlib.Path("rank0 woke up").write_text("")  # unless it was stopped before
        """,
    ),
}

RUN_EACH = """
import json, os, runpy, sys
from helpers.processes.run_ranks import free_port

results = {}
for name, nproc in json.loads(sys.argv[1]).items():
    os.chdir(name)
    sys.argv = ["launcher", f"--nproc={nproc}", f"--port={free_port()}", f"rank_{name}",
                "--flag", "x"]
    with open("stderr.txt", "w") as stderr:
        saved = os.dup(2)
        os.dup2(stderr.fileno(), 2)
        try:
            runpy.run_module("helpers.processes.launcher", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            code = stop.code
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
    try:
        os.waitpid(-1, os.WNOHANG)
        left = True  # a rank still running, or ended and not reaped by the launcher
    except ChildProcessError:
        left = False  # no child process: the launcher reaped every rank
    results[name] = {"code": code, "ranks_left": left}
    os.chdir("..")
print(json.dumps(results))
"""


@pytest.fixture(autouse=True)
def no_launch_server(monkeypatch):
    """The launcher as a notebook starts it, a process of its own: the test session's launch
    servers (tools/shared_launch_server.py) have tests of their own, test_launch_server.py."""
    monkeypatch.setenv("GM_LAUNCH_SERVER", "")


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """Each program in PROGRAMS under the launcher: its exit status, stderr, working folder,
    and whether a rank was left running."""
    folder = tmp_path_factory.mktemp("launcher")
    for name, (_, program) in PROGRAMS.items():
        (folder / f"rank_{name}.py").write_text(textwrap.dedent(program), encoding="utf-8")
        (folder / name).mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(ROOT)]))
    nprocs = json.dumps({name: nproc for name, (nproc, _) in PROGRAMS.items()})
    done = subprocess.run(
        [sys.executable, "-c", RUN_EACH, nprocs],
        env=env, cwd=folder, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.splitlines()[-1])
    return {
        name: SimpleNamespace(
            code=result["code"],
            stderr=(folder / name / "stderr.txt").read_text(),
            folder=folder / name,
            ranks_left=result["ranks_left"],
        )
        for name, result in results.items()
    }


def test_the_environment_is_torchruns():
    assert rank_environment(1, 2, 29500) == {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
    }


def test_every_rank_runs_the_module_as_main_with_its_arguments(launched):
    run = launched["args"]
    assert run.code == 0 and not run.ranks_left, run.stderr
    written = sorted(path.name for path in run.folder.glob("rank*.txt"))
    assert written == ["rank0.txt", "rank1.txt", "rank2.txt"]
    world, port, *args = (run.folder / "rank2.txt").read_text().split()
    assert world == "3" and port.isdigit() and args == ["--flag", "x"]


def test_a_failing_rank_stops_the_others_and_gives_its_exit_code(launched):
    run = launched["failing"]
    assert run.code == 3 and not run.ranks_left  # rank 0 was stopped and reaped
    assert not (run.folder / "rank0 woke up").exists()
    assert "rank 1 exited with code 3" in run.stderr


def test_an_exception_in_a_rank_is_printed_and_fails_the_run(launched):
    run = launched["exception"]
    assert run.code == 1 and not run.ranks_left
    assert "ValueError: k must be positive" in run.stderr


def test_a_rank_leaving_with_a_message_prints_it_and_exits_1(launched):
    run = launched["message"]
    assert run.code == 1 and not run.ranks_left
    assert "no data for this rank" in run.stderr


def test_sigterm_to_the_launcher_ends_every_rank(tmp_path):
    (tmp_path / "rank_program.py").write_text(
        "import os, pathlib, time\n"
        "rank = os.environ['RANK']\n"
        "pathlib.Path(f'part{rank}').write_text(str(os.getpid()))\n"
        "os.replace(f'part{rank}', f'pid{rank}')  # whole: the test reads it while this runs\n"
        "time.sleep(120)\n",
        encoding="utf-8",
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    command = [sys.executable, "-m", "helpers.processes.launcher", "--nproc=2",
    f"--port={free_port()}",
               "rank_program"]  # fmt: skip
    launcher = subprocess.Popen(command, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("pid*"))) < 2:
            assert time.monotonic() < deadline, "the ranks never started"
            time.sleep(0.1)
        pids = [int(path.read_text()) for path in tmp_path.glob("pid*")]
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=60) == 128 + signal.SIGTERM
        for pid in pids:  # reaped by the launcher: no such process any more
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        launcher.kill()
        launcher.wait()


def test_a_bad_process_count_is_refused():
    command = [sys.executable, "-m", "helpers.processes.launcher", "--nproc=0", "--port=1", "m"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--nproc must be at least 1, got 0" in done.stderr


@pytest.mark.skipif(
    not __import__("torch").distributed.is_available(), reason="needs torch.distributed"
)
def test_the_ddp_program_counts_the_same_under_real_torchrun(tmp_path):
    out = tmp_path / "results.json"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
        "--master-addr=127.0.0.1", f"--master-port={free_port()}",
        "-m", "helpers.at_scale.ddp_accumulation", f"--out={out}", "--k=4", "--micro-batch=16",
        "--repeats=1",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), GM_DDP_BACKEND="gloo")
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    buckets = results["buckets"]
    assert results["allreduces_per_step"] == {
        "no_sync": buckets,
        "sync every micro-batch": 4 * buckets,
        "forward outside no_sync": 4 * buckets,
    }
    assert results["allreduce_bytes_per_step"]["no_sync"] == 4 * results["parameters"]
    assert results["weights_max_diff_across_ranks"] == 0.0


@pytest.mark.skipif(
    not __import__("torch").distributed.is_available(), reason="needs torch.distributed"
)
def test_a_rank_waiting_in_a_collective_nobody_joins_is_stopped_and_explained(
    tmp_path, monkeypatch
):
    """Rank 0 all-reduces once more than rank 1, which then waits at a barrier: a 1 s
    process-group timeout ends the wait; launch quotes the error and says what it means,
    in a few seconds, and no rank is left running."""
    from helpers.processes.run_ranks import launch

    (tmp_path / "uneven_program.py").write_text(
        textwrap.dedent(
            """
            import datetime, os, pathlib, sys
            import torch, torch.distributed as dist
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=1))
            rank = dist.get_rank()
            pathlib.Path(sys.argv[1], f"pid{rank}").write_text(str(os.getpid()))
            for _ in range(3 if rank == 0 else 2):
                dist.all_reduce(torch.ones(4))
            dist.barrier()
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    started = time.monotonic()
    with pytest.raises(RuntimeError) as raised:
        launch("uneven_program", [str(tmp_path)], nproc=2, timeout=60, preload=("torch",))
    seconds = time.monotonic() - started
    message = str(raised.value)
    assert "the 2-process run failed" in message
    assert "Timed out" in message or "Connection closed" in message
    assert "a collective, an all-reduce or a barrier, that another rank never joined" in message
    assert seconds < 20
    pids = [int(path.read_text()) for path in tmp_path.glob("pid*")]
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_ranks_still_running_after_one_finished_are_stopped_with_finish_grace(
    tmp_path, monkeypatch
):
    from helpers.processes.run_ranks import launch

    (tmp_path / "late_program.py").write_text(
        "import os, pathlib, sys, time\n"
        "pathlib.Path(sys.argv[1], f'pid{os.environ[\"RANK\"]}').write_text(str(os.getpid()))\n"
        "if os.environ['RANK'] == '0':\n"
        "    time.sleep(60)  # as if waiting in a collective rank 1 never joins\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    started = time.monotonic()
    with pytest.raises(RuntimeError) as raised:
        launch("late_program", [str(tmp_path)], timeout=60, finish_grace=1, preload=())
    assert time.monotonic() - started < 20
    message = str(raised.value)
    assert "rank 1 finished 1 s ago but rank 0 is still running" in message
    assert "waiting in a collective" in message
    pids = [int(path.read_text()) for path in tmp_path.glob("pid*")]
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(ValueError, match="finish_grace must be None or a number"):
        launch("late_program", [], finish_grace=0)


def test_the_launcher_imports_the_preloaded_modules_once_before_the_ranks_fork(
    tmp_path, monkeypatch
):
    """A DDP program's launch preloads torch._dynamo (DDP_PRELOAD); a program that needs no
    torch preloads nothing, and its launch imports no torch."""
    from helpers.processes.run_ranks import DDP_PRELOAD, launch

    (tmp_path / "modules_program.py").write_text(
        "import os, pathlib, sys\n"
        "seen = {name: name in sys.modules for name in ('xml.dom.minidom', 'torch')}\n"
        "pathlib.Path(sys.argv[1], os.environ['RANK']).write_text(repr(seen))\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    for preload in [("xml.dom.minidom",), ()]:
        launch("modules_program", [str(tmp_path)], timeout=60, preload=preload)
        seen = [ast.literal_eval((tmp_path / rank).read_text()) for rank in ("0", "1")]
        assert seen == [{"xml.dom.minidom": bool(preload), "torch": False}] * 2, seen
    assert DDP_PRELOAD == ("torch._dynamo",)
    with pytest.raises(TypeError, match=r"preload takes module names in a tuple"):
        launch("modules_program", [], preload="torch._dynamo")
