"""Gradient accumulation under DistributedDataParallel, measured on a real process group.

Run by ``helpers.at_scale.ddp_runs.run_ddp_accumulation`` (through
``helpers.processes.launcher``), or by
hand under torchrun, unchanged::

    torchrun --nproc-per-node=2 -m helpers.at_scale.ddp_accumulation --out r.json

Every rank builds the same seeded model and the same global data; rank ``r`` takes its own
micro-batches. A DDP communication hook counts the gradient all-reduces (one per bucket per
synchronized backward). Rank 0 writes the results as JSON to ``--out``:

- all-reduces, and the bytes they carried, per optimizer step for a window of ``k``
  micro-batches: with ``no_sync()`` on the first ``k - 1``, without it, and with the forward
  pass outside ``no_sync()`` (the trap);
- the median time per window of each, the three taking turns window by window;
- the largest difference between the accumulated DDP gradient and the single-process
  gradient of the whole global batch, and after one SGD step, between the ranks' weights and
  between them and the single-process weights;
- the loop auditor's codes for a correct two-window loop and for one without ``zero_grad``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.audit import LoopAuditor
from helpers.models import flat_weights, make_mlp
from helpers.processes.rank_runtime import exit_when_orphaned, leave_at_once

WIDTHS = (64, 256, 256, 10)
LR = 0.1


BUCKET_CAP_MB = 0.1  # small buckets, so that the model's gradients travel in several


class AllReduceCounter:
    """Counts the bucket all-reduces of a DDP model (``state`` of :func:`counting_allreduce`),
    the bytes they carried and the distinct buckets."""

    def __init__(self):
        self.calls = 0
        self.bytes = 0
        self.buckets: set[int] = set()


def counting_allreduce(state: AllReduceCounter, bucket):
    """A DDP communication hook: count the all-reduce, then do DDP's default one."""
    state.calls += 1  # one all-reduce of one bucket
    state.bytes += bucket.buffer().numel() * bucket.buffer().element_size()  # floats x 4 bytes
    state.buckets.add(bucket.index())  # a set: its size is the number of buckets
    return default_hooks.allreduce_hook(None, bucket)  # DDP's own all-reduce (the average)


def global_data(world: int, k: int, micro_batch: int, device: torch.device):
    """The same data on every rank: ``world * k`` micro-batches of ``micro_batch`` samples."""
    generator = torch.Generator().manual_seed(1)
    n = world * k * micro_batch
    inputs = torch.randn(n, WIDTHS[0], generator=generator)
    labels = torch.randint(0, WIDTHS[-1], (n,), generator=generator)
    return inputs.to(device), labels.to(device)


def micro_batches(inputs, labels, rank: int, world: int, k: int, micro_batch: int):
    """Rank ``rank``'s ``k`` micro-batches: global micro-batch ``j * world + rank``."""
    out = []
    for j in range(k):
        start = (j * world + rank) * micro_batch
        out.append((inputs[start : start + micro_batch], labels[start : start + micro_batch]))
    return out


def accumulate_window(ddp: DDP, micro_batches) -> None:
    """One window of backward passes, all-reduced once: ``no_sync()`` on all but the last."""
    accumulation_steps = len(micro_batches)
    for j, (inputs, labels) in enumerate(micro_batches):
        last = j == accumulation_steps - 1  # its backward all-reduces the sums
        with contextlib.nullcontext() if last else ddp.no_sync():  # nullcontext: sync on
            loss = F.cross_entropy(ddp(inputs), labels)  # the forward inside the block too
            (loss / accumulation_steps).backward()


def forward_outside_no_sync(ddp: DDP, micro_batches) -> None:
    """:func:`accumulate_window` with the documented trap: each forward runs before
    ``no_sync()`` begins, so every backward all-reduces."""
    accumulation_steps = len(micro_batches)
    for j, (inputs, labels) in enumerate(micro_batches):
        last = j == accumulation_steps - 1
        outputs = ddp(inputs)  # the trap: outside the block
        with contextlib.nullcontext() if last else ddp.no_sync():
            loss = F.cross_entropy(outputs, labels)
            (loss / accumulation_steps).backward()


def sync_every_micro_batch(ddp: DDP, micro_batches) -> None:
    """The window without ``no_sync()``: every backward all-reduces."""
    for inputs, labels in micro_batches:
        (F.cross_entropy(ddp(inputs), labels) / len(micro_batches)).backward()


WINDOWS = {  # the three ways of running a window that the run measures, by name
    "no_sync": accumulate_window,
    "sync every micro-batch": sync_every_micro_batch,
    "forward outside no_sync": forward_outside_no_sync,
}


def audited_windows(ddp: DDP, batches, zero_grad_after_step: bool) -> list[str]:
    """Two windows with ``no_sync()``, each ending in a step, under the loop auditor;
    without ``zero_grad_after_step`` the second window adds to the first one's gradient."""
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR)
    optimizer.zero_grad()  # what the earlier runs left in .grad
    with LoopAuditor(ddp, optimizer, accumulation_steps=len(batches)) as audit:
        for _ in range(2):
            accumulate_window(ddp, batches)  # the window shown above
            optimizer.step()
            if zero_grad_after_step:  # the correct loop; without it, the mistake
                optimizer.zero_grad()
    return audit.codes  # the codes of what the auditor found


def step_like_one_process(ddp: DDP, reference: nn.Module, mine, inputs, labels):
    """One window with ``no_sync()`` on this rank's micro-batches ``mine``, and ``reference``
    (one process, the same starting weights) on the whole global batch; then the same SGD
    step on both. Returns the largest gradient difference, and the weights after the step."""
    ddp.zero_grad()
    accumulate_window(ddp, mine)  # this rank's 4 micro-batches, averaged over ranks
    reference.zero_grad()
    nn.CrossEntropyLoss()(reference(inputs), labels).backward()  # all 256 samples at once
    grad_diff = (flat_grads(ddp.module) - flat_grads(reference)).abs().max()
    for net in (ddp.module, reference):
        torch.optim.SGD(net.parameters(), lr=LR).step()  # the same SGD step on both
    return grad_diff, flat_weights(ddp.module), flat_weights(reference)


def flat_grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def main(argv: list[str] | None = None) -> None:
    exit_when_orphaned()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="JSON file that rank 0 writes")
    parser.add_argument("--k", type=int, default=4, help="micro-batches per optimizer step")
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=15, help="timed windows per mode")
    parser.add_argument("--bucket-cap-mb", type=float, default=BUCKET_CAP_MB, help="DDP's buckets")
    args = parser.parse_args(argv)

    backend = os.environ.get("GM_DDP_BACKEND", "gloo")
    if backend == "nccl":  # one GPU per process, each rank on its own
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group(backend, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)

    model = make_mlp(WIDTHS, seed=0).to(device)
    reference = copy.deepcopy(model)
    ddp = DDP(
        model,
        device_ids=[device.index] if backend == "nccl" else None,
        bucket_cap_mb=args.bucket_cap_mb,
    )
    counter = AllReduceCounter()
    ddp.register_comm_hook(counter, counting_allreduce)
    inputs, labels = global_data(world, args.k, args.micro_batch, device)
    mine = micro_batches(inputs, labels, rank, world, args.k, args.micro_batch)

    sync_every_micro_batch(ddp, mine)  # DDP settles its buckets here
    ddp.zero_grad()
    modes = tuple(WINDOWS)
    allreduces, allreduce_bytes = {}, {}
    for mode in modes:
        ddp.zero_grad()
        calls, sent = counter.calls, counter.bytes
        WINDOWS[mode](ddp, mine)
        allreduces[mode], allreduce_bytes[mode] = counter.calls - calls, counter.bytes - sent
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for repeat in range(args.repeats + 1):  # the modes take turns; the first round warms up
        for mode in modes:
            ddp.zero_grad()
            dist.barrier(device_ids=[device.index] if backend == "nccl" else None)
            started = time.perf_counter()
            WINDOWS[mode](ddp, mine)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if repeat > 0:
                times[mode].append(time.perf_counter() - started)
    ms_per_window = {mode: 1000 * statistics.median(times[mode]) for mode in modes}

    # One window with no_sync, then one step: compare with one process on the global batch.
    grad_diff, weights, single = step_like_one_process(ddp, reference, mine, inputs, labels)
    gathered = [torch.empty_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights)
    across_ranks = max((g - gathered[0]).abs().max().item() for g in gathered)
    grad_diffs = [torch.zeros((), device=device) for _ in range(world)]
    dist.all_gather(grad_diffs, grad_diff.reshape(()))
    vs_single = (weights - single).abs().max().item()
    audit_codes = {
        "correct": audited_windows(ddp, mine, zero_grad_after_step=True),
        "no zero_grad after step": audited_windows(ddp, mine, zero_grad_after_step=False),
    }

    if rank == 0:
        results = {
            "world_size": world,
            "backend": backend,
            "k": args.k,
            "micro_batch": args.micro_batch,
            "effective_batch": world * args.k * args.micro_batch,
            "parameters": sum(p.numel() for p in model.parameters()),
            "buckets": len(counter.buckets),
            "allreduces_per_step": allreduces,
            "allreduce_bytes_per_step": allreduce_bytes,
            "ms_per_window": ms_per_window,
            "grad_max_diff_vs_single_process": max(d.item() for d in grad_diffs),
            "weights_max_diff_across_ranks": across_ranks,
            "weights_max_diff_vs_single_process": vs_single,
            "auditor_codes": audit_codes,
        }
        with open(args.out, "w", encoding="utf-8") as file:
            json.dump(results, file, indent=1)
    dist.destroy_process_group()
    leave_at_once()


if __name__ == "__main__":
    main()
