"""Notebook 09's capstone: one training function with everything at once, run on 2 real
DDP processes and compared with one process on the whole batch.

The setting (the same for the learner's function and the course's reference):

- each of ``WORLD`` ranks holds ``MICRO_BATCHES`` micro-batches of padded token sequences
  (targets ``-100`` past each sequence's end), of uneven sizes, so that the ranks' token
  counts differ in every window; windows of ``K`` micro-batches, the last one short;
- the window's loss is the sum of its token losses over both ranks divided by its count of
  non-padding tokens over both ranks (all-reduced), times the world size (DDP averages);
- bfloat16 autocast with a ``GradScaler``; one micro-batch of window 2 (on rank 1) has
  infinite logits, as an fp16 overflow: a correct loop skips that window's step and the
  scale halves;
- the accumulated gradient is unscaled and clipped to ``MAX_NORM``; a ``StepLR`` steps once
  per window, the skipped one included.

The rank program (``python -m helpers.capstone.capstone_run``, started by :func:`run_capstone`
through ``helpers.processes.launcher``) imports the learner's function from a file, runs it under
the loop auditor with spies on the GradScaler, the optimizer and DDP's all-reduces, and rank 0
writes what it saw as JSON. :func:`run_capstones` judges several functions in one launch (the
rank program's ``--batch``), for the course's tests. :func:`reference_run` computes the
single-process reference, and the same loop with one of :data:`VARIANTS`' mistakes, so that
a checker can name a mistake by the weights it gives.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from helpers.learner_code import function_source
from helpers.models import TokenModel, flat_weights
from helpers.spies import ClipSpy, ScalerSpy
from helpers.training_stacks import stacks
from helpers.training_stacks.stacks import PAD
from helpers.translation import N_, _

WORLD = 2
K = 3  # micro-batches per window: 10 micro-batches make windows of 3, 3, 3 and 1
MICRO_BATCHES = 10  # per rank
VOCAB = 11
MAX_NORM = 0.3
OVERFLOW = (1, 4)  # (rank, micro-batch): window 2's second micro-batch on rank 1 overflows

# What the learner's module starts with: the names the exercise says are there.
PREAMBLE = """\
from __future__ import annotations  # annotations naming the notebook's classes stay text

import contextlib
import math

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

"""
# Marked with N_: the checker translates it where it shows it.
PREAMBLE_NAMES = N_("torch, nn, F, dist (torch.distributed), contextlib and math")


def preamble_bindings(preamble: str = PREAMBLE) -> tuple[str, ...]:
    """The names ``preamble``'s imports bind (``from __future__`` binds none), in order: what
    the learner's function may use without importing it (the exercise's text lists them)."""
    names = []
    for node in ast.parse(preamble).body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [alias.asname or alias.name.split(".")[0] for alias in node.names]
    return tuple(names)


# ------------------------------------------------------------------ the setting
def capstone_data(rank: int, world: int = WORLD) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Rank ``rank``'s ``MICRO_BATCHES`` micro-batches ``(tokens, targets)``: 1 to 4
    sequences of up to 3 to 8 positions each, targets ``-100`` past each sequence's end."""
    if not 0 <= rank < world:
        raise ValueError(
            _("rank must be in 0..{value}, got {rank}").format(value=world - 1, rank=rank)
        )
    generator = torch.Generator().manual_seed(100 + rank)
    batches = []
    for _batch in range(MICRO_BATCHES):
        rows = int(torch.randint(1, 5, (), generator=generator))
        length = int(torch.randint(3, 9, (), generator=generator))
        tokens = torch.randint(0, VOCAB, (rows, length), generator=generator)
        targets = torch.randint(0, VOCAB, (rows, length), generator=generator)
        ends = torch.randint(1, length + 1, (rows,), generator=generator)
        targets[torch.arange(length) >= ends[:, None]] = PAD
        batches.append((tokens, targets))
    return batches


def window_slices(n: int, k: int = K) -> list[range]:
    """The micro-batch indices of each window: ``k`` at a time, the last window short."""
    return [range(start, min(start + k, n)) for start in range(0, n, k)]


def make_model() -> nn.Module:
    """The seeded model every rank (and the reference) starts from."""
    return TokenModel(vocab=VOCAB, width=8, seed=0)


def make_tools(model: nn.Module):
    """The optimizer, scheduler and scaler of every capstone run."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    # StepLR multiplies the learning rate by gamma at each scheduler.step(): once per window
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=4096.0)  # PyTorch's default: 65,536
    return optimizer, scheduler, scaler


def add_overflow(model: nn.Module, tokens: torch.Tensor):
    """Make the logits of the micro-batch ``tokens`` infinite (an fp16-style overflow) every
    time ``model`` runs on it; returns the hook's handle."""

    def hook(_module, args, output):
        inputs = args[0] if args else None
        if isinstance(inputs, torch.Tensor) and inputs.shape == tokens.shape:
            if torch.equal(inputs, tokens):
                return output * float("inf")
        return output

    return model.register_forward_hook(hook)


def token_count(targets: torch.Tensor) -> int:
    """:func:`helpers.training_stacks.stacks.token_count` (the micro-batch's non-padding tokens) as
    an int, to add up and print."""
    return int(stacks.token_count(targets))


# ------------------------------------------------------------------ the reference
# Each mistake's hint (marked with N_: the checker translates it and fills in max_norm).
VARIANTS = {
    "correct": "",
    "micro-batch mean / window": N_(
        "Do the window's micro-batches hold the same number of tokens? Each micro-batch's mean "
        "token loss was divided by the number of micro-batches in the window (and DDP averaged "
        "the ranks): a micro-batch with few tokens weighs as much as one with many. Sum the "
        "token losses and divide by the window's count of non-padding tokens."
    ),
    "micro-batch mean / k": N_(
        "What does the short last window hold? Each micro-batch's mean token loss was divided by "
        "accumulation_steps: the micro-batches weigh the same whatever their tokens, and the "
        "short last window gets only its share of k. Sum the token losses and divide by the "
        "window's count of non-padding tokens."
    ),
    "local tokens": N_(
        "Do the two ranks count the same tokens? Each rank divided its token losses by its own "
        "window's token count: "
        "the ranks' counts differ, and DDP's average of the two means is not the mean over all "
        "tokens. All-reduce the window's token count (dist.all_reduce) and divide by the total."
    ),
    "no world factor": N_(
        "What does DDP do to the gradients after your division? The token count was "
        "all-reduced, but DDP also averages the "
        "gradients over the 2 processes: the step got half the mean gradient. Multiply the loss "
        "by dist.get_world_size() (what the Trainer does with average_tokens_across_devices)."
    ),
    "micro-batch tokens": N_(
        "Is every micro-batch of a window divided by the same count? Each micro-batch was "
        "divided by its own token count (all-reduced) "
        "and by the number of micro-batches: divide the window's summed token losses by the "
        "window's token count, the same for all its micro-batches."
    ),
    "no last window": N_(
        "Is the short last window stepped? The short last window (1 micro-batch) was never "
        "stepped: windows of "
        "accumulation_steps micro-batches, then the rest (range(0, len(micro_batches), k))."
    ),
    "loss in bfloat16": N_(
        "Where is the loss computed? The weights are close to the right ones, but rounded: the "
        "loss was computed from the "
        "bfloat16 logits outside autocast, where cross_entropy keeps bfloat16's 8 significant "
        "bits. Compute it inside the `with torch.autocast(...)` block, which runs "
        "cross_entropy in float32, or from logits.float()."
    ),
    "no clip": N_(
        "Is the gradient clipped at max_norm={max_norm:g}? It was clipped at the wrong norm, or "
        "not at all: clip the unscaled "
        "gradient to max_norm={max_norm:g}, clip_grad_norm_(model.parameters(), {max_norm:g}) "
        "once per window, after scaler.unscale_(optimizer)."
    ),
}


def reference_run(variant: str = "correct") -> dict:
    """One process trains on every micro-batch of both ranks, window by window, with the
    window's loss divided by the window's token count over both ranks: what 2 DDP processes
    must reproduce. Another ``variant`` (a key of :data:`VARIANTS`) makes one mistake.
    Returns the final ``weights``, the ``lrs`` each step used (a skipped step has none) and
    the ``scale`` after each window."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    data = [capstone_data(rank) for rank in range(WORLD)]
    model = make_model()
    optimizer, scheduler, scaler = make_tools(model)
    handle = add_overflow(model, data[OVERFLOW[0]][OVERFLOW[1]][0])  # window 2, on rank 1
    lrs, scales = [], []  # the learning rate of each step taken (not of a skipped one)
    optimizer.register_step_pre_hook(lambda o, *_: lrs.append(o.param_groups[0]["lr"]))
    slices = window_slices(MICRO_BATCHES)
    if variant == "no last window":  # a mistake: the short last window never stepped
        slices = slices[:-1]
    for window in slices:
        counts = [sum(token_count(data[r][i][1]) for i in window) for r in range(WORLD)]
        optimizer.zero_grad()
        for rank in range(WORLD):  # both ranks' micro-batches, on this one process
            for i in window:
                tokens, targets = data[rank][i]
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    logits = model(tokens)
                # the loss in float32, as autocast would compute it inside its block (a
                # mistake: from the bfloat16 logits, outside autocast)
                scores = logits if variant == "loss in bfloat16" else logits.float()
                summed = F.cross_entropy(scores, targets, ignore_index=PAD, reduction="sum")
                loss = micro_batch_loss(variant, summed, counts, rank, window, data, i)
                scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if variant != "no clip":  # a mistake: no clipping
            nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        scaler.step(optimizer)  # skipped for window 2: its gradients are not finite
        scaler.update()
        scales.append(scaler.get_scale())
        scheduler.step()  # once per window, the skipped one included
    handle.remove()
    return {"weights": flat_weights(model), "lrs": lrs, "scales": scales}


def micro_batch_loss(variant: str, summed, counts, rank: int, window, data, i: int):
    """The loss of micro-batch ``i`` of ``rank`` in :func:`reference_run`, from ``summed``
    (its summed token loss) and ``counts`` (each rank's tokens in the window). A mistake is
    made the way 2 ranks would: each rank's loss divided by the world size, as DDP's average
    of the 2 ranks' gradients does."""
    mean = summed / max(token_count(data[rank][i][1]), 1)  # the micro-batch's mean token loss
    if variant == "micro-batch mean / window":  # every micro-batch weighs the same
        return mean / len(window) / WORLD
    if variant == "micro-batch mean / k":  # the same, and the short window gets 1/K of it
        return mean / K / WORLD
    if variant == "local tokens":  # each rank divides by its own window's tokens
        return summed / counts[rank] / WORLD
    if variant == "no world factor":  # the right count, but DDP's average halves the step
        return summed / sum(counts) / WORLD
    if variant == "micro-batch tokens":  # each micro-batch by its own tokens (both ranks)
        return summed / (WORLD * _global_micro_tokens(data, i)) / len(window)
    return summed / sum(counts)  # correct: the window's token losses / its tokens on both ranks


def _global_micro_tokens(data, i: int) -> int:
    """Micro-batch ``i``'s token count summed over the ranks."""
    return sum(token_count(data[r][i][1]) for r in range(WORLD))


# ------------------------------------------------------------------ the learner's source


# ------------------------------------------------------------------ the rank program
def _learner_function(path: str, name: str) -> Callable:
    import importlib.util

    spec = importlib.util.spec_from_file_location("learner_capstone", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _train(source: str, name: str, rank: int, world: int) -> tuple[torch.Tensor | None, dict]:
    """Run the learner's function ``name`` from the file ``source`` on this rank, on a fresh
    model, optimizer, scheduler and scaler, under the loop auditor and the spies. Returns
    ``(final weights, what was seen)``, or ``(None, the error report)`` when it raised."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from helpers.at_scale.ddp_accumulation import AllReduceCounter, counting_allreduce
    from helpers.audit import LoopAuditor
    from helpers.checks import NONE_IN_THE_CAPSTONE, LearnerCodeError, call_learner

    model = make_model()
    ddp = DDP(model)
    counter = AllReduceCounter()
    ddp.register_comm_hook(counter, counting_allreduce)
    ddp_forwards = []  # the DDP model's own forward passes (not model.module's)
    ddp.register_forward_pre_hook(lambda *_: ddp_forwards.append(1))
    optimizer, scheduler, scaler = make_tools(ddp)
    spy = ScalerSpy(scaler, optimizer)
    lrs: list[float] = []
    optimizer.register_step_pre_hook(lambda o, *_: lrs.append(o.param_groups[0]["lr"]))
    data = capstone_data(rank, world)
    if rank == OVERFLOW[0]:
        add_overflow(model, data[OVERFLOW[1]][0])
    try:  # the clip spy first: the learner's module may import clip_grad_norm_ by name
        with ClipSpy() as clips:
            train = call_learner(_learner_function, source, name)
            with LoopAuditor(ddp, optimizer, accumulation_steps=K, scaler=scaler) as audit:
                call_learner(
                    train,
                    ddp,
                    optimizer,
                    scheduler,
                    scaler,
                    data,
                    K,
                    meanings=NONE_IN_THE_CAPSTONE,
                )
    except LearnerCodeError as error:
        return None, {"error": str(error), "kind": type(error.error).__name__, "calls": spy.calls}
    return flat_weights(model), {
        "findings": [[f.code, f.message] for f in audit.findings],
        "calls": spy.calls,
        "max_norms": clips.norms,
        "lrs": lrs,
        "scale": scaler.get_scale(),
        "allreduces": counter.calls,
        "ddp_forwards": len(ddp_forwards),
        "buckets": len(counter.buckets),
    }


def _gather_results(weights: torch.Tensor, seen: dict, held: list) -> dict:
    """Rank 0's results: its weights, the largest difference from another rank's, and what
    it saw (a collective: every rank calls it).

    The all-gather's tensors go into ``held``, which the caller keeps until it has destroyed
    the process group: gloo's worker thread frees its finished work a moment after the work
    completes, and if Python had dropped those tensors by then, freeing them needs the GIL,
    which ``destroy_process_group`` holds while it joins that thread (a deadlock, seen on
    torch 2.4.0 about once in 25 runs)."""
    import torch.distributed as dist

    gathered = [torch.empty_like(weights) for _ in range(dist.get_world_size())]
    held += [weights, *gathered]
    dist.all_gather(gathered, weights)
    across = max((g - weights).abs().max().item() for g in gathered)
    return {"weights": weights.tolist(), "across_ranks": across, **seen}


def main(argv: list[str] | None = None) -> None:
    import gc

    import torch.distributed as dist

    from helpers.processes.rank_runtime import exit_when_orphaned, leave_at_once

    exit_when_orphaned()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--source", required=True, action="append", help="file that defines the function"
    )
    parser.add_argument("--name", required=True, action="append", help="the function's name")
    parser.add_argument("--out", required=True, help="folder for the results")
    parser.add_argument(
        "--batch",
        type=float,
        metavar="TIMEOUT",
        help="judge every --source/--name pair in turn, each given TIMEOUT seconds "
        "(see run_capstones); without it, one function (see run_capstone)",
    )
    args = parser.parse_args(argv)
    if len(args.source) != len(args.name):
        parser.error("give one --name for each --source")
    torch.set_num_threads(1)
    # What is loaded by now (torch, above all) is never garbage: gc.collect() below then
    # walks only what the learner's functions made (about 0.2 s less per call).
    gc.freeze()
    out = Path(args.out)
    if args.batch is not None:
        _main_batch(list(zip(args.source, args.name, strict=True)), out, args.batch)
        leave_at_once()
    if len(args.source) != 1:
        parser.error("give one --source and one --name, or --batch")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    weights, seen = _train(args.source[0], args.name[0], rank, world)
    gc.collect()  # the learner's frames and the DDP model: the group's last references
    if weights is None:
        write_whole(out / f"error{rank}.json", {**seen, "time": time.time()})
        sys.stdout.flush()
        os._exit(1)
    held: list = []  # the all-gather's tensors, alive until the group is destroyed
    results = _gather_results(weights, seen, held)
    if rank == 0:  # whole or not at all: run_capstone may read it after a stop
        write_whole(out / "results.json", results)
    dist.destroy_process_group()
    leave_at_once()


class _Deadline:
    """A batch's watchdog: a rank still on function ``index`` ``timeout`` seconds after it
    began writes its Python stacks to ``timeout{index}_{rank}.txt`` and ends, which ends the
    launch (the function hung, or its ranks wait for each other in a collective).

    faulthandler's watchdog is a C thread: it needs no GIL, so it also ends a rank whose main
    thread holds the GIL while it waits (a deadlock in C++ code), which a Python thread
    could not. The file's modification time is when the deadline passed; it stays empty
    while the deadline has not passed."""

    def __init__(self, out: Path, rank: int, timeout: float):
        self.out, self.rank, self.timeout = out, rank, timeout
        self.file = None  # the file faulthandler writes to: kept open while it is armed

    def start(self, index: int) -> None:
        import faulthandler

        marker = open(self.out / f"timeout{index}_{self.rank}.txt", "w")
        faulthandler.dump_traceback_later(self.timeout, exit=True, file=marker)
        if self.file is not None:
            self.file.close()
        self.file = marker

    def stop(self) -> None:
        import faulthandler

        faulthandler.cancel_dump_traceback_later()


def _main_batch(functions: list[tuple[str, str]], out: Path, timeout: float) -> None:
    """The ranks of :func:`run_capstones`: each function in turn, in a process group of its
    own (so that a function whose ranks ran different collectives leaves nothing behind).

    For function ``j``, every rank writes ``error{j}_{rank}.json`` if the function raised on
    it; once every rank has said how its run ended (through the store, not a collective),
    rank 0 writes ``results{j}.json`` if none raised, then ``judged{j}``. A rank that raised
    destroys its process group at once: the sockets close, and a rank still waiting for it
    in a collective gets an error instead of waiting forever. What no rank can leave (a
    hang) is ended by :class:`_Deadline`, and with it the launch."""
    import gc
    from datetime import timedelta

    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    store = dist.TCPStore(address, port, world, is_master=rank == 0, timeout=timedelta(days=1))
    deadline = _Deadline(out, rank, timeout)  # the store waits forever: the deadline ends it
    for j, (source, name) in enumerate(functions):
        deadline.start(j)
        torch.set_grad_enabled(True)  # what an earlier function may have switched off
        group_store = dist.PrefixStore(f"capstone{j}/", store)
        dist.init_process_group("gloo", store=group_store, rank=rank, world_size=world)
        weights, seen = _train(source, name, rank, world)
        gc.collect()  # the learner's frames and the DDP model: the group's last references
        if weights is None:
            write_whole(out / f"error{j}_{rank}.json", {**seen, "time": time.time()})
            dist.destroy_process_group()  # closes its sockets: a rank waiting for it fails
        store.set(f"ended{j}/{rank}", "ok" if weights is not None else "error")
        store.wait([f"ended{j}/{r}" for r in range(world)])
        held: list = []  # the all-gather's tensors, alive until the group is destroyed
        if all(store.get(f"ended{j}/{r}") == b"ok" for r in range(world)):
            results = _gather_results(weights, seen, held)
            if rank == 0:
                write_whole(out / f"results{j}.json", results)
        if weights is not None:
            dist.destroy_process_group()
        del held
        if rank == 0:
            (out / f"judged{j}").touch()
    deadline.stop()
    store.set(f"left/{rank}", "1")
    if rank == 0:  # rank 0 holds the store: it leaves last
        store.wait([f"left/{r}" for r in range(world)])


class CapstoneRunError(Exception):
    """The 2-process run of a learner's function ended without results: ``kind`` is
    "error" (a rank raised; the message and the scaler calls are kept), "timeout" or "failed"."""

    def __init__(self, kind: str, message: str, calls: list[str] | None = None):
        super().__init__(message)
        self.kind, self.message, self.calls = kind, message, calls or []


def run_capstone(function: Callable, timeout: float = 60) -> dict:
    """Run ``function(model, optimizer, scheduler, scaler, micro_batches, accumulation_steps)``
    on ``WORLD`` DDP processes (gloo); return rank 0's results (see :func:`main`), or raise
    :class:`CapstoneRunError`. Its source goes to a module in a temporary folder, after
    :data:`PREAMBLE`, which the ranks import."""
    from helpers.processes.run_ranks import launch

    source = function_source(function)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "learner_capstone.py"
        path.write_text(PREAMBLE + source + "\n", encoding="utf-8")
        args = [f"--source={path}", f"--name={function.__name__}", f"--out={folder}"]
        try:
            launch("helpers.capstone.capstone_run", args, nproc=WORLD, timeout=timeout)
        except RuntimeError as error:
            results = Path(folder) / "results.json"
            if results.exists():  # the function ran to its end: only leaving was stopped
                return json.loads(results.read_text(encoding="utf-8"))
            errors = sorted(read_errors(Path(folder).glob("error*.json")), key=lambda e: e["time"])
            if errors:
                raise CapstoneRunError("error", errors[0]["error"], errors[0]["calls"]) from None
            kind = "timeout" if "took over" in str(error) else "failed"
            raise CapstoneRunError(kind, str(error)) from None
        return json.loads((Path(folder) / "results.json").read_text(encoding="utf-8"))


def write_whole(path: Path, data: dict) -> None:
    """Write ``data`` as JSON to ``path`` whole or not at all: a rank stopped while writing
    (a busy machine reaches the deadline sooner) leaves no half-written file to be read."""
    part = path.with_suffix(".part")
    part.write_text(json.dumps(data), encoding="utf-8")
    part.replace(path)


def read_errors(paths) -> list[dict]:
    """The ranks' error reports at ``paths``, each read whole."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in paths]


# What a batch's launch may take beyond its functions' deadlines: starting the processes and
# their group (seconds on an idle machine, many more on a busy one), and ending them.
START_ALLOWANCE = 60


def run_capstones(functions: list[Callable], timeout: float = 60) -> list[dict | CapstoneRunError]:
    """:func:`run_capstone` on each of ``functions``, in as few launches as can be: one pair
    of ranks judges them in turn, each on a fresh model, optimizer, scheduler, scaler and
    process group. Returns, in order, each function's results (the dict of
    :func:`run_capstone`), or the :class:`CapstoneRunError` it would have raised there.

    A function that raises on one rank while the other waits for it in a collective, or on
    every rank, is judged in the same launch (see :func:`_main_batch`). One that runs over
    ``timeout`` seconds (a hang) ends the launch: it gets its "timeout", and the functions
    after it are judged in a new launch. The functions share the ranks' interpreter: one
    that changes global state other than grad mode (a default dtype, a patched torch
    function) could affect the next; the course's answers do not, and a learner's function
    goes through :func:`run_capstone` alone. Raises ``ValueError`` as :func:`function_source`
    does, before launching anything."""
    from helpers.processes.run_ranks import launch

    sources = [function_source(function) for function in functions]
    outcomes: list[dict | CapstoneRunError] = []
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for index, source in enumerate(sources):
            paths.append(Path(folder) / f"learner_capstone{index}.py")
            paths[-1].write_text(PREAMBLE + source + "\n", encoding="utf-8")
        while len(outcomes) < len(functions):
            first = len(outcomes)  # this launch judges functions first, first + 1, ...
            out = Path(folder) / f"launch{first}"
            out.mkdir()
            args = [f"--out={out}", f"--batch={timeout:g}"]
            for path, function in zip(paths[first:], functions[first:], strict=True):
                args += [f"--source={path}", f"--name={function.__name__}"]
            try:  # the ranks' deadline ends a hang; this one only backs it up
                backstop = timeout * (len(functions) - first) + START_ALLOWANCE
                launch("helpers.capstone.capstone_run", args, nproc=WORLD, timeout=backstop)
                failure = None
            except RuntimeError as error:
                failure = error
            for j in range(len(functions) - first):
                if not (out / f"judged{j}").exists():  # the launch ended on this function
                    outcomes.append(_batch_outcome(out, j, failure, timeout))
                    break
                outcomes.append(_batch_outcome(out, j))
    return outcomes


def _batch_outcome(
    out: Path, j: int, failure: RuntimeError | None = None, timeout: float = 0
) -> dict | CapstoneRunError:
    """What :func:`_main_batch` left for its function ``j``: rank 0's results, or the first
    thing that went wrong (a rank's error or deadline, whichever came first), or else the
    launch's own ``failure`` (``None``: the launch ended well without judging it)."""
    if (out / f"results{j}.json").exists():
        return json.loads((out / f"results{j}.json").read_text(encoding="utf-8"))
    errors = read_errors(out.glob(f"error{j}_*.json"))
    stops = [
        {"time": p.stat().st_mtime, "stacks": p.read_text(errors="replace")}
        for p in out.glob(f"timeout{j}_*.txt")
        if p.stat().st_size  # empty: the deadline did not pass
    ]
    events = sorted([*errors, *stops], key=lambda event: event["time"])
    if events and "error" not in events[0]:  # a deadline, before any error
        from helpers.processes.launcher import STACKS_ON_STOP

        if os.environ.get(STACKS_ON_STOP):  # CI: where the rank was when its deadline passed
            print(events[0]["stacks"], file=sys.stderr)
        message = _("the {world}-process run took over {timeout:g} s and was stopped").format(
            world=WORLD, timeout=timeout
        )
        return CapstoneRunError("timeout", message)
    if events:
        return CapstoneRunError("error", events[0]["error"], events[0]["calls"])
    if failure is None:
        return CapstoneRunError("failed", _("the run ended without judging the function"))
    kind = "timeout" if "took over" in str(failure) else "failed"
    return CapstoneRunError(kind, str(failure))


if __name__ == "__main__":
    main()
