"""The loop auditor: wrap any training loop and it reports the classic gradient bugs.

```python
with LoopAuditor(model, optimizer, accumulation_steps=4) as audit:
    ...  # your training loop, unchanged
for finding in audit.findings:
    print(finding)
```

It only watches: tensor hooks on the parameters (every ``backward()`` that reaches them),
the optimizer's step hooks, and thin pass-through wrappers around ``torch.autograd.backward``,
``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_``, ``scheduler.step`` and the
GradScaler's ``unscale_``, ``step`` and ``update``. Hooks return nothing and wrappers return what
they wrap, so the trained weights are the same with and without it. Everything is removed
when the ``with`` block ends, even on an error.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.utils
import torch.nn.utils.clip_grad
from torch import nn

CODES = {
    "missing-zero-grad": "gradients that an earlier step() had used were still in .grad",
    "zero-grad-before-step": "zero_grad() ran between the last backward() and step()",
    "step-without-grad": "step() ran while no parameter had a gradient",
    "scheduler-per-micro-batch": "the scheduler stepped more often than the optimizer",
    "clip-per-micro-batch": "gradients were clipped on a micro-batch not followed by step()",
    "unscale-after-clip": "clipping ran on gradients still scaled by the GradScaler",
    "graph-kept-alive": "a loss from an earlier step is still referenced, graph and all",
    "params-not-in-optimizer": "parameters got gradients but are in no param group",
    "leftover-gradients": "the loop ended with gradients that no step() used",
}


@dataclass(frozen=True)
class Finding:
    """One problem: ``code`` (a key of :data:`CODES`), a ``message`` that says what happened
    and how to fix it, the optimizer ``step`` (1 = the first ``step()`` inside the audit)
    it concerns or ``None``, and ``count``, how many times it happened."""

    code: str
    message: str
    step: int | None
    count: int = 1

    def __str__(self) -> str:
        where = "after the loop" if self.step is None else f"step {self.step}"
        times = f" [{self.count} times]" if self.count > 1 else ""
        return f"{self.code} ({where}){times}: {self.message}"


class _Sentinel:
    """Stored in a loss's graph node metadata; it dies when the graph does."""


def _has_signal(tensors: Iterable[torch.Tensor]) -> bool:
    return any(t.grad is not None and bool(t.grad.any()) for t in tensors)


def _graph_nodes_near_root(root: torch.autograd.graph.Node, depth: int = 4) -> list:
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


class LoopAuditor:
    """Watches one model and its optimizer through a training loop inside a ``with`` block,
    then lists what went wrong in ``findings`` (empty for a correct loop).

    ``accumulation_steps`` is the number of micro-batches per optimizer step your loop
    intends (1 without accumulation); pass the ``scheduler`` and the GradScaler ``scaler``
    if the loop uses them. For two optimizers (a GAN, or one model split between two
    optimizers), use one auditor each, with the module each one trains. The codes it can
    report are the keys of :data:`CODES`.

    Limits: it cannot see how a loss was scaled, the model's train/eval mode, graphs that
    never reach ``backward()``, parameters added after the block started, or a clipping
    function imported by name before the block (``from torch.nn.utils import
    clip_grad_value_``); optimizer steps with a closure (LBFGS) are not checked.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        accumulation_steps: int = 1,
        scheduler=None,
        scaler: torch.amp.GradScaler | None = None,
    ):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
            )
        if isinstance(accumulation_steps, bool) or not isinstance(accumulation_steps, int):
            raise TypeError(
                f"accumulation_steps must be an int (micro-batches per optimizer step), "
                f"got {accumulation_steps!r}"
            )
        if accumulation_steps < 1:
            raise ValueError(
                f"accumulation_steps must be 1 or more (1 = no accumulation), "
                f"got {accumulation_steps}"
            )
        model_ids = {id(p) for p in model.parameters()}
        if not model_ids:
            raise ValueError("the model has no parameters: pass the module your loop trains")
        optimized = [p for group in optimizer.param_groups for p in group["params"]]
        if not any(id(p) in model_ids for p in optimized):
            raise ValueError(
                "the optimizer holds none of the model's parameters: pass the optimizer "
                "built from this model's parameters (for a GAN, one auditor per optimizer)"
            )
        if scheduler is not None:
            if not isinstance(getattr(scheduler, "last_epoch", None), int):
                raise TypeError(
                    f"scheduler must be a torch.optim.lr_scheduler scheduler, got {scheduler!r}"
                )
            if getattr(scheduler, "optimizer", optimizer) is not optimizer:
                raise ValueError("the scheduler was built for another optimizer than this one")
        if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
            raise TypeError(f"scaler must be a torch.amp.GradScaler, got {type(scaler).__name__}")

        self.model = model
        self.optimizer = optimizer
        self.accumulation_steps = accumulation_steps
        self.scheduler = scheduler
        self.scaler = scaler
        self._optimized = [p for p in optimized if p.requires_grad]
        self._handles: list = []
        self._wrapped: list[tuple[object, str, object]] = []
        self._inside = False
        self._reset()

    # ----------------------------------------------------------------- state
    def _reset(self) -> None:
        self._found: dict[str, Finding] = {}
        self.steps = 0  #: optimizer steps taken inside the audit
        self.backward_passes = 0  #: backward passes that added to the optimizer's parameters
        self._graph_tasks = 0
        self._seen_task = 0
        self._passes_since_step = 0
        # Per parameter (by id), since the last step or the last reset of its .grad: whether
        # its gradient started clean ("fresh") or on top of one a step had used ("stale").
        self._window: dict[int, str] = {}
        self._version: dict[int, int] = {}  # .grad._version after the last accumulation
        self._consumed: set[int] = set()  # held a gradient when the last step ran
        self._pending: dict[int, tuple[int, bool, bool]] = {}
        self._discarded_at: int | None = None  # passes since the last step, when a reset lost some
        self._in_closure_step = False
        self._known_optimized: set[int] = set()
        self._reported_outside: set[int] = set()
        self._clip_pending = False
        self._unscaled = False
        self._scheduler_mark = self._scheduler_count()
        self._graphs: list[tuple[int, weakref.ref]] = []

    @property
    def findings(self) -> list[Finding]:
        """What went wrong, one finding per code, in the order first seen."""
        return list(self._found.values())

    @property
    def codes(self) -> list[str]:
        """The codes of :attr:`findings`."""
        return list(self._found)

    def _report(self, code: str, message: str, step: int | None) -> None:
        old = self._found.get(code)
        if old is None:
            self._found[code] = Finding(code, message, step)
        else:
            self._found[code] = Finding(code, old.message, old.step, old.count + 1)

    def __str__(self) -> str:
        if not self._found:
            return f"No findings ({self.steps} steps, {self.backward_passes} backward passes)."
        return "\n".join(str(f) for f in self._found.values())

    # ----------------------------------------------------------- enter, exit
    def __enter__(self) -> LoopAuditor:
        if self._inside:
            raise RuntimeError("this LoopAuditor is already in use; make a new one")
        self._reset()
        self._inside = True
        self._consumed = {id(p) for p in self._optimized if p.grad is not None}
        hook = torch.autograd.graph.register_multi_grad_hook
        self._handles.append(hook(self._optimized, self._on_graph_task, mode="any"))
        for p in self._optimized:
            self._handles.append(p.register_hook(lambda _, p=p: self._before_accumulate(p)))
            self._handles.append(p.register_post_accumulate_grad_hook(self._after_accumulate))
        self._handles.append(self.optimizer.register_step_pre_hook(self._before_step))
        self._handles.append(self.optimizer.register_step_post_hook(self._after_step))
        if self.scaler is not None:
            self._wrap(self.scaler, "unscale_", after=self._on_unscale)
            self._wrap(self.scaler, "update", after=self._on_update)
            self._wrap(self.scaler, "step", before=self._count_steps, after=self._on_scaler_step)
        _ACTIVE.append(self)
        if len(_ACTIVE) == 1:
            _install_patches()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._finish()
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles.clear()
            for owner, name, previous in reversed(self._wrapped):
                if previous is None:
                    delattr(owner, name)
                else:
                    setattr(owner, name, previous)
            self._wrapped.clear()
            _ACTIVE.remove(self)
            if not _ACTIVE:
                _remove_patches()
            self._inside = False

    def _wrap(self, owner, name: str, before=None, after=None) -> None:
        """Replace ``owner.name`` by a pass-through that calls ``before(args)`` and
        ``after(args, state)``; restored on exit."""
        original = getattr(owner, name)
        previous = owner.__dict__.get(name)

        def wrapper(*args, **kwargs):
            state = before(*args) if before else None
            result = original(*args, **kwargs)
            if after:
                after(args, state)
            return result

        setattr(owner, name, wrapper)
        self._wrapped.append((owner, name, previous))

    # ------------------------------------------------------- gradient state
    def _was_reset(self, p: torch.Tensor) -> bool:
        """Whether ``p.grad`` was reset since its last accumulation: set to None, or changed
        in place (``zero_()``) and now all zeros."""
        grad = p.grad
        if grad is None:
            return True
        return grad._version != self._version.get(id(p)) and not bool(grad.any())

    def _on_graph_task(self, _grad) -> None:
        self._graph_tasks += 1

    def _before_accumulate(self, p: torch.Tensor) -> None:
        """Note what ``.grad`` holds before this backward adds to it; applied in
        :meth:`_after_accumulate`, since ``torch.autograd.grad`` runs this hook too but
        accumulates nothing."""
        key = id(p)
        reset = key in self._window and self._was_reset(p)
        grad = p.grad
        stale = key in self._consumed and grad is not None and bool(grad.any())
        self._pending[key] = (self._graph_tasks, reset, stale)

    def _after_accumulate(self, p: torch.Tensor) -> None:
        if self._seen_task != self._graph_tasks:  # first parameter of a new backward pass
            self._seen_task = self._graph_tasks
            self._on_backward_pass()
        key = id(p)
        task, reset, stale = self._pending.pop(key, (None, False, False))
        if task == self._graph_tasks:
            if reset and self._window.pop(key) == "fresh" and not self._in_closure_step:
                self._discarded_at = self._passes_since_step - 1  # passes whose grads were lost
            if key not in self._window:
                if not stale:
                    self._consumed.discard(key)
                self._window[key] = "stale" if stale else "fresh"
        self._version[key] = p.grad._version

    def _on_backward_pass(self) -> None:
        step = self.steps + 1
        if self._clip_pending:
            self._report(
                "clip-per-micro-batch",
                f"gradients were clipped and then another backward() added to them before "
                f"step {step}: each clip shrinks the partial sum so far, so the earlier "
                f"micro-batches count less than the later ones and the window's gradient "
                f"points elsewhere than the clipped full-window gradient. Clip once, after "
                f"the window's last backward(), just before step().",
                step,
            )
            self._clip_pending = False
        self.backward_passes += 1
        self._passes_since_step += 1

    def _report_discarded(self, step: int | None) -> None:
        """Gradients that started clean after the last step were reset before a step used
        them. A full window after the reset means a short window was zeroed away
        (``leftover-gradients``); otherwise the reset sat inside the window."""
        lost, self._discarded_at = self._discarded_at, None
        if lost is None:
            return
        k = self.accumulation_steps
        after = self._passes_since_step - lost
        if k > 1 and (after >= k or step is None):
            self._report(
                "leftover-gradients",
                f"the gradients of {lost} backward pass(es) after step {self.steps} were reset "
                f"before any step() used them: a short last window (accumulation_steps={k}) "
                f"was zeroed away, for example by a zero_grad() at the start of the next "
                f"epoch. Step once more on the short window, scaled by its real size.",
                step,
            )
        else:
            self._report(
                "zero-grad-before-step",
                f"the gradients of {lost} backward pass(es) were reset before step "
                f"{self.steps + 1} could use them: a zero_grad() inside the accumulation "
                f"window (accumulation_steps={k}) or between losses, so that step saw only "
                f"the last micro-batch. Zero the gradients once per window, right after step().",
                self.steps + 1,
            )

    # ------------------------------------------------------------------ step
    def _before_step(self, optimizer, args, kwargs) -> None:
        step = self.steps + 1
        self._check_scheduler(step)
        self._check_graphs(older_than=self.steps - 1, step=step)
        self._report_outside_parameters(step)
        closure = args[1] if len(args) > 1 else kwargs.get("closure")  # args[0]: the optimizer
        if closure is not None:  # step(None), as Accelerate calls it, is a plain step
            self._in_closure_step = True  # forward and backward run inside step()
            return
        self._report_discarded(step)
        by_id = {id(p): p for p in self._optimized}
        touched = [by_id[k] for k in self._window if k in by_id]
        if self._passes_since_step and touched and all(self._was_reset(p) for p in touched):
            none = all(p.grad is None for p in touched)
            effect = (
                "every .grad was None, so step() skipped every parameter"
                if none
                else "every .grad was zeros: plain SGD stays put, but weight decay (and "
                "momentum or Adam state from earlier steps) still move the parameters"
            )
            self._report(
                "zero-grad-before-step",
                f"the gradients were reset after the last backward() and before step "
                f"{step}: {effect}, and that backward() was wasted. Zero the gradients after "
                f"step() (or before the next backward()), never between backward() and step().",
                step,
            )
            return
        stale = [by_id[k] for k in self._consumed if k in by_id and _has_signal([by_id[k]])]
        if stale:
            self._report(
                "missing-zero-grad",
                f"step {step} used .grad that still held gradients an earlier step() had "
                f"already used ({len(stale)} of {len(self._optimized)} parameters), so it "
                f"applied old windows again (accumulation_steps={self.accumulation_steps}). "
                f"Call optimizer.zero_grad() after every step().",
                step,
            )
        elif not self._passes_since_step and not _has_signal(self._optimized):
            none = all(p.grad is None for p in self._optimized)
            effect = (
                "every .grad was None, so nothing was updated"
                if none
                else "every .grad was zeros, yet weight decay and momentum still moved the "
                "parameters"
            )
            self._report(
                "step-without-grad",
                f"step {step} ran with no backward() since the last step: {effect}. Call "
                f"loss.backward() before optimizer.step(), on a loss that depends on these "
                f"parameters.",
                step,
            )

    def _after_step(self, optimizer, args, kwargs) -> None:
        self.steps += 1
        self._in_closure_step = False
        self._end_window()
        self._consumed = {id(p) for p in self._optimized if p.grad is not None}

    def _end_window(self) -> None:
        self._passes_since_step = 0
        self._window.clear()
        self._discarded_at = None
        self._clip_pending = False
        self._scheduler_mark = self._scheduler_count()

    # ------------------------------------------- scheduler, scaler, clipping
    def _scheduler_count(self) -> int:
        return self.scheduler.last_epoch if self.scheduler is not None else 0

    def _check_scheduler(self, step: int | None) -> None:
        extra = self._scheduler_count() - self._scheduler_mark
        if extra > 1:
            self._report(
                "scheduler-per-micro-batch",
                f"scheduler.step() ran {extra} times between two optimizer steps (before "
                f"{'step ' + str(step) if step else 'the end'}): the learning-rate schedule "
                f"runs {extra} times too fast. Call scheduler.step() once, right after "
                f"optimizer.step().",
                step,
            )
            self._scheduler_mark = self._scheduler_count()

    def _on_unscale(self, args, state) -> None:
        if args and args[0] is self.optimizer:
            self._unscaled = True

    def _on_update(self, args, state) -> None:
        self._unscaled = False

    def _count_steps(self, optimizer=None, *rest) -> int:
        return self.steps

    def _on_scaler_step(self, args, steps_before) -> None:
        if args and args[0] is self.optimizer and self.steps == steps_before:
            self._end_window()  # the scaler skipped the step (inf or nan): a window ended

    def _on_clip(self, parameters: list[torch.Tensor], function: str) -> None:
        ours = {id(p) for p in self._optimized}
        if not self._passes_since_step or not any(id(p) in ours for p in parameters):
            return  # nothing accumulated since the last step: not a window's gradient
        step = self.steps + 1
        self._clip_pending = True
        if self.scaler is not None and self.scaler.is_enabled() and not self._unscaled:
            self._report(
                "unscale-after-clip",
                f"{function} ran before step {step} on gradients still multiplied by the "
                f"GradScaler's scale ({self.scaler.get_scale():g}), so the threshold meant "
                f"nothing. Call scaler.unscale_(optimizer) once per window, then clip, then "
                f"scaler.step(optimizer).",
                step,
            )

    # ---------------------------------------------------------------- graphs
    def _on_backward_call(self, roots: Sequence[torch.Tensor]) -> None:
        for root in roots:
            if isinstance(root, torch.Tensor) and root.grad_fn is not None:
                sentinel = _Sentinel()
                for node in _graph_nodes_near_root(root.grad_fn):
                    node.metadata[f"loop-auditor-{id(self)}"] = sentinel
                self._graphs.append((self.steps, weakref.ref(sentinel)))

    def _check_graphs(self, older_than: int, step: int | None) -> None:
        """Report when graphs backpropagated before ``older_than`` steps ago, from at least
        three different steps, are all still alive: the mark of graphs piling up (one
        variable that lingers a few steps holds one)."""
        alive = [(s, ref) for s, ref in self._graphs if ref() is not None]
        old_steps = sorted({s for s, _ in alive if s < older_than})
        if len(old_steps) >= 3:
            self._report(
                "graph-kept-alive",
                f"the graphs of losses from {len(old_steps)} earlier steps (the first before "
                f"step {old_steps[0] + 1}) were still alive "
                f"{'at step ' + str(step) if step else 'when the loop ended'}: something "
                f"keeps every iteration's loss (for example `total_loss += loss`), so the "
                f"graphs pile up. Keep loss.item() (or loss.detach()) for logging instead.",
                step,
            )
            alive = [(s, ref) for s, ref in alive if s >= older_than]
        self._graphs = alive

    # ------------------------------------------------------------ the end
    def _finish(self) -> None:
        self._check_scheduler(None)
        self._check_graphs(older_than=self.steps - 1, step=None)
        self._report_outside_parameters(None)
        by_id = {id(p): p for p in self._optimized}
        fresh = [by_id[k] for k, state in self._window.items() if state == "fresh" and k in by_id]
        if self._passes_since_step and fresh and all(self._was_reset(p) for p in fresh):
            self._discarded_at = self._passes_since_step  # zeroed after the last backward
        if self._discarded_at is not None:
            self._report_discarded(None)
            return
        if self._passes_since_step and fresh:
            k = self.accumulation_steps
            self._report(
                "leftover-gradients",
                f"the loop ended with {self._passes_since_step} backward pass(es) after the "
                f"last step (step {self.steps}) whose gradients no step() used"
                + (
                    f": a short tail window (accumulation_steps={k}) was dropped. After the "
                    f"loop, step once more on the tail, scaled by its real size."
                    if k > 1
                    else ". Call optimizer.step() after the last backward()."
                ),
                None,
            )

    def _report_outside_parameters(self, step: int | None) -> None:
        """Parameters of the model (as it is now) holding a gradient, in no param group of
        this optimizer or of another auditor's optimizer."""
        self._known_optimized |= {
            id(p)
            for auditor in [self, *_ACTIVE]
            for group in auditor.optimizer.param_groups
            for p in group["params"]
        }
        in_groups = self._known_optimized
        outside = [
            (name, p)
            for name, p in self.model.named_parameters()
            if p.grad is not None and id(p) not in in_groups and id(p) not in self._reported_outside
        ]
        if not outside:
            return
        self._reported_outside.update(id(p) for _, p in outside)
        names = [name for name, _ in outside]
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        self._report(
            "params-not-in-optimizer",
            f"{len(names)} parameter(s) of the model received gradients but belong to no "
            f"param group of the optimizer, so step() never updates them: {shown}. Build "
            f"the optimizer after the model is complete (from model.parameters()), "
            f"add_param_group() for new layers, or requires_grad_(False) for frozen ones.",
            step,
        )


# -------------------------------------------------- module-level pass-throughs
_ACTIVE: list[LoopAuditor] = []
_ORIGINALS: dict[tuple[object, str], object] = {}
# (module, name, the argument that holds the limit): every public way to clip gradients.
_CLIP_FUNCTIONS = [
    (module, name, limit)
    for module in (torch.nn.utils, torch.nn.utils.clip_grad)
    for name, limit in (
        ("clip_grad_norm_", "max_norm"),
        ("clip_grad_value_", "clip_value"),
        ("clip_grads_with_norm_", "max_norm"),
        ("_clip_grads_with_norm_", "max_norm"),
    )
    if hasattr(module, name)
]
_clip_depth = [0]  # clip_grad_norm_ calls _clip_grads_with_norm_: report the outer call only


def _clips(limit_name: str, args: tuple, kwargs: dict) -> bool:
    """False for a call that cannot change a gradient: an infinite limit (a call that only
    measures the norm)."""
    limit = args[0] if args else kwargs.get(limit_name)
    return not (isinstance(limit, (int, float)) and math.isinf(limit))


def _install_patches() -> None:
    backward = torch.autograd.backward

    def audited_backward(tensors, *args, **kwargs):
        roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        for auditor in list(_ACTIVE):
            auditor._on_backward_call(roots)
        return backward(tensors if isinstance(tensors, torch.Tensor) else roots, *args, **kwargs)

    _ORIGINALS[(torch.autograd, "backward")] = backward
    torch.autograd.backward = audited_backward
    for module, name, limit in _CLIP_FUNCTIONS:
        clip = getattr(module, name)

        def audited_clip(parameters, *args, _clip=clip, _name=name, _limit=limit, **kwargs):
            if isinstance(parameters, torch.Tensor):
                parameters = [parameters]
            parameters = list(parameters)
            if _clip_depth[0] == 0 and _clips(_limit, args, kwargs):
                for auditor in list(_ACTIVE):
                    auditor._on_clip(parameters, _name.lstrip("_"))
            _clip_depth[0] += 1
            try:
                return _clip(parameters, *args, **kwargs)
            finally:
                _clip_depth[0] -= 1

        _ORIGINALS[(module, name)] = clip
        setattr(module, name, audited_clip)


def _remove_patches() -> None:
    for (owner, name), original in _ORIGINALS.items():
        setattr(owner, name, original)
    _ORIGINALS.clear()
