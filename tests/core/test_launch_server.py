"""helpers.processes.launch_server: a launch forked by a server runs its ranks as a launcher
started by subprocess.Popen does (their environment, output, failures, the stop on a timeout),
one server serves many launches, and the server ends when its folder goes."""

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from helpers.processes import launch_server
from helpers.processes.launcher import process_alive
from helpers.processes.run_ranks import ROOT, launch, launcher_command, start_launcher

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the launcher forks its ranks on Linux only"
)

PROGRAM = """\
import os, sys, time
rank = int(os.environ["RANK"])
folder = sys.argv[1]
with open(f"/proc/{os.getppid()}/stat") as stat:  # the launcher's parent
    grandparent = stat.read().rsplit(") ", 1)[1].split()[1]
with open(os.path.join(folder, f"rank{rank}"), "w") as out:
    out.write(f"{os.getpid()} {grandparent} {os.environ['WORLD_SIZE']} {os.getcwd()}")
if sys.argv[2] == "fail" and rank == 1:
    raise ValueError("rank 1 was told to fail")
if sys.argv[2] == "hang":
    time.sleep(300)
print(f"rank {rank} of {os.environ['WORLD_SIZE']} done", flush=True)
"""


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A folder for this test's own launch servers, a rank program on the path, and at the
    end every server this test started stopped and waited for."""
    folder = tmp_path / "servers"
    folder.mkdir()
    (tmp_path / "served_program.py").write_text(PROGRAM, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv(launch_server.LAUNCH_SERVER, str(folder))
    started = list(launch_server._STARTED)
    monkeypatch.setattr(launch_server, "_STARTED", [])
    yield folder
    launch_server.stop_servers()
    launch_server._STARTED.extend(started)


def ranks(tmp_path: Path) -> list[list[str]]:
    return [(tmp_path / f"rank{rank}").read_text().split(" ", 3) for rank in (0, 1)]


def test_two_launches_share_one_server_that_forks_their_launchers(served, tmp_path):
    outputs = [launch("served_program", [str(tmp_path), "ok"], preload=()) for _ in range(2)]
    for output in outputs:
        assert "rank 0 of 2 done" in output and "rank 1 of 2 done" in output, output
    [server] = launch_server._STARTED
    assert len(list(served.glob("*.sock"))) == 1
    for _pid, grandparent, world, cwd in ranks(tmp_path):  # the last launch's ranks
        assert (int(grandparent), world, cwd) == (server.pid, "2", str(ROOT))


def test_a_failing_rank_fails_the_served_launch_with_its_error(served, tmp_path):
    with pytest.raises(RuntimeError, match=r"exit 1\):\n(.|\n)*ValueError: rank 1 was told"):
        launch("served_program", [str(tmp_path), "fail"], preload=())


def test_a_served_launch_over_time_is_stopped_with_its_ranks(served, tmp_path):
    with pytest.raises(RuntimeError, match="took over 3 s and was stopped"):
        launch("served_program", [str(tmp_path), "hang"], timeout=3, preload=())
    pids = [int(pid) for pid, *_ in ranks(tmp_path)]
    deadline = time.monotonic() + 10
    while any(map(process_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(process_alive, pids)), pids


def test_the_server_ends_when_its_folder_is_gone(served, tmp_path):
    launch("served_program", [str(tmp_path), "ok"], preload=())
    [server] = launch_server._STARTED
    for path in served.iterdir():
        path.unlink()
    assert server.wait(timeout=10) == 0


def test_without_a_server_folder_the_launcher_is_a_process_of_its_own(tmp_path, monkeypatch):
    command = launcher_command("served_program", 2, [str(tmp_path), "ok"], port=1, preload=())
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    for folder in ("", str(tmp_path / "missing")):
        env[launch_server.LAUNCH_SERVER] = folder
        process = start_launcher(command, env, ())
        assert not isinstance(process, launch_server.ServedLauncher)
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


def test_one_server_per_python_folder_preload_and_torch_environment(tmp_path):
    env = {"OMP_NUM_THREADS": "1", "PATH": "/bin"}
    path = launch_server.socket_path(str(tmp_path), env, ("torch._dynamo",), "/repo")
    assert path.startswith(str(tmp_path)) and path.endswith(".sock")
    assert path == launch_server.socket_path(
        str(tmp_path), dict(env, PATH="/usr/bin", GM_LANG="zh_CN"), ("torch._dynamo",), "/repo"
    )  # variables torch does not read at import share a server
    others = [
        launch_server.socket_path(str(tmp_path), dict(env, OMP_NUM_THREADS="2"),
                                  ("torch._dynamo",), "/repo"),
        launch_server.socket_path(str(tmp_path), env, ("torch",), "/repo"),
        launch_server.socket_path(str(tmp_path), env, ("torch._dynamo",), "/copy"),
    ]  # fmt: skip
    assert len({path, *others}) == 4
