"""Peak memory of one training step (forward and backward), measured, per micro-batch size.

On CUDA it reads PyTorch's allocator statistics (``torch.cuda.max_memory_allocated``) after
one warm-up step. On a CPU there are none, so the operating system's peak resident memory
(``ru_maxrss``) is read instead: one fresh Python process imports torch, then forks a child
per size (and workload) that builds the model, makes the micro-batch, steps and reports its
peak, and one baseline child that only builds the model. The baseline is subtracted from
each peak. (One process stepping size after size would not do: memory freed by one step is
not cleanly reused by the next, so its later peaks overstate.)"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from dataclasses import dataclass

import torch
from torch import nn

from helpers.arguments import positive_int
from helpers.models import TwoHeads, make_mlp
from helpers.translation import _


def _batch(in_features: int, classes: int, batch_size: int, device: torch.device):
    generator = torch.Generator().manual_seed(batch_size)
    inputs = torch.randn(batch_size, in_features, generator=generator).to(device)
    targets = torch.randint(0, classes, (2, batch_size), generator=generator).to(device)
    return inputs, targets


def _one_loss(model: nn.Module, batch_size: int, device: torch.device) -> None:
    inputs, targets = _batch(model[0].in_features, model[-1].out_features, batch_size, device)
    nn.functional.cross_entropy(model(inputs), targets[0]).backward()


def _two_losses(model: TwoHeads, batch_size: int, device: torch.device, summed: bool) -> None:
    inputs, targets = _batch(
        model.trunk[0].in_features, model.head_a.out_features, batch_size, device
    )
    out_a, out_b = model(inputs)
    loss_a = nn.functional.cross_entropy(out_a, targets[0])
    loss_b = nn.functional.cross_entropy(out_b, targets[1])
    if summed:
        (loss_a + loss_b).backward()
    else:
        loss_a.backward(retain_graph=True)
        loss_b.backward()


WORKLOADS = {
    "one loss": (make_mlp, _one_loss),
    "two losses, retain_graph": (
        TwoHeads,
        lambda model, size, device: _two_losses(model, size, device, summed=False),
    ),
    "two losses, summed": (
        TwoHeads,
        lambda model, size, device: _two_losses(model, size, device, summed=True),
    ),
}
"""What a step can be: ``make_mlp(widths)`` with one cross-entropy loss, or ``TwoHeads``
(the last width is each head's classes) with two losses, backpropagated one after the other
(``retain_graph=True``) or summed first."""


def _workload(name: str):
    if name not in WORKLOADS:
        raise ValueError(
            _("unknown workload {name!r}: use one of {names}").format(
                name=name, names=", ".join(WORKLOADS)
            )
        )
    return WORKLOADS[name]


@dataclass(frozen=True)
class StepMemory:
    """What one training step (its inputs included) needed beyond the model, and how much
    of it the gradient buffers take: on a CPU that share is computed from the parameter
    count (one gradient element per parameter), not measured."""

    batch_size: int
    step_bytes: int
    grad_bytes: int

    @property
    def other_bytes(self) -> int:
        """Activations saved for backward and temporaries: what grows with the batch."""
        return self.step_bytes - self.grad_bytes


def _probe(widths: tuple[int, ...], runs: list[tuple[str, int]]) -> list[int]:
    """Peak resident bytes of the baseline child, then of one child per (workload, batch
    size) in ``runs``: one fresh Python process, so torch is imported once."""
    spec = json.dumps({"widths": list(widths), "runs": runs})
    command = [sys.executable, "-m", "helpers.memory", "--probe", spec]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"memory probe failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_step_memory(
    widths: tuple[int, ...],
    batch_sizes: list[int],
    device: torch.device | None = None,
    workload: str = "one loss",
) -> list[StepMemory]:
    """Peak memory of one forward and backward (a ``workload`` of ``WORKLOADS``, by default
    ``make_mlp(widths)`` with one loss) for each batch size."""
    _workload(workload)
    if not batch_sizes:
        raise ValueError(_("batch_sizes is empty: give at least one micro-batch size"))
    for size in batch_sizes:
        positive_int(size, "each batch size")
    runs = [(workload, size) for size in batch_sizes]
    return _measure(widths, runs, _memory_device(device))


def compare_step_memory(
    widths: tuple[int, ...],
    batch_size: int,
    workloads: list[str],
    device: torch.device | None = None,
) -> dict[str, StepMemory]:
    """Peak memory of one step of each of ``workloads`` (of ``WORKLOADS``, all on the same
    model) at ``batch_size``, measured side by side by one probe: ``{workload: StepMemory}``."""
    if isinstance(workloads, str) or not workloads:
        raise ValueError(_("workloads must be a non-empty list of names from WORKLOADS"))
    if len(set(workloads)) < len(workloads):
        raise ValueError(
            _("workloads {workloads} names one twice: give each once").format(workloads=workloads)
        )
    builders = {_workload(name)[0] for name in workloads}
    if len(builders) > 1:
        raise ValueError(
            _("workloads {workloads} build different models: compare one at a time").format(
                workloads=workloads
            )
        )
    positive_int(batch_size, "batch_size")
    runs = [(name, batch_size) for name in workloads]
    return dict(zip(workloads, _measure(widths, runs, _memory_device(device)), strict=True))


def _memory_device(device) -> torch.device:
    device = torch.device("cpu") if device is None else torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(
            _("memory can be measured on 'cpu' or 'cuda', not {type!r}").format(type=device.type)
        )
    if device.type == "cpu" and not hasattr(os, "fork"):
        raise ValueError(_("measuring CPU memory needs os.fork (Linux or macOS)"))
    return device


def _measure(
    widths: tuple[int, ...], runs: list[tuple[str, int]], device: torch.device
) -> list[StepMemory]:
    """One StepMemory per (workload, batch size) of ``runs``, on ``device``."""
    build = _workload(runs[0][0])[0]
    grad_bytes = sum(p.numel() * p.element_size() for p in build(widths).parameters())
    if device.type == "cuda":
        _workload(runs[0][0])[1](build(widths).to(device), runs[0][1], device)  # cuBLAS warm-up
        torch.cuda.empty_cache()
        results = []
        for name, size in runs:
            model = _workload(name)[0](widths).to(device)
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            _workload(name)[1](model, size, device)
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device) - before
            results.append(StepMemory(size, peak, grad_bytes))
            del model
        return results
    baseline, *peaks = _probe(widths, [list(run) for run in runs])
    return [
        StepMemory(size, peak - baseline, grad_bytes)
        for (_, size), peak in zip(runs, peaks, strict=True)
    ]


def _child_peak(widths: tuple[int, ...], batch_size: int | None, workload: str) -> int:
    """Fork; the child builds the model, steps unless ``batch_size`` is None, and sends back
    its peak resident bytes."""
    build, run = _workload(workload)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            model = build(widths)
            if batch_size is not None:
                run(model, batch_size, torch.device("cpu"))
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            os.write(write_end, str(peak if sys.platform == "darwin" else peak * 1024).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return int(text)


def _main() -> None:
    parser = argparse.ArgumentParser(description="the CPU probe of measure_step_memory")
    parser.add_argument("--probe", required=True, help="JSON: widths, runs [[workload, size]]")
    spec = json.loads(parser.parse_args().probe)
    torch.set_num_threads(1)
    widths = tuple(spec["widths"])
    runs = spec["runs"]
    peaks = [_child_peak(widths, None, runs[0][0])]  # the baseline: the model alone
    peaks += [_child_peak(widths, size, workload) for workload, size in runs]
    print(json.dumps(peaks))


if __name__ == "__main__":
    _main()
