"""How notebook 06's repair checkers run a loop: under the loop auditor, on 10
micro-batches, from the same seeded model and random state as the correct loop, recording
what every optimizer step used (:func:`record_steps`), the clip_grad_norm_ calls, the
scheduler's steps and the GradScaler's calls, in a :class:`Trace`."""

from __future__ import annotations

import ast
import inspect
import textwrap
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import torch
from torch import nn

from helpers.audit_and_repair.loops_to_repair import LOOPS, N_BATCHES, REPAIRED, loop_options
from helpers.checks import LearnerCodeError, call_learner
from helpers.data import make_teacher_batches
from helpers.loop_runs import AuditedRun, audited_run
from helpers.models import make_mlp
from helpers.spies import ClipSpy, ScalerSpy
from helpers.translation import N_, _

# ---------------------------------------------------------------- running and recording


def record_steps(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[dict]:
    """Before every ``optimizer.step()``, keep what it is about to use: for each parameter
    its gradient, its weight and its param group's settings (None when in no group)."""
    steps = []

    def before_step(optimizer, args, kwargs):
        # read at every step: a repair of loop D may add a param group
        groups = {id(p): group for group in optimizer.param_groups for p in group["params"]}
        steps.append(
            {
                name: (
                    None if p.grad is None else p.grad.detach().clone(),
                    p.detach().clone(),  # copies: step() changes the weights in place
                    _settings(groups.get(id(p))),
                )
                for name, p in model.named_parameters()
            }
        )

    optimizer.register_step_pre_hook(before_step)  # the loop under test stays unchanged
    return steps  # empty now, filled in as the loop steps


def _settings(group: dict | None) -> dict | None:
    if group is None:
        return None
    return {key: group.get(key) for key in ("lr", "momentum", "dampening", "weight_decay")}


@dataclass
class Trace:
    """A loop run by the repair checker: the audited run, what every step used, the final
    weights by parameter name; each parameter it started with and its start value, the
    parameter tensors each step
    saw, the clip_grad_norm_ calls, how often the scheduler stepped (None without one) and
    the GradScaler's calls (:class:`helpers.spies.ScalerSpy`)."""

    run: AuditedRun
    steps: list[dict]
    final: dict[str, torch.Tensor]
    start: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    params: list[dict[str, torch.Tensor]] = field(default_factory=list)
    clips: list[dict] = field(default_factory=list)
    scheduler_steps: int | None = None
    scaler_calls: list[str] = field(default_factory=list)


def trace(name: str, loop: Callable) -> Trace:
    """Run ``loop`` the way the checker of loop ``name`` does: under the auditor, on 10
    micro-batches, from the same seeded model and random state, recording every step.

    A :class:`LearnerCodeError` from the loop is raised with ``scaler_calls`` set."""
    name = loop_name(name)
    model = make_mlp((8, 16, 1), seed=0)
    start = [(p, p.detach().clone()) for p in model.parameters()]
    options = loop_options(name)
    recorded: list[list[dict]] = []
    params: list[dict[str, torch.Tensor]] = []
    spies: list[ScalerSpy] = []
    schedulers: list = []

    def make_optimizer(given):
        optimizer = torch.optim.SGD(given, lr=0.01, momentum=0.9)
        recorded.append(record_steps(model, optimizer))
        optimizer.register_step_pre_hook(lambda *_: params.append(dict(model.named_parameters())))
        if "scaler" in options:
            spies.append(ScalerSpy(options["scaler"], optimizer))
        return optimizer

    if "make_scheduler" in options:
        make_scheduler = options["make_scheduler"]

        def keep_scheduler(optimizer):
            schedulers.append(make_scheduler(optimizer))
            return schedulers[-1]

        options["make_scheduler"] = keep_scheduler

    with torch.random.fork_rng(devices=[]), warnings.catch_warnings(), ClipSpy() as clips:
        warnings.simplefilter("ignore")  # a scheduler stepped too early warns; hints explain
        torch.manual_seed(0)
        try:
            run = audited_run(
                loop,
                make_teacher_batches(n_batches=N_BATCHES),
                model=model,
                make_optimizer=make_optimizer,
                **options,
            )
        except LearnerCodeError as error:
            error.scaler_calls = list(spies[0].calls) if spies else []
            raise
    final = {n: p.detach().clone() for n, p in model.named_parameters()}
    return Trace(
        run,
        recorded[0],
        final,
        start=start,
        params=params,
        clips=clips.calls,
        scheduler_steps=schedulers[0].last_epoch if schedulers else None,
        scaler_calls=list(spies[0].calls) if spies else [],
    )


@cache
def reference_trace(name: str) -> Trace:
    return trace(name, REPAIRED[name])


def loop_name(name: str) -> str:
    if not isinstance(name, str) or name.upper() not in LOOPS:
        raise ValueError(
            _("name must be one of {names}, got {name!r}").format(names=", ".join(LOOPS), name=name)
        )
    return name.upper()


# What an exception in a repaired loop usually means (call_learner looks here first).
REPAIR_MEANINGS = {
    "name 'windows' is not defined": N_(
        "`windows` is notebook 03's helper, not a built-in: import it with "
        "`from helpers.accumulation import windows`, or slice the micro-batches yourself."
    ),
}


def as_learner_loop(loop: Callable) -> Callable:
    """The learner's loop as audited_run calls it; the scheduler or scaler goes in by
    position, so the learner may name that parameter as they like."""

    def learner_loop(model, optimizer, batches, **extras):
        return call_learner(
            loop, model, optimizer, batches, *extras.values(), meanings=REPAIR_MEANINGS
        )

    return learner_loop


def unchanged_loop(answer: Callable, loop: Callable) -> bool:
    """Whether ``answer`` is ``loop`` as given (a copy, comments and name aside)."""
    return _body(answer) is not None and _body(answer) == _body(loop)


def _body(function: Callable) -> str | None:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError, ValueError):
        return None
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef):
        return None
    return ast.dump(node.args) + ast.dump(ast.Module(node.body, []))
