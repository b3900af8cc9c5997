"""Notebook 07's multi-process run, started from the notebook: gradient accumulation under
DistributedDataParallel (:mod:`helpers.at_scale.ddp_accumulation`) on 2 ranks."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from helpers.arguments import positive_int
from helpers.processes.run_ranks import launch


def run_ddp_accumulation(
    nproc: int = 2, k: int = 4, micro_batch: int = 32, repeats: int = 15, timeout: float = 120
) -> dict:
    """Run ``helpers.at_scale.ddp_accumulation`` on ``nproc`` processes; return rank 0's results.

    The results file lives in a temporary folder that is removed afterwards."""
    for value, name in ((k, "k"), (micro_batch, "micro_batch"), (repeats, "repeats")):
        positive_int(value, name)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "results.json"
        args = [f"--out={out}", f"--k={k}", f"--micro-batch={micro_batch}", f"--repeats={repeats}"]
        launch("helpers.at_scale.ddp_accumulation", args, nproc=nproc, timeout=timeout)
        return json.loads(out.read_text(encoding="utf-8"))
