"""What the auditor observes beyond its own hooks: thin pass-throughs, installed while at least
one auditor is active and removed with the last one.

Each calls the original and returns what it returns; around the call it tells the active
auditors what happened. Wrapped: ``torch.autograd.backward`` (so each backward pass gets an
id, and a reentrant checkpoint's inner backward counts as part of its outer one), the clipping
functions, ``Optimizer.zero_grad`` and ``Module.zero_grad`` (known resets of ``.grad``), the
GradScaler's ``scale``, ``unscale_``, ``step`` and ``update``, and the schedulers' ``step``.
Besides the auditors, :data:`WATCHERS` hear when a backward pass starts (an
:class:`~loop_auditor.session.AuditSession` looks there for parameters that were unfrozen).
"""

from __future__ import annotations

import functools
import itertools
import math
import weakref

import torch
import torch.nn.utils
import torch.nn.utils.clip_grad
from torch import nn
from torch.optim import lr_scheduler
from torch.optim.optimizer import register_optimizer_step_post_hook

ACTIVE: list = []  # the auditors inside their ``with`` block, oldest first
WATCHERS: list = []  # others told when an outermost backward pass starts (``_on_backward_start``)
_ORIGINALS: dict[tuple[object, str], object] = {}
_sequence = itertools.count(1)  # ids of backward passes and optimizer steps, in order


class _State:
    def __init__(self):
        self.pass_id: int | None = None  # the backward pass running now (outermost call)
        self.depth = 0  # nested torch.autograd.backward calls (a reentrant checkpoint's)
        self.clip_depth = 0  # clip_grad_norm_ calls _clip_grads_with_norm_: count the outer
        self.scheduler_depth = 0  # SequentialLR.step calls its children's: count the outer
        self.constructing_scheduler = 0  # a scheduler's __init__ steps once: not the loop's
        self.tasks: dict[int, int] = {}  # graph task -> pass id, for a backward not via ours
        # Every optimizer step while an auditor is active, audited or not: (id, step id).
        self.steps: list[tuple[int, int]] = []
        self.stepped: dict[int, weakref.ref] = {}  # those optimizers, by id


STATE = _State()


def next_id() -> int:
    return next(_sequence)


def current_pass() -> int:
    """The id of the backward pass that is running (hooks call this)."""
    if STATE.pass_id is not None:
        return STATE.pass_id
    task = torch._C._current_graph_task_id() if hasattr(torch._C, "_current_graph_task_id") else -1
    if task not in STATE.tasks:
        STATE.tasks = {task: next_id()}  # a backward that did not go through our wrapper
    return STATE.tasks[task]


_SCALED = "loop-auditor-scaled-by"


def scaler_of(roots) -> object | None:
    """The GradScaler whose ``scale()`` made one of these backward roots or a tensor a few
    operations above them (``(scaler.scale(loss) / k).backward()``), if any: ``scale()``
    marks its output's graph node."""
    for root in roots:
        if isinstance(root, torch.Tensor) and root.grad_fn is not None:
            for node in nodes_near_root(root.grad_fn):
                ref = node.metadata.get(_SCALED)
                if ref is not None and ref() is not None:
                    return ref()
    return None


def nodes_near_root(root: torch.autograd.graph.Node, depth: int = 4) -> list:
    """The root and the nodes up to ``depth`` edges below it, leaf accumulators excluded."""
    nodes, frontier = [root], [root]
    for _ in range(depth):
        frontier = [
            child
            for node in frontier
            for child, _ in node.next_functions
            if child is not None and type(child).__name__ != "AccumulateGrad"
        ]
        nodes.extend(frontier)
    return nodes


def other_stepped_after(pass_id: int, optimizer) -> bool:
    """Whether an optimizer other than ``optimizer`` stepped after backward pass ``pass_id``."""
    for stepper, at in reversed(STATE.steps):
        if at <= pass_id:
            return False
        if stepper != id(optimizer):
            return True
    return False


def stepped_optimizers() -> list:
    """The optimizers that stepped while an auditor was active (and still exist)."""
    return [o for o in (ref() for ref in STATE.stepped.values()) if o is not None]


def _on_any_step(optimizer, args, kwargs) -> None:
    STATE.steps.append((id(optimizer), next_id()))
    if len(STATE.steps) > 4096:
        del STATE.steps[:2048]
    STATE.stepped.setdefault(id(optimizer), weakref.ref(optimizer))


# ------------------------------------------------------------------ the wrappers
def _audited_backward(original):
    @functools.wraps(original)
    def backward(tensors, *args, **kwargs):
        if STATE.depth:  # inside another backward: a reentrant checkpoint recomputing
            STATE.depth += 1
            try:
                return original(tensors, *args, **kwargs)
            finally:
                STATE.depth -= 1
        roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        STATE.pass_id = next_id()
        STATE.depth = 1
        scaler = scaler_of(roots)
        for watcher in list(WATCHERS):
            watcher._on_backward_start()
        for auditor in list(ACTIVE):
            auditor._on_backward_start(roots, scaler)
        try:
            return original(
                tensors if isinstance(tensors, torch.Tensor) else roots, *args, **kwargs
            )
        finally:
            STATE.depth = 0
            STATE.pass_id = None
            for auditor in list(ACTIVE):
                auditor._on_backward_end()

    return backward


def _clips(limit_name: str, args: tuple, kwargs: dict) -> bool:
    """False for a call that cannot change a gradient: an infinite limit (a call that only
    measures the norm)."""
    limit = args[0] if args else kwargs.get(limit_name)
    return not (isinstance(limit, (int, float)) and math.isinf(limit))


def _audited_clip(original, name: str, limit: str):
    @functools.wraps(original)
    def clip(parameters, *args, **kwargs):
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        parameters = list(parameters)
        outer = STATE.clip_depth == 0
        if outer and _clips(limit, args, kwargs):
            for auditor in list(ACTIVE):
                auditor._on_clip(parameters, name.lstrip("_"))
        STATE.clip_depth += 1
        try:
            return original(parameters, *args, **kwargs)
        finally:
            STATE.clip_depth -= 1
            if outer:
                for auditor in list(ACTIVE):
                    auditor._on_known_edit(parameters)

    return clip


def _then(original, event):
    """A pass-through that calls ``original``, then ``event(auditor, self, *args)`` for each
    active auditor."""

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        for auditor in list(ACTIVE):
            event(auditor, self, *args)
        return result

    return wrapper


def _audited_scale(original):
    @functools.wraps(original)
    def scale(self, outputs):
        result = original(self, outputs)
        for tensor in result if isinstance(result, (list, tuple)) else [result]:
            if isinstance(tensor, torch.Tensor) and tensor.grad_fn is not None:
                tensor.grad_fn.metadata[_SCALED] = weakref.ref(self)
        return result

    return scale


def _audited_scaler_step(original):
    @functools.wraps(original)
    def step(self, optimizer, *args, **kwargs):
        before = {id(a): a.steps for a in ACTIVE}
        result = original(self, optimizer, *args, **kwargs)
        for auditor in list(ACTIVE):
            auditor._on_scaler_step(
                self, optimizer, stepped=auditor.steps != before.get(id(auditor))
            )
        return result

    return step


def _audited_scheduler_step(original):
    @functools.wraps(original)
    def step(self, *args, **kwargs):
        outer = STATE.scheduler_depth == 0 and not STATE.constructing_scheduler
        STATE.scheduler_depth += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            STATE.scheduler_depth -= 1
            if outer:
                for auditor in list(ACTIVE):
                    auditor._on_scheduler_step(self)

    return step


def _audited_scheduler_init(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        STATE.constructing_scheduler += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            STATE.constructing_scheduler -= 1

    return __init__


def _reset_by_optimizer(auditor, optimizer, *_) -> None:
    auditor._on_known_reset([p for group in optimizer.param_groups for p in group["params"]])


def _reset_by_module(auditor, module, *_) -> None:
    auditor._on_known_reset(list(module.parameters()))


def _unscaled(auditor, scaler, optimizer=None, *_) -> None:
    auditor._on_unscale(scaler, optimizer)


def _updated(auditor, scaler, *_) -> None:
    auditor._on_scaler_update(scaler)


# (owner, attribute, factory): everything install() replaces.
def _targets():
    targets = [
        (torch.autograd, "backward", _audited_backward),
        (torch.optim.Optimizer, "zero_grad", lambda f: _then(f, _reset_by_optimizer)),
        (nn.Module, "zero_grad", lambda f: _then(f, _reset_by_module)),
        (torch.amp.GradScaler, "scale", _audited_scale),
        (torch.amp.GradScaler, "unscale_", lambda f: _then(f, _unscaled)),
        (torch.amp.GradScaler, "step", _audited_scaler_step),
        (torch.amp.GradScaler, "update", lambda f: _then(f, _updated)),
    ]
    # Every scheduler class with a step() of its own (ChainedScheduler, SequentialLR and
    # CosineAnnealingWarmRestarts do not all call the base one).
    schedulers = [
        cls
        for cls in vars(lr_scheduler).values()
        if isinstance(cls, type)
        and issubclass(cls, (lr_scheduler.LRScheduler, lr_scheduler.ReduceLROnPlateau))
        and "step" in cls.__dict__
    ]
    for cls in schedulers:
        targets.append((cls, "step", _audited_scheduler_step))
    targets.append((lr_scheduler.LRScheduler, "__init__", _audited_scheduler_init))
    for module in (torch.nn.utils, torch.nn.utils.clip_grad):
        for name, limit in (
            ("clip_grad_norm_", "max_norm"),
            ("clip_grad_value_", "clip_value"),
            ("clip_grads_with_norm_", "max_norm"),
            ("_clip_grads_with_norm_", "max_norm"),
        ):
            if hasattr(module, name):
                targets.append(
                    (module, name, lambda f, n=name, lim=limit: _audited_clip(f, n, lim))
                )
    return targets


_STEP_HOOK: list = []


def install() -> None:
    _STEP_HOOK.append(register_optimizer_step_post_hook(_on_any_step))
    for owner, name, factory in _targets():
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        _ORIGINALS[(owner, name)] = original
        setattr(owner, name, factory(original))


def remove() -> None:
    for (owner, name), original in _ORIGINALS.items():
        setattr(owner, name, original)
    _ORIGINALS.clear()
    while _STEP_HOOK:
        _STEP_HOOK.pop().remove()
    STATE.__init__()


def activate(auditor) -> None:
    ACTIVE.append(auditor)
    if len(ACTIVE) == 1:
        install()


def deactivate(auditor) -> None:
    ACTIVE.remove(auditor)
    if not ACTIVE:
        remove()
