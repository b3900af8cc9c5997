"""A launcher that is already running: for a test suite that makes many small multi-process runs.

    python -m helpers.processes.launch_server SOCKET [MODULE ...]

Each ``python -m helpers.processes.launcher`` run starts a fresh interpreter that imports torch
and ``torch._dynamo`` before it forks the ranks: about a CPU-second a run, and a test suite runs
dozens. This server imports the modules named (the launch's ``preload``) once, then forks one
launcher per request, and that launcher forks the ranks as before.
``helpers.processes.run_ranks.launch`` uses it when the environment variable
``GM_LAUNCH_SERVER`` names a folder (tools/shared_launch_server.py sets one for a test
session), on Linux (where the launcher forks its ranks); it starts a server on first use, one
per preload and set of the variables torch reads at import. Nothing else changes: the ranks get
the same environment, output, exit code, process group and stop on a timeout as a launcher
started by ``subprocess.Popen``.

One request per connection (a ``SOCK_SEQPACKET`` Unix socket): the client sends the launcher's
arguments, environment and folder as JSON with the write end of a pipe for the output; the
server answers ``{"pid": ...}``, the forked launcher's process id (a new session, so that one
``killpg`` reaches its ranks), and the launcher itself sends ``{"exit": code}`` when it ends.
The server ends when its socket file is removed, on SIGTERM, or after ``IDLE_SECONDS`` without a
request. It waits for each launcher it forked, and the process that started a server stops and
waits for it when it exits, so that the launches' CPU time is counted where it would be without a
server: in the process that launched them (what ``time python -m pytest`` reports).
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence

# Set to a folder (tools/shared_launch_server.py does, for a test session), launches are forked
# by a server that has imported their preload already.
LAUNCH_SERVER = "GM_LAUNCH_SERVER"
IDLE_SECONDS = 600
# Read when torch is imported, so a server serves only runs that set them as it did.
IMPORT_TIME_VARIABLES = (
    "PYTHONPATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY",
    "CUDA_VISIBLE_DEVICES",
)  # fmt: skip
MESSAGE_BYTES = 1 << 20


def socket_path(folder: str, env: dict[str, str], preload: Sequence[str], cwd: str) -> str:
    """The server's socket in ``folder`` for a run from ``cwd`` with environment ``env`` and
    modules ``preload``: one server per Python, folder, preload and set of the variables torch
    reads at import."""
    variables = [env.get(name) for name in IMPORT_TIME_VARIABLES]
    key = json.dumps([sys.executable, cwd, list(preload), variables])
    return os.path.join(folder, hashlib.sha256(key.encode()).hexdigest()[:16] + ".sock")


# ------------------------------------------------------------------ the server
def _serve_one(connection: socket.socket, listener: socket.socket, base_path: list[str]) -> None:
    """Fork a launcher for the request on ``connection``; the parent answers with its pid."""
    message, fds, _flags, _address = socket.recv_fds(connection, MESSAGE_BYTES, 1)
    if not message or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        return
    request = json.loads(message)
    [output] = fds
    pid = os.fork()
    if pid == 0:  # the launcher: its own session, the request's output, folder and environment
        code = 1
        try:
            listener.close()
            os.setsid()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the launcher sets its own
            os.dup2(output, 1)
            os.dup2(output, 2)
            os.close(output)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            extra = request["env"].get("PYTHONPATH", "").split(os.pathsep)
            sys.path[:] = [request["cwd"], *filter(None, extra), *base_path]
            importlib.invalidate_caches()  # rank programs written since the server started
            from helpers.processes import launcher

            sys.argv = [launcher.__file__, *request["argv"]]
            code = launcher.main(request["argv"])
        except SystemExit as stop:  # argparse's errors, the launcher's stop on SIGTERM
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                connection.send(json.dumps({"exit": code}).encode())
            finally:
                os._exit(code)
    os.close(output)
    connection.send(json.dumps({"pid": pid}).encode())


def serve(path: str, preload: Sequence[str]) -> None:
    """Import ``preload``, listen on ``path`` and fork a launcher per request, until ``path``
    is removed or ``IDLE_SECONDS`` pass without a request."""
    for name in preload:
        importlib.import_module(name)
    importlib.import_module("helpers.processes.launcher")
    here = os.getcwd()
    extra = set(filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    base_path = [entry for entry in sys.path if entry not in extra and entry not in ("", here)]
    signal.signal(signal.SIGTERM, _leave)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path + ".new")
    listener.listen(8)
    os.rename(path + ".new", path)  # clients connect only once it listens
    last = time.monotonic()
    try:
        while os.path.exists(path) and time.monotonic() - last < IDLE_SECONDS:
            _reap()
            if not select.select([listener], [], [], 1.0)[0]:
                continue
            connection, _address = listener.accept()
            with connection:
                try:
                    _serve_one(connection, listener, base_path)
                except OSError:
                    pass  # a client that went away: serve the next
            last = time.monotonic()
    finally:
        _reap(block=True)


def _leave(_signum, _frame) -> None:
    raise SystemExit(0)


def _reap(block: bool = False) -> None:
    """Wait for the launchers that have ended (every one with ``block``): their CPU time then
    counts in this server's, and so in its starter's."""
    while True:
        try:
            pid, _status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# ------------------------------------------------------------------ the client
class ServedLauncher:
    """A launcher forked by the server, read like ``subprocess.Popen`` with ``text=True``:
    ``pid`` (its process group), ``communicate(timeout)`` and ``returncode``."""

    def __init__(
        self, folder: str, argv: list[str], env: dict[str, str], cwd: str, preload: Sequence[str]
    ) -> None:
        self.args = argv
        self.returncode: int | None = None
        self._chunks: list[bytes] = []
        path = socket_path(folder, env, preload, cwd)
        self._connection = _connect(path) or _start(path, env, cwd, preload)
        reading, writing = os.pipe()
        try:
            request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
            socket.send_fds(self._connection, [request], [writing])
        finally:
            os.close(writing)
        self._output = reading
        self._replies: dict[str, int] = {}
        self._receive("pid", timeout=60)
        if "pid" not in self._replies:
            os.close(reading)
            raise OSError(f"the launch server at {path} did not start the launcher")
        self.pid = self._replies["pid"]

    def _receive(self, key: str, timeout: float) -> None:
        """Read the server's and the launcher's replies until one gives ``key``."""
        deadline = time.monotonic() + timeout
        while key not in self._replies:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._connection], [], [], left)[0]:
                return
            message = self._connection.recv(MESSAGE_BYTES)
            if not message:  # the launcher ended without a word: killed by a signal
                self._replies.setdefault("exit", -signal.SIGKILL)
                return
            self._replies.update(json.loads(message))

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        """Everything the launcher and its ranks print, once they have all ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._output is not None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            if not select.select([self._output], [], [], left)[0]:
                continue
            chunk = os.read(self._output, 1 << 16)
            if chunk:
                self._chunks.append(chunk)
            else:  # every writer is gone: the launcher and its ranks have ended
                os.close(self._output)
                self._output = None
        self._receive("exit", timeout=10)
        self._connection.close()
        self.returncode = self._replies.get("exit", -signal.SIGKILL)
        output = b"".join(self._chunks).decode(errors="replace")
        self._chunks = []
        return output, None


def _connect(path: str) -> socket.socket | None:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        client.connect(path)
    except OSError:
        client.close()
        return None
    return client


_STARTED: list[subprocess.Popen] = []  # the servers this process started


def stop_servers() -> None:
    """Stop the servers this process started and wait for them (at exit)."""
    while _STARTED:
        server = _STARTED.pop()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _start(path: str, env: dict[str, str], cwd: str, preload: Sequence[str]) -> socket.socket:
    """Start the server for ``path`` (a detached process) and connect to it."""
    with open(path + ".lock", "w") as lock:  # one start at a time in this folder
        fcntl.flock(lock, fcntl.LOCK_EX)
        connection = _connect(path)
        if connection is not None:  # another process started it meanwhile
            return connection
        server_env = {key: value for key, value in env.items() if key != "GM_LAUNCHER_PID"}
        if not _STARTED:
            atexit.register(stop_servers)
        with open(path + ".log", "w") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "helpers.processes.launch_server", path, *preload],
                cwd=cwd,
                env=server_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        _STARTED.append(server)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            connection = _connect(path)
            if connection is not None:
                return connection
            time.sleep(0.05)
    raise OSError(f"the launch server did not start: see {path}.log")


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
