"""Notebook 08, torch.compile in an accumulation loop: what compiles, what breaks the graph,
what recompiles. Every function compiles with a cheap backend (``aot_eager``: TorchDynamo
captures the graph and AOTAutograd traces the backward, but no code is generated; ``eager``:
the captured graph runs as it is), so the notebook stays fast on one CPU core."""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Iterator

import torch
from torch import nn
from torch.nn import functional as F

from helpers.models import make_mlp


@contextlib.contextmanager
def quiet_compile() -> Iterator[None]:
    """A fresh compiler state (caches and counters reset) whose warnings stay out of the
    notebook's output; the default logging comes back afterwards."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch._dynamo.utils.guard_failures.clear()
    torch._logging.set_logs(dynamo=logging.ERROR, aot=logging.ERROR)
    # CUDA builds on a machine without a GPU warn "No CUDA runtime is found" here (torch 2.9)
    extension_log = logging.getLogger("torch.utils.cpp_extension")
    extension_level = extension_log.level
    extension_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        extension_log.setLevel(extension_level)
        torch._logging.set_logs()
        torch._dynamo.reset()


def _micro_batches(k: int, size: int = 8, features: int = 4, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(size, features, generator=generator),
            torch.randn(size, 1, generator=generator),
        )
        for _ in range(k)
    ]


def _accumulate(model, batches) -> list[torch.Tensor]:
    """The eager accumulation loop; ``model`` may be a compiled module."""
    for inputs, targets in batches:
        (F.mse_loss(model(inputs), targets) / len(batches)).backward()
    return [p.grad.clone() for p in model.parameters()]


def compiled_model_gradients(k: int = 3, backend: str = "aot_eager") -> dict:
    """The same window accumulated twice on one model: eagerly, then through
    ``torch.compile(model, backend=backend)`` in the same eager loop. Returns the largest
    difference between the two gradients and the graphs compiled."""
    model = make_mlp((4, 8, 1), seed=3)
    batches = _micro_batches(k)
    eager = _accumulate(model, batches)
    model.zero_grad()
    with quiet_compile():
        compiled = _accumulate(torch.compile(model, backend=backend), batches)
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    difference = max((a - b).abs().max().item() for a, b in zip(eager, compiled, strict=True))
    return {"max_difference": difference, "graphs": graphs, "micro_batches": k}


def explain(function, *args) -> dict:
    """``torch._dynamo.explain`` of one call: graphs captured, graph breaks, and the first
    line of each break's reason."""
    with quiet_compile():
        result = torch._dynamo.explain(function)(*args)
    reasons = [str(r.reason).strip().splitlines()[0] for r in result.break_reasons]
    explanations = [
        line.strip().removeprefix("Explanation: ")
        for r in result.break_reasons
        for line in str(r.reason).splitlines()
        if line.strip().startswith("Explanation:")
    ]
    return {
        "graphs": result.graph_count,
        "graph_breaks": result.graph_break_count,
        "reasons": reasons,
        "explanations": explanations,
    }


def backward_in_compiled_step() -> dict:
    """Explain a micro-batch step that calls ``loss.backward()`` inside the compiled
    function: the forward is one graph, backward() breaks it."""
    model = make_mlp((4, 8, 1), seed=3)
    [(inputs, targets)] = _micro_batches(1)

    def micro_step(inputs, targets):
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        return loss.detach()

    return explain(micro_step, inputs, targets)


def zero_grad_in_compiled_function() -> dict:
    """Explain a function that calls ``optimizer.zero_grad()`` between two tensor
    operations: Dynamo does not trace into it (it is marked ``@torch._disable_dynamo``)."""
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def around_zero_grad(x):
        y = x * 2
        optimizer.zero_grad()
        return y + 1

    return explain(around_zero_grad, torch.ones(3))


def decorators_of(function) -> list[str]:
    """The decorator lines above a function's ``def`` in its source."""
    lines = inspect.getsource(function).splitlines()
    return [
        line.strip() for line in lines[: next(i for i, text in enumerate(lines) if "def " in text)]
    ]


def compiled_step_recompiles(lr, steps: int = 4, backend: str = "eager") -> dict:
    """Train a small model for ``steps`` optimizer steps with a compiled ``optimizer.step``
    and a scheduler that halves the learning rate after each, ``lr`` a float or a tensor.
    Returns the graphs compiled for the step and the guards that failed (recompiles)."""
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5**step)
    [(inputs, targets)] = _micro_batches(1)
    with quiet_compile():
        step = torch.compile(optimizer.step, backend=backend)
        lrs = []
        for _ in range(steps):
            F.mse_loss(model(inputs), targets).backward()
            lrs.append(float(optimizer.param_groups[0]["lr"]))
            step()
            optimizer.zero_grad()
            scheduler.step()
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        failures = [
            reason.split(": ", 1)[-1].split("#")[0].strip()
            for reasons in torch._dynamo.utils.guard_failures.values()
            for reason in reasons
        ]
    return {"graphs": graphs, "failed_guards": failures, "lrs": lrs}
