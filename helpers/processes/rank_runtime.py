"""What every rank program needs to end cleanly: leave when its launcher or the notebook's
kernel is gone, and exit at once when its work is done."""

from __future__ import annotations

import os
import sys
import threading
import time

from helpers.processes.launcher import process_alive


def exit_when_orphaned(interval: float = 0.5) -> None:
    """End this rank if its launcher or the program that started it (``GM_LAUNCHER_PID``, the
    notebook's kernel) dies: a rank runs in its own session, so a kernel killed or restarted
    would otherwise leave it waiting forever."""
    parent = os.getppid()
    launcher = int(os.environ.get("GM_LAUNCHER_PID", "0"))

    def watch():
        while os.getppid() == parent and (not launcher or process_alive(launcher)):
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def leave_at_once() -> None:
    """End a rank that has done its work (after ``destroy_process_group``): DDP's objects torn
    down at interpreter exit sometimes abort a rank ("terminate called without an active
    exception") after all the work is done, so flush and exit with 0 at once."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
