"""Accumulation as today's training stacks do it, measured on a real process group (gloo).

Run by ``helpers.distributed.run_training_stacks``, ``run_uneven_ranks`` and
``run_static_graph_no_sync`` (through ``helpers.launcher``), or by hand, unchanged::

    torchrun --nproc-per-node=2 -m helpers.stacks_ranks stacks,static_graph --out r.json

Every rank builds the same seeded model and the same global data and takes its own share;
rank 0 writes the results as JSON to ``--out``, ``{program: results}``, after each of the
programs named (run in turn in the same processes: one start-up for all). The programs:

- ``stacks``: token-level loss with unequal token counts per rank (the naive mean, scaling
  each micro-batch's loss by an all-reduced count before the backward, torchtitan's way, and
  backward of the sums with one gradient scaling after the window, torchtune's way); ranks
  with unequal numbers of micro-batches made exact by ``Join`` and made equal by
  ``DistributedSampler``; FSDP2's reduce-scatters per step with and without
  ``set_requires_gradient_sync(False)``; DDP's ``gradient_as_bucket_view=True``.
- ``uneven``: rank 0 runs more synchronized micro-batches than rank 1; the rank left waiting
  in a collective nobody joins is stopped by a short process-group timeout and says why.
- ``static_graph``: DDP ``static_graph=True`` with ``no_sync()``: what the installed torch
  does ("crash", "wrong gradients" or "fixed"), caught inside the ranks.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.data import make_padded_tokens
from helpers.ddp_accumulation import exit_when_orphaned, leave_at_once
from helpers.models import TokenModel

VOCAB = 11
MAX_NORM = 0.05  # below the true gradient norm, so that clipping acts
PAD = -100


# ---------------------------------------------------------------- shared pieces


def token_loss_sum(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor):
    """The sum of the per-token losses (padding, ``-100``, not counted) and the token count."""
    loss = nn.functional.cross_entropy(model(tokens), targets, ignore_index=PAD, reduction="sum")
    return loss, int((targets != PAD).sum())


def grads_of(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


def rel_error(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """``|a - b| / |b|`` over all the gradients flattened together."""
    flat_a, flat_b = torch.cat([x.flatten() for x in a]), torch.cat([x.flatten() for x in b])
    return ((flat_a - flat_b).norm() / flat_b.norm()).item()


def worst_over_ranks(value: float) -> float:
    """The largest of every rank's ``value`` (a collective: every rank must call it)."""
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.item()


def single_process_grads(batches) -> list[torch.Tensor]:
    """One process on ``batches`` (all the data): the mean over every counted token."""
    model = TokenModel(vocab=VOCAB, seed=0)
    total = sum(int((y != PAD).sum()) for _, y in batches)
    for x, y in batches:
        (token_loss_sum(model, x, y)[0] / total).backward()
    return grads_of(model)


def token_windows(world: int, k: int, micro_batch: int, max_length: int, seed: int = 0):
    """The same data on every rank: ``world * k`` micro-batches of padded sequences;
    rank ``r``'s window is global micro-batches ``j * world + r``."""
    n = world * k * micro_batch
    tokens, targets, _ = make_padded_tokens(n, max_length, vocab=VOCAB, seed=seed)
    batches = [
        (tokens[i : i + micro_batch], targets[i : i + micro_batch])
        for i in range(0, n, micro_batch)
    ]
    return batches, [[batches[j * world + r] for j in range(k)] for r in range(world)]


def sync_unless_last(ddp: DDP, j: int, k: int):
    return ddp.no_sync() if j < k - 1 else contextlib.nullcontext()


# ---------------------------------------------------------------- 1. token-level loss


def naive_window(ddp: DDP, window) -> None:
    """Each micro-batch's own token mean, divided by the window's length; DDP averages the
    ranks: wrong when the ranks (or micro-batches) count different numbers of tokens."""
    for j, (x, y) in enumerate(window):
        with ddp.no_sync() if j < len(window) - 1 else contextlib.nullcontext():
            loss = nn.functional.cross_entropy(ddp(x), y, ignore_index=-100)
            (loss / len(window)).backward()


def scale_before_window(ddp: DDP, window) -> int:
    """Scaling before the backward, as torchtitan does since its PR 2206: all-reduce the
    window's token count first; each micro-batch's loss is its token-loss sum times
    ``world / global count`` (the world size cancels DDP's averaging; torchtitan divides by
    the count alone and turns FSDP's averaging off instead)."""
    count = torch.tensor([sum(int((y != -100).sum()) for _, y in window)])
    dist.all_reduce(count)
    for j, (x, y) in enumerate(window):
        with ddp.no_sync() if j < len(window) - 1 else contextlib.nullcontext():
            loss = nn.functional.cross_entropy(ddp(x), y, ignore_index=-100, reduction="sum")
            (loss * dist.get_world_size() / count.item()).backward()
    return count.item()


def scale_after_window(ddp: DDP, window) -> int:
    """torchtune's way (its PRs 1917 and 2172): backward of each micro-batch's token-loss sum (no
    count needed before the first backward), the count all-reduced once while the last
    backward runs, then the gradients scaled once by ``world / global count``, ready for
    clipping."""
    count = torch.zeros(1, dtype=torch.int64)
    for j, (x, y) in enumerate(window):
        last = j == len(window) - 1
        with contextlib.nullcontext() if last else ddp.no_sync():
            loss = nn.functional.cross_entropy(ddp(x), y, ignore_index=-100, reduction="sum")
            count += (y != -100).sum()
            if last:
                pending = dist.all_reduce(count, async_op=True)
            loss.backward()
    pending.wait()
    for p in ddp.parameters():
        p.grad *= dist.get_world_size() / count.item()
    return count.item()


def token_loss_case(rank: int, world: int, k: int, micro_batch: int, max_length: int) -> dict:
    everything, windows = token_windows(world, k, micro_batch, max_length)
    mine = windows[rank]
    reference = single_process_grads(everything)
    counts = [sum(int((y != PAD).sum()) for _, y in window) for window in windows]
    ddp = DDP(TokenModel(vocab=VOCAB, seed=0))
    naive_window(ddp, mine)
    naive = grads_of(ddp.module)
    ddp = DDP(TokenModel(vocab=VOCAB, seed=0))
    global_count = scale_before_window(ddp, mine)
    before = grads_of(ddp.module)
    ddp = DDP(TokenModel(vocab=VOCAB, seed=0))
    scale_after_window(ddp, mine)
    after = grads_of(ddp.module)
    sum_norm = torch.nn.utils.get_total_norm(after).item() * global_count / world
    seen_norm = torch.nn.utils.clip_grad_norm_(ddp.parameters(), MAX_NORM).item()
    true_norm = torch.nn.utils.get_total_norm(reference).item()
    return {
        "tokens_per_rank": counts,
        "global_tokens": global_count,
        "naive_rel_error": worst_over_ranks(rel_error(naive, reference)),
        "scale_before_max_diff": worst_over_ranks(max_diff(before, reference)),
        "scale_after_max_diff": worst_over_ranks(max_diff(after, reference)),
        "scale_after_vs_before_max_diff": worst_over_ranks(max_diff(after, before)),
        "max_norm": MAX_NORM,
        "true_grad_norm": true_norm,
        "norm_clipping_sees": seen_norm,
        "norm_before_scaling": sum_norm,
    }


# ---------------------------------------------------------------- 2. unequal micro-batches


def uneven_windows(counts: list[int], micro_batch: int, max_length: int, seed: int = 1):
    """``sum(counts)`` micro-batches; rank ``r`` takes ``counts[r]`` of them, in turn."""
    n = sum(counts) * micro_batch
    tokens, targets, _ = make_padded_tokens(n, max_length, vocab=VOCAB, seed=seed)
    batches = [
        (tokens[i : i + micro_batch], targets[i : i + micro_batch])
        for i in range(0, n, micro_batch)
    ]
    windows, start = [], 0
    for c in counts:
        windows.append(batches[start : start + c])
        start += c
    return batches, windows


def join_window(ddp: DDP, window, optimizer, divide_by_initial_world_size: bool = True):
    """One optimizer step over this rank's ``window``, whose length differs between ranks,
    every micro-batch synchronized, inside ``Join``: a rank that runs out of micro-batches
    shadows the others' all-reduces with zeros, and when all have joined every rank takes
    the last joiner's weights. Each all-reduce must carry one micro-batch's gradient alone
    (moved into ``accumulated`` after each backward), so that the shadowed zeros add
    nothing; DDP divides by the initial world size; the token-loss sums are scaled once by
    ``world / global count``, counted before ``Join`` (a collective inside it would not be
    shadowed)."""
    from torch.distributed.algorithms import Join

    count = torch.tensor([sum(int((y != -100).sum()) for _, y in window)])
    dist.all_reduce(count)
    accumulated = [torch.zeros_like(p) for p in ddp.parameters()]
    with Join([ddp], divide_by_initial_world_size=divide_by_initial_world_size):
        for x, y in window:
            loss = nn.functional.cross_entropy(ddp(x), y, ignore_index=-100, reduction="sum")
            loss.backward()  # all-reduces this micro-batch's gradient
            for p, total in zip(ddp.parameters(), accumulated, strict=True):
                total += p.grad
                p.grad = None
        for p, total in zip(ddp.parameters(), accumulated, strict=True):
            p.grad = total * dist.get_world_size() / count.item()
        optimizer.step()


def join_accumulating_in_grad(ddp: DDP, window, optimizer) -> None:
    """The same inside ``Join``, but accumulating in ``.grad``: every backward all-reduces the
    accumulated gradient, so a shadowing rank's zeros halve the earlier micro-batches'."""
    from torch.distributed.algorithms import Join

    count = torch.tensor([sum(int((y != -100).sum()) for _, y in window)])
    dist.all_reduce(count)
    with Join([ddp]):
        for x, y in window:
            token_loss_sum(ddp, x, y)[0].backward()
        for p in ddp.parameters():
            p.grad *= dist.get_world_size() / count.item()
        optimizer.step()


def join_case(rank: int, world: int, counts: list[int], micro_batch: int, max_length: int):
    """Unequal numbers of micro-batches per rank, one SGD step, compared with one process on
    all the data (the token mean over every counted token), three ways:

    - ``"join, accumulating in .grad"``: every micro-batch synchronized inside ``Join``. DDP
      all-reduces the accumulated ``.grad``; the rank that ran out shadows the extra
      all-reduce with zeros, so the average halves what the earlier micro-batches gave.
    - ``"join, each micro-batch all-reduced on its own"`` (``divide_by_initial_world_size``
      True, the default, and False): each backward's gradient is moved into an accumulator
      so that every all-reduce carries one micro-batch; with the default division the
      shadowed zeros are exact, and backward of the token-loss sums with one scaling by
      ``world / global count`` gives the single-process gradient on the last rank to join
      (which every rank's weights copy when all have joined). Dividing by the ranks still
      running weighs the extra micro-batch twice.
    - ``"no_sync until each rank's last micro-batch"``: one all-reduce per rank, whatever its
      number of micro-batches: exact without ``Join`` (the model has no buffers to sync).

    The global count is all-reduced before the loop, outside ``Join`` (a collective inside it
    would not be shadowed)."""
    everything, windows = uneven_windows(counts, micro_batch, max_length)
    reference_model = TokenModel(vocab=VOCAB, seed=0)
    total = sum(int((y != PAD).sum()) for _, y in everything)
    for x, y in everything:
        (token_loss_sum(reference_model, x, y)[0] / total).backward()
    reference = grads_of(reference_model)
    torch.optim.SGD(reference_model.parameters(), lr=1.0).step()
    expected = torch.cat([p.detach().flatten() for p in reference_model.parameters()])
    last = max(range(world), key=lambda r: (counts[r], r))  # the last rank to join
    results = {"micro_batches_per_rank": list(counts), "last_joiner": last}
    ways = (
        ("join, accumulating in .grad", True),
        ("join, each micro-batch all-reduced on its own", True),
        ("join, each micro-batch all-reduced on its own, divide by ranks still running", False),
        ("no_sync until each rank's last micro-batch", True),
    )
    for way, divide in ways:
        ddp = DDP(TokenModel(vocab=VOCAB, seed=0))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=1.0)
        if way == "join, accumulating in .grad":
            join_accumulating_in_grad(ddp, windows[rank], optimizer)
        elif way.startswith("join"):
            join_window(ddp, windows[rank], optimizer, divide_by_initial_world_size=divide)
        else:
            scale_after_window(ddp, windows[rank])
            optimizer.step()
        grads = grads_of(ddp.module)  # the step leaves .grad as it was
        weights = torch.cat([p.detach().flatten() for p in ddp.parameters()])
        results[way] = {
            "grad_max_diff_vs_single_process_last_joiner": worst_over_ranks(
                max_diff(grads, reference) if rank == last else 0.0
            ),
            "grad_rel_error_vs_single_process_last_joiner": worst_over_ranks(
                rel_error(grads, reference) if rank == last else 0.0
            ),
            "weights_max_diff_vs_single_process": worst_over_ranks(
                (weights - expected).abs().max().item()
            ),
        }
    return results


def sampler_case(rank: int, world: int, n_sequences: int, micro_batch: int, max_length: int):
    """``DistributedSampler`` over ``n_sequences`` sequences (not a multiple of the world
    size): with padding (repeats sequences) and with ``drop_last=True`` (drops them).
    Each rank's micro-batches come from a ``DataLoader``; every micro-batch synchronized;
    the loss is scaled after with the all-reduced count of the tokens the ranks saw."""
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    tokens, targets, _ = make_padded_tokens(n_sequences, max_length, vocab=VOCAB, seed=2)
    dataset = TensorDataset(tokens, targets)
    reference = single_process_grads([(tokens, targets)])
    results = {}
    for name, drop_last in (("padding", False), ("drop_last", True)):
        sampler = DistributedSampler(
            dataset, num_replicas=world, rank=rank, shuffle=False, drop_last=drop_last
        )
        indices = list(sampler)
        loader = DataLoader(dataset, batch_size=micro_batch, sampler=sampler)
        ddp = DDP(TokenModel(vocab=VOCAB, seed=0))
        local = torch.zeros(1, dtype=torch.int64)
        micro_batches = 0
        for x, y in loader:
            loss, n_tokens = token_loss_sum(ddp, x, y)
            local += n_tokens
            loss.backward()
            micro_batches += 1
        dist.all_reduce(local)
        for p in ddp.parameters():
            p.grad *= world / int(local)
        gathered = [None] * world
        dist.all_gather_object(gathered, {"indices": indices, "micro_batches": micro_batches})
        seen = [i for g in gathered for i in g["indices"]]
        kept = sorted(set(seen))
        exact = single_process_grads([(tokens[seen], targets[seen])])
        results[name] = {
            "sequences": n_sequences,
            "sequences_per_rank": [len(g["indices"]) for g in gathered],
            "micro_batches_per_rank": [g["micro_batches"] for g in gathered],
            "repeated_sequences": len(seen) - len(kept),
            "dropped_sequences": n_sequences - len(kept),
            "rel_error_vs_single_process": worst_over_ranks(
                rel_error(grads_of(ddp.module), reference)
            ),
            "max_diff_vs_one_process_on_what_ranks_saw": worst_over_ranks(
                max_diff(grads_of(ddp.module), exact)
            ),
        }
    return results


# ---------------------------------------------------------------- 3. FSDP2


class TwoBlocks(nn.Module):
    """Two blocks, each sharded as its own FSDP group; the root holds no parameters."""

    def __init__(self, width: int = 16, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.block1 = nn.Sequential(nn.Linear(8, width), nn.Tanh())
            self.block2 = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 4))

    def forward(self, x):
        return self.block2(self.block1(x))


class CollectiveCount(TorchDispatchMode):
    """Counts the c10d collectives that run inside it, by name (``"_reduce_scatter_base_"``,
    ``"allreduce_"``, ...), where every process-group call meets the dispatcher: whichever
    Python function (``reduce_scatter_tensor``, ``reduce_scatter_single``) FSDP calls them
    from."""

    def __init__(self):
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        namespace, _, name = func._schema.name.partition("::")
        if namespace == "c10d":
            self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))

    def reduce_scatters(self) -> int:
        return sum(n for name, n in self.counts.items() if "reduce_scatter" in name)


def held_grad_bytes(model: nn.Module) -> int:
    """Bytes of gradient this rank holds between micro-batches: the sharded ``.grad`` (its
    local shard) plus any unsharded gradient FSDP keeps for the next micro-batch."""
    total = 0
    for p in model.parameters():
        if p.grad is not None:
            local = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
            total += local.numel() * local.element_size()
    for module in model.modules():
        state = getattr(module, "_get_fsdp_state", None)
        group = state()._fsdp_param_group if state is not None else None
        for fsdp_param in getattr(group, "fsdp_params", []) or []:
            unsharded = getattr(fsdp_param, "_unsharded_param", None)
            grad = getattr(unsharded, "grad", None)
            if grad is not None:
                total += grad.numel() * grad.element_size()
            extra = getattr(fsdp_param, "unsharded_accumulated_grad", None)
            if extra is not None:
                total += extra.numel() * extra.element_size()
    return total


def fsdp2_case(rank: int, world: int, k: int, micro_batch: int) -> dict:
    from torch.distributed.fsdp import fully_shard

    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(world * k * micro_batch, 8, generator=generator)
    labels = torch.randn(world * k * micro_batch, 4, generator=generator)
    reference_model = TwoBlocks()
    nn.functional.mse_loss(reference_model(inputs), labels).backward()
    reference = grads_of(reference_model)
    parameters = sum(p.numel() for p in reference_model.parameters())
    mine = [
        (inputs[s : s + micro_batch], labels[s : s + micro_batch])
        for s in ((j * world + rank) * micro_batch for j in range(k))
    ]
    results = {"fsdp_groups_with_parameters": 2, "parameters": parameters}
    for mode in ("sync every micro-batch", "sync on the last only"):
        model = TwoBlocks()
        fully_shard(model.block1)
        fully_shard(model.block2)
        fully_shard(model)
        counter = CollectiveCount()
        held = []
        with counter:
            for j, (x, y) in enumerate(mine):
                if mode == "sync on the last only":
                    model.set_requires_gradient_sync(j == k - 1)
                (nn.functional.mse_loss(model(x), y) / k).backward()
                if j < k - 1:
                    held.append(held_grad_bytes(model))
        grads = [p.grad.full_tensor() for p in model.parameters()]
        results[mode] = {
            "reduce_scatters_per_step": counter.reduce_scatters(),
            "collectives": dict(counter.counts),
            "grad_max_diff_vs_single_process": worst_over_ranks(max_diff(grads, reference)),
            "grad_bytes_held_between_micro_batches": max(held),
        }
    return results


# ---------------------------------------------------------------- 4. gradient_as_bucket_view


def bucket_view_case(rank: int, world: int, k: int, micro_batch: int, max_length: int) -> dict:
    everything, windows = token_windows(world, k, micro_batch, max_length, seed=4)
    mine = windows[rank]
    model = TokenModel(vocab=VOCAB, seed=0)
    buckets: list[tuple[int, int]] = []

    def recording_allreduce(_, bucket):
        buffer = bucket.buffer()
        start = buffer.data_ptr()
        buckets.append((start, start + buffer.numel() * buffer.element_size()))
        return default_hooks.allreduce_hook(None, bucket)

    ddp = DDP(model, gradient_as_bucket_view=True)
    ddp.register_comm_hook(None, recording_allreduce)
    count = torch.tensor([sum(int((y != PAD).sum()) for _, y in mine)])
    dist.all_reduce(count)

    def window():
        for j, (x, y) in enumerate(mine):
            with sync_unless_last(ddp, j, k):
                (token_loss_sum(ddp, x, y)[0] * world / int(count)).backward()

    window()
    grad = model.out.weight.grad
    inside = all(
        any(lo <= p.grad.data_ptr() < hi for lo, hi in buckets) for p in model.parameters()
    )
    try:
        grad.detach_()
        detach_error = ""
    except RuntimeError as error:
        detach_error = str(error).splitlines()[0]
    accumulated = max_diff(grads_of(model), single_process_grads(everything))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    pointers = [p.grad.data_ptr() for p in model.parameters()]
    optimizer.zero_grad(set_to_none=False)
    same_storage = pointers == [p.grad.data_ptr() for p in model.parameters()]
    zeroed = all(bool((p.grad == 0).all()) for p in model.parameters())
    window()  # a second window into the same, zeroed, bucket views
    second = max_diff(grads_of(model), single_process_grads(everything))
    optimizer.zero_grad(set_to_none=True)
    dropped = all(p.grad is None for p in model.parameters())
    return {
        "grad_is_view": grad._base is not None,
        "grad_grad_fn_is_none": grad.grad_fn is None,
        "grads_inside_bucket_buffers": inside,
        "detach_in_place_error": detach_error,
        "zero_grad_set_to_none_false_keeps_storage": same_storage,
        "zero_grad_set_to_none_false_zeroes": zeroed,
        "zero_grad_set_to_none_true_drops_grads": dropped,
        "no_sync_max_diff_vs_single_process": worst_over_ranks(max(accumulated, second)),
    }


# ---------------------------------------------------------------- the programs


def stacks(args, rank: int, world: int) -> dict:
    started = time.perf_counter()
    results = {"world_size": world, "k": args.k, "torch": torch.__version__}
    results["token_loss"] = token_loss_case(rank, world, args.k, args.micro_batch, 12)
    counts = [args.k] + [args.k - 1] * (world - 1)
    results["join"] = join_case(rank, world, counts, args.micro_batch, 12)
    n_sequences = world * args.k * args.micro_batch + 1  # not a multiple of the world size
    results["distributed_sampler"] = sampler_case(rank, world, n_sequences, args.micro_batch, 12)
    results["fsdp2"] = fsdp2_case(rank, world, args.k, args.micro_batch)
    results["bucket_view"] = bucket_view_case(rank, world, args.k, args.micro_batch, 12)
    results["rank_seconds"] = time.perf_counter() - started
    return results


UNEVEN_MESSAGE = (
    "RuntimeError: rank {rank} waited {seconds:g} s in {where}, which no other rank joined. "
    "The ranks ran unequal numbers of micro-batches ({counts}); with DDP synchronizing every "
    "backward that is unequal numbers of gradient all-reduces, so one rank waits in a "
    "collective for ever (here a {seconds:g} s process-group timeout stopped the run). Fixes: "
    "give every rank the same number of micro-batches (DistributedSampler), synchronize "
    "once per window (no_sync() on all but each rank's last micro-batch), or run the loop "
    "inside `with Join([ddp]):` with each micro-batch's gradient all-reduced on its own (moved "
    "out of .grad after its backward)."
)


def uneven(args, rank: int, world: int) -> dict:
    """Rank ``r`` runs ``counts[r]`` synchronized micro-batches, then waits at a barrier
    (say, before saving a checkpoint). One rank is left in a collective nobody joins; the
    DDP model's process group has a ``--collective-timeout`` of a few seconds, so the wait
    ends in an error, which the rank turns into a message in plain words (printed as the
    exception line the launcher quotes, without the traceback, and exit code 1)."""
    counts = [int(c) for c in args.micro_batches.split(",")]
    if len(counts) != world:
        raise ValueError(f"--micro-batches gives {len(counts)} counts for {world} ranks")
    _, windows = uneven_windows(counts, args.micro_batch, 12)
    with open(f"{os.path.dirname(args.out)}/rank{rank}.pid", "w", encoding="utf-8") as file:
        file.write(str(os.getpid()))  # for the caller to check that no rank is left behind
    short = dist.new_group(timeout=datetime.timedelta(seconds=args.collective_timeout))
    dist.barrier()  # the ranks start the loop together: the short timeout counts from here
    if rank == 0:
        with open(f"{os.path.dirname(args.out)}/uneven.started", "w", encoding="utf-8") as file:
            file.write(repr(time.time()))
    ddp = DDP(TokenModel(vocab=VOCAB, seed=0), process_group=short)
    where = "the barrier after the loop"
    try:
        for j, (x, y) in enumerate(windows[rank]):
            where = f"the gradient all-reduce of its micro-batch {j + 1} of {counts[rank]}"
            token_loss_sum(ddp, x, y)[0].backward()
        where = f"the barrier after its {counts[rank]} micro-batches"
        dist.barrier(group=short)  # the end of the epoch: every rank meets here
    except RuntimeError as error:
        if "Timed out" not in str(error) and "Connection closed" not in str(error):
            raise
        shown = ", ".join(f"rank {r}: {c}" for r, c in enumerate(counts))
        message = UNEVEN_MESSAGE.format(
            rank=rank, seconds=args.collective_timeout, where=where, counts=shown
        )
        print(message, file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)
    return {"micro_batches_per_rank": counts}


VERDICTS = ("crash", "wrong gradients", "fixed")


def _static_graph_windows(args, rank: int, world: int, synced_first: bool) -> dict:
    """DDP(static_graph=True), ``args.iterations`` windows of ``args.k`` micro-batches with
    ``no_sync()`` on all but the last (with ``synced_first``, the first window syncs every
    micro-batch); compared, iteration by iteration, with one process on all the data (same
    SGD steps). The verdict is agreed by all ranks."""
    everything, windows = token_windows(world, args.k, args.micro_batch, 12, seed=5)
    mine = windows[rank]
    reference_model = TokenModel(vocab=VOCAB, seed=0)
    model = copy.deepcopy(reference_model)
    reference_opt = torch.optim.SGD(reference_model.parameters(), lr=0.5)
    error, worst, iterations_done = "", 0.0, 0
    group = dist.new_group(timeout=datetime.timedelta(seconds=20))  # a hang would end
    try:
        ddp = DDP(model, static_graph=True, process_group=group)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.5)
        count = sum(int((y != PAD).sum()) for _, y in everything)
        for iteration in range(args.iterations):
            for j, (x, y) in enumerate(mine):
                sync = synced_first and iteration == 0
                with contextlib.nullcontext() if sync else sync_unless_last(ddp, j, args.k):
                    (token_loss_sum(ddp, x, y)[0] * world / count).backward()
            reference_opt.zero_grad()
            for x, y in everything:
                (token_loss_sum(reference_model, x, y)[0] / count).backward()
            worst = max(worst, max_diff(grads_of(model), grads_of(reference_model)))
            optimizer.step()
            reference_opt.step()
            optimizer.zero_grad()
            iterations_done += 1
    except RuntimeError as caught:
        error = str(caught).strip().splitlines()[0]
    gathered = [None] * world
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
    (``"after a synced first window"``, the workaround pytorch/pytorch issue 143580 names)."""
    results = _static_graph_windows(args, rank, world, synced_first=False)
    warmed = _static_graph_windows(args, rank, world, synced_first=True)
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
