"""A pytest plugin, loaded by the test command (pyproject.toml's addopts): the session's
multi-process launches are forked by launch servers (``helpers.processes.launch_server``).

Each ``helpers.processes.run_ranks.launch`` otherwise starts a fresh interpreter that imports
torch and ``torch._dynamo`` before it forks the ranks: about 1.7 CPU-seconds a launch, and the
test command makes dozens (the capstone's, the training stacks', the DDP runs', notebooks 07 to
09 under nbval). The plugin gives the session a folder for the servers' sockets in
``GM_LAUNCH_SERVER``, which the xdist workers and the notebooks' kernels inherit; ``launch``
starts a server there on first use. The process that made the folder removes it at the end, and
each server ends with it (or when its starter exits, which waits for it).

Linux only (elsewhere the launcher does not fork its ranks). A session started with
``GM_LAUNCH_SERVER`` set keeps it: set it empty to launch every run as a process of its own.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

from helpers.processes.launch_server import LAUNCH_SERVER

_made: list[str] = []  # the folder this process made, if it made one


def pytest_configure(config) -> None:
    if sys.platform.startswith("linux") and LAUNCH_SERVER not in os.environ:
        folder = tempfile.mkdtemp(prefix="gm-launch-")
        _made.append(folder)
        os.environ[LAUNCH_SERVER] = folder


def pytest_unconfigure(config) -> None:
    from helpers.processes.launch_server import stop_servers

    stop_servers()
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)
        del os.environ[LAUNCH_SERVER]
