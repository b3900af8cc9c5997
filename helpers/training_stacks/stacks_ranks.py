"""Accumulation as today's training stacks do it, measured on a real process group (gloo).

Run by ``helpers.training_stacks.stack_runs.run_training_stacks``, ``run_uneven_ranks`` and
``run_static_graph_no_sync`` (through ``helpers.processes.launcher``), or by hand, unchanged::

    torchrun --nproc-per-node=2 -m helpers.training_stacks.stacks_ranks stacks,static_graph --out
    r.json

Every rank builds the same seeded model and the same global data and takes its own share;
rank 0 writes the results as JSON to ``--out``, ``{program: results}``, after each of the
programs named (run in turn in the same processes: one start-up for all). The programs:

- ``stacks``: token-level loss with unequal token counts per rank (the naive mean, scaling
  each micro-batch's loss by an all-reduced count before the backward, and backward of the
  sums with one gradient scaling after the window); ranks
  with unequal numbers of micro-batches made exact by ``no_sync()`` until each rank's own
  last micro-batch, by ``Join``, and made equal by
  ``DistributedSampler``; FSDP2's reduce-scatters per step with and without
  ``set_requires_gradient_sync(False)``; DDP's ``gradient_as_bucket_view=True``.
- ``uneven``: rank 0 runs more synchronized micro-batches than rank 1; the rank left waiting
  in a collective nobody joins is stopped by a short process-group timeout and says why.
- ``static_graph``: DDP ``static_graph=True`` with ``no_sync()``: what the installed torch
  does ("crash", "wrong gradients" or "fixed"), caught inside the ranks.

The cases live by concern in ``helpers.training_stacks.token_ranks`` (the shared pieces and
the token-loss windows), ``helpers.training_stacks.uneven_ranks`` (Join, DistributedSampler,
the stop) and ``helpers.training_stacks.sharded_grads`` (FSDP2, bucket views); this module runs
them.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.models import TokenModel
from helpers.processes.rank_runtime import exit_when_orphaned, leave_at_once
from helpers.training_stacks.sharded_grads import bucket_view_case, fsdp2_case
from helpers.training_stacks.stacks import max_difference, token_count, token_loss_sum
from helpers.training_stacks.token_ranks import (
    VOCAB,
    grads_of,
    sync_unless_last,
    token_loss_case,
    token_windows,
)
from helpers.training_stacks.uneven_ranks import (
    join_case,
    sampler_case,
    unequal_no_sync_case,
    uneven,
)

# ---------------------------------------------------------------- the programs


def stacks(args, rank: int, world: int) -> dict:
    started = time.perf_counter()
    results = {"world_size": world, "k": args.k, "torch": torch.__version__}
    results["token_loss"] = token_loss_case(rank, world, args.k, args.micro_batch, 12)
    counts = [args.k] + [args.k - 1] * (world - 1)
    results["unequal_micro_batches"] = unequal_no_sync_case(
        rank, world, counts, args.micro_batch, 12
    )
    results["join"] = join_case(rank, world, counts, args.micro_batch, 12)
    n_sequences = world * args.k * args.micro_batch + 1  # not a multiple of the world size
    results["distributed_sampler"] = sampler_case(rank, world, n_sequences, args.micro_batch, 12)
    results["fsdp2"] = fsdp2_case(rank, world, args.k, args.micro_batch)
    results["bucket_view"] = bucket_view_case(rank, world, args.k, args.micro_batch, 12)
    results["rank_seconds"] = time.perf_counter() - started
    return results


VERDICTS = ("crash", "wrong gradients", "fixed")


def static_graph_windows(args, rank: int, world: int, synced_first: bool) -> dict:
    """DDP(static_graph=True), ``args.iterations`` windows of ``args.k`` micro-batches with
    ``no_sync()`` on all but the last (with ``synced_first``, the first window syncs every
    micro-batch); compared, window by window, with one process on all the data (same SGD
    steps). A crash inside a rank is caught; the verdict is agreed by all ranks."""
    everything, windows = token_windows(world, args.k, args.micro_batch, 12, seed=5)
    mine = windows[rank]
    reference_model = TokenModel(vocab=VOCAB, seed=0)  # one process on all the data
    model = copy.deepcopy(reference_model)  # the same starting weights
    reference_opt = torch.optim.SGD(reference_model.parameters(), lr=0.5)
    error, worst, iterations_done = "", 0.0, 0
    group = dist.new_group(timeout=datetime.timedelta(seconds=20))  # a hang would end
    try:
        ddp = DDP(model, static_graph=True, process_group=group)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.5)
        count = sum(int(token_count(y)) for _, y in everything)  # all ranks' data: no all-reduce
        for iteration in range(args.iterations):
            for j, (x, y) in enumerate(mine):  # the accumulation window
                sync = synced_first and iteration == 0  # sync_unless_last: no_sync() but the last
                with contextlib.nullcontext() if sync else sync_unless_last(ddp, j, args.k):
                    (token_loss_sum(ddp, x, y) * world / count).backward()  # as in section 1
            reference_opt.zero_grad()  # one process on every rank's micro-batches
            for x, y in everything:
                (token_loss_sum(reference_model, x, y) / count).backward()
            worst = max(worst, max_difference(grads_of(model), grads_of(reference_model)))
            optimizer.step()
            reference_opt.step()
            optimizer.zero_grad()
            iterations_done += 1
    except RuntimeError as caught:  # the reducer's internal assert
        error = str(caught).strip().splitlines()[0]
    gathered = [None] * world  # every rank's result, so that all agree on one verdict
    dist.all_gather_object(gathered, {"error": error, "worst": worst})
    errors = [g["error"] for g in gathered if g["error"]]
    worst = max(g["worst"] for g in gathered)
    if errors:
        verdict = "crash"
    elif worst > 1e-5:
        verdict = "wrong gradients"
    else:
        verdict = "fixed"
    return {
        "verdict": verdict,
        "error": errors[0] if errors else "",
        "iterations_completed_rank0": iterations_done,
        "grad_max_diff_vs_single_process": worst,
    }


def static_graph(args, rank: int, world: int) -> dict:
    """DDP(static_graph=True) with ``no_sync()`` from the first backward on (an accumulation
    loop's first window), and again after a first window that syncs every micro-batch
    (``"after a synced first window"``, the workaround a pytorch issue names)."""
    results = static_graph_windows(args, rank, world, synced_first=False)
    warmed = static_graph_windows(args, rank, world, synced_first=True)
    return {
        "torch": torch.__version__,
        **results,
        "iterations": args.iterations,
        "after a synced first window": warmed,
    }


PROGRAMS = {"stacks": stacks, "uneven": uneven, "static_graph": static_graph}


def main(argv: list[str] | None = None) -> None:
    exit_when_orphaned()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "programs", help=f"one or more of {', '.join(PROGRAMS)}, joined by commas, run in turn"
    )
    parser.add_argument("--out", required=True, help="JSON file that rank 0 writes")
    parser.add_argument("--k", type=int, default=3, help="micro-batches per optimizer step")
    parser.add_argument("--micro-batch", type=int, default=4, help="sequences per micro-batch")
    parser.add_argument("--micro-batches", default="3,2", help="uneven: per rank, commas")
    parser.add_argument(
        "--accumulation-steps", type=int, default=0, help="uneven: no_sync per window of this many"
    )
    parser.add_argument("--iterations", type=int, default=3, help="static_graph: windows")
    parser.add_argument(
        "--collective-timeout", type=float, default=1.5, help="uneven: seconds a rank waits"
    )
    args = parser.parse_args(argv)
    programs = args.programs.split(",")
    unknown = [name for name in programs if name not in PROGRAMS]
    if unknown:
        parser.error(f"unknown program {unknown[0]!r}: choose from {', '.join(PROGRAMS)}")

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    results = {}
    for name in programs:  # rank 0 writes what it has after each: "uneven" ends the run
        dist.barrier()
        results[name] = PROGRAMS[name](args, rank, world)
        if rank == 0:
            with open(args.out, "w", encoding="utf-8") as file:
                json.dump(results, file, indent=1)
    dist.destroy_process_group()
    leave_at_once()


if __name__ == "__main__":
    main()
