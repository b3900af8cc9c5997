"""Ranks with unequal numbers of micro-batches, on a real process group (run inside
``helpers.training_stacks.stacks_ranks``): ``Join`` done four ways, ``DistributedSampler`` padding
or dropping, and the ``uneven`` program whose rank left in a collective nobody joins is stopped by a
short process-group timeout and says why."""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.accumulation import relative_error
from helpers.data import make_padded_tokens
from helpers.models import TokenModel, flat_weights
from helpers.training_stacks.stacks import max_difference, token_count, token_loss_sum
from helpers.training_stacks.token_ranks import (
    VOCAB,
    grads_of,
    scale_before_window,
    single_process_grads,
    worst_over_ranks,
)
from helpers.translation import _


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
    every micro-batch synchronized, inside ``Join``. ``divide_by_initial_world_size=False``
    divides by the ranks still running: the extra micro-batches then weigh too much."""
    from torch.distributed.algorithms import Join

    count = torch.tensor([sum(int(token_count(y)) for _, y in window)])
    dist.all_reduce(count)  # before Join: it shadows only DDP's all-reduces
    accumulated = [torch.zeros_like(p) for p in ddp.parameters()]  # the window's sum
    with Join([ddp], divide_by_initial_world_size=divide_by_initial_world_size):
        # a rank out of micro-batches joins: it adds zeros to the others' all-reduces
        for x, y in window:
            loss = token_loss_sum(ddp, x, y)
            loss.backward()  # all-reduces this micro-batch's gradient
            for p, total in zip(ddp.parameters(), accumulated, strict=True):
                total += p.grad  # kept out of .grad, so the next all-reduce carries
                p.grad = None  # only the next micro-batch
        for p, total in zip(ddp.parameters(), accumulated, strict=True):
            p.grad = total * dist.get_world_size() / count.item()  # once: world / global count
        optimizer.step()  # leaving Join, every rank takes the last joiner's weights


def join_accumulating_in_grad(ddp: DDP, window, optimizer) -> None:
    """The same inside ``Join``, but accumulating in ``.grad``: every backward all-reduces the
    accumulated gradient, so a shadowing rank's zeros halve the earlier micro-batches'."""
    from torch.distributed.algorithms import Join

    count = torch.tensor([sum(int(token_count(y)) for _, y in window)])
    dist.all_reduce(count)  # before Join, as above
    with Join([ddp]):
        for x, y in window:
            token_loss_sum(ddp, x, y).backward()  # all-reduces the whole .grad so far
        for p in ddp.parameters():
            p.grad *= dist.get_world_size() / count.item()
        optimizer.step()


def join_case(rank: int, world: int, counts: list[int], micro_batch: int, max_length: int):
    """Unequal numbers of micro-batches per rank inside ``Join``, one SGD step, compared
    with one process on all the data (the token mean over every counted token), three ways:

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

    The global count is all-reduced before the loop, outside ``Join`` (a collective inside it
    would not be shadowed)."""
    everything, windows = uneven_windows(counts, micro_batch, max_length)
    reference_model = TokenModel(vocab=VOCAB, seed=0)
    reference = single_process_grads(everything, reference_model)
    torch.optim.SGD(reference_model.parameters(), lr=1.0).step()
    expected = flat_weights(reference_model)
    last = max(range(world), key=lambda r: (counts[r], r))  # the last rank to join
    results = {"micro_batches_per_rank": list(counts), "last_joiner": last}
    ways = (
        ("join, accumulating in .grad", True),
        ("join, each micro-batch all-reduced on its own", True),
        ("join, each micro-batch all-reduced on its own, divide by ranks still running", False),
    )
    for way, divide in ways:
        ddp = DDP(TokenModel(vocab=VOCAB, seed=0))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=1.0)
        if way == "join, accumulating in .grad":
            join_accumulating_in_grad(ddp, windows[rank], optimizer)
        else:
            join_window(ddp, windows[rank], optimizer, divide_by_initial_world_size=divide)
        grads = grads_of(ddp.module)  # the step leaves .grad as it was
        weights = flat_weights(ddp.module)
        results[way] = {
            "grad_max_diff_vs_single_process_last_joiner": worst_over_ranks(
                max_difference(grads, reference) if rank == last else 0.0
            ),
            "grad_rel_error_vs_single_process_last_joiner": worst_over_ranks(
                relative_error(grads, reference) if rank == last else 0.0
            ),
            "weights_max_diff_vs_single_process": worst_over_ranks(
                (weights - expected).abs().max().item()
            ),
        }
    return results


def unequal_no_sync_case(rank: int, world: int, counts: list[int], micro_batch: int, max_length):
    """Unequal numbers of micro-batches per rank, without ``Join``: section 1's
    :func:`scale_before_window`, whose ``no_sync()`` lasts until each rank's own last
    micro-batch, so every rank all-reduces its gradients once. Returns each rank's largest
    gradient difference from one process on all the micro-batches."""
    everything, windows = uneven_windows(counts, micro_batch, max_length)
    reference = single_process_grads(everything)
    ddp = DDP(TokenModel(vocab=VOCAB, seed=0))
    scale_before_window(ddp, windows[rank])
    gathered = [None] * world
    dist.all_gather_object(gathered, max_difference(grads_of(ddp.module), reference))
    return {
        "micro_batches_per_rank": list(counts),
        "grad_max_diff_vs_one_process_per_rank": gathered,
    }


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
        indices = list(sampler)  # this rank's share: equal lengths on every rank
        loader = DataLoader(dataset, batch_size=micro_batch, sampler=sampler)
        ddp = DDP(TokenModel(vocab=VOCAB, seed=0))
        local = torch.zeros(1, dtype=torch.int64)
        micro_batches = 0
        for x, y in loader:  # the window: every backward synchronized
            loss = token_loss_sum(ddp, x, y)
            local += token_count(y)
            loss.backward()
            micro_batches += 1
        dist.all_reduce(local)  # then scaled after, as in section 3
        for p in ddp.parameters():
            p.grad *= world / int(local)
        # what each rank saw, to compare with one process on the same sequences
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
                relative_error(grads_of(ddp.module), reference)
            ),
            "max_diff_vs_one_process_on_what_ranks_saw": worst_over_ranks(
                max_difference(grads_of(ddp.module), exact)
            ),
        }
    return results


# ---------------------------------------------------------------- the stop


def stop_words(
    rank: int,
    counts: list[int],
    seconds: float,
    micro_batch: int | None = None,
    accumulation_steps: int | None = None,
) -> tuple[str, str]:
    """What rank ``rank``, stopped by a ``seconds``-second process-group timeout, says:
    ``(message, explanation)``, in the language of the messages. The message is the exception
    line (``RuntimeError: rank ... waited ... in ...``, one line) and ends with the
    explanation, which says why it waited (the ranks' unequal numbers of micro-batches,
    ``counts``) and how to fix it. ``micro_batch``: the micro-batch whose gradient all-reduce it
    waited in (counted from 1), or None for the barrier after its last. With
    ``accumulation_steps`` the ranks synchronized once per window of that many micro-batches,
    and the why is their unequal numbers of windows."""
    if micro_batch is None:
        where = _("the barrier after its {n} micro-batches").format(n=counts[rank])
    else:
        where = _("the gradient all-reduce of its micro-batch {index} of {n}").format(
            index=micro_batch, n=counts[rank]
        )
    shown = _(", ").join(
        _("rank {rank}: {count}").format(rank=r, count=c) for r, c in enumerate(counts)
    )
    if accumulation_steps is not None:
        windows = _(", ").join(
            _("rank {rank}: {count}").format(rank=r, count=-(-c // accumulation_steps))
            for r, c in enumerate(counts)
        )
        explanation = _(
            "The ranks ran unequal numbers of windows of {k} micro-batches ({windows}; "
            "micro-batches {counts}); with no_sync() on all but each window's last that is "
            "unequal numbers of gradient all-reduces, so one rank waits in a collective for "
            "ever (here a {seconds:g} s process-group timeout stopped the run). Fix: give "
            "every rank the same number of micro-batches, or at least of windows."
        ).format(k=accumulation_steps, windows=windows, counts=shown, seconds=seconds)
    else:
        explanation = _(
            "The ranks ran unequal numbers of micro-batches ({counts}); with DDP synchronizing "
            "every backward that is unequal numbers of gradient all-reduces, so one rank waits "
            "in a collective for ever (here a {seconds:g} s process-group timeout stopped the "
            "run). Fix: give every rank the same number of micro-batches, or synchronize once "
            "per window (no_sync() on all but each rank's own last micro-batch) while every "
            "rank runs the same number of windows."
        ).format(counts=shown, seconds=seconds)
    message = "RuntimeError: " + _(
        "rank {rank} waited {seconds:g} s in {where}, which no other rank joined. {explanation}"
    ).format(rank=rank, seconds=seconds, where=where, explanation=explanation)
    return message, explanation


def sync_every_micro_batch(ddp: DDP, window, group) -> None:
    """One rank's epoch with every backward synchronized (no ``no_sync()``): one gradient
    all-reduce per micro-batch, then a barrier that every rank must reach (before saving a
    checkpoint, say). Ranks with unequal numbers of micro-batches never meet again."""
    for x, y in window:
        token_loss_sum(ddp, x, y).backward()  # DDP all-reduces the gradient here
    dist.barrier(group=group)  # the end of the epoch: every rank meets here


def accumulate_in_windows(ddp: DDP, micro_batches, accumulation_steps: int, group) -> None:
    """One rank's epoch in windows of ``accumulation_steps``, ``no_sync()`` on all but each
    window's last micro-batch: one gradient all-reduce per window, then the barrier. Ranks
    with unequal numbers of windows never meet again."""
    for start in range(0, len(micro_batches), accumulation_steps):
        window = micro_batches[start : start + accumulation_steps]
        for j, (x, y) in enumerate(window):
            with contextlib.nullcontext() if j == len(window) - 1 else ddp.no_sync():
                token_loss_sum(ddp, x, y).backward()  # the last one all-reduces
    dist.barrier(group=group)


def uneven(args, rank: int, world: int) -> dict:
    """Rank ``r`` runs :func:`sync_every_micro_batch` on ``counts[r]`` micro-batches (with
    ``--accumulation-steps``, :func:`accumulate_in_windows`). One
    rank is left in a collective nobody joins; the DDP model's process group has a
    ``--collective-timeout`` of a few seconds, so the wait ends in an error, which the rank
    turns into a message in plain words (printed as the exception line the launcher quotes,
    without the traceback, and exit code 1)."""
    counts = [int(c) for c in args.micro_batches.split(",")]
    if len(counts) != world:
        raise ValueError(
            _("--micro-batches gives {n_counts} counts for {world} ranks").format(
                n_counts=len(counts), world=world
            )
        )
    _sizes, windows = uneven_windows(counts, args.micro_batch, 12)
    with open(f"{os.path.dirname(args.out)}/rank{rank}.pid", "w", encoding="utf-8") as file:
        file.write(str(os.getpid()))  # for the caller to check that no rank is left behind
    short = dist.new_group(timeout=datetime.timedelta(seconds=args.collective_timeout))
    dist.barrier()  # the ranks start the loop together: the short timeout counts from here
    if rank == 0:
        with open(f"{os.path.dirname(args.out)}/uneven.started", "w", encoding="utf-8") as file:
            file.write(repr(time.time()))
    ddp = DDP(TokenModel(vocab=VOCAB, seed=0), process_group=short)
    forwards: list[int] = []  # which micro-batch the rank is in, for its message
    ddp.module.register_forward_pre_hook(lambda *_: forwards.append(1))
    k = args.accumulation_steps or None
    try:
        if k is None:
            sync_every_micro_batch(ddp, windows[rank], short)
        else:
            accumulate_in_windows(ddp, windows[rank], k, short)
    except RuntimeError as error:
        if "Timed out" not in str(error) and "Connection closed" not in str(error):
            raise
        frames = [frame.name for frame in traceback.extract_tb(error.__traceback__)]
        at = None if "barrier" in frames else len(forwards)
        message, explanation = stop_words(rank, counts, args.collective_timeout, at, k)
        # the explanation on its own, for the caller to show (in any language)
        with open(
            f"{os.path.dirname(args.out)}/rank{rank}.explanation", "w", encoding="utf-8"
        ) as file:
            file.write(explanation)
        sys.stdout.flush()
        sys.stderr.flush()
        # One write, so that a rank's words stay on a line of their own: when both ranks time
        # out at once, print()'s two writes (the text, then the newline) could interleave
        # with the other rank's into one line. A pipe keeps a write under PIPE_BUF whole.
        os.write(sys.stderr.fileno(), (message + "\n").encode())
        os._exit(1)
    return {"micro_batches_per_rank": counts}
