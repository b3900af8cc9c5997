"""The loop auditor: wrap a training loop and it reports the classic gradient bugs.

```python
with LoopAuditor(model, optimizer, accumulation_steps=4) as audit:
    ...  # your training loop, unchanged
for finding in audit.findings:
    print(finding)
```

How it sees: two hooks on each parameter (before and after a backward pass adds to its
``.grad``), the optimizer's step hooks, and the pass-throughs of :mod:`loop_auditor.patches`.
For each parameter it keeps which backward passes are summed in ``.grad`` now, so it knows
whether a gradient is fresh by who wrote it, never by its value. Hooks return nothing and
pass-throughs return what they wrap, so the trained weights are the same with and without it.
Everything is removed when the ``with`` block ends, even on an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Iterator

import torch
from torch import nn

from loop_auditor import patches, rules
from loop_auditor.findings import Finding, check_codes
from loop_auditor.language import _
from loop_auditor.names import bound_name
from loop_auditor.unwrap import accumulation_steps_of, unwrap_optimizer, unwrap_scheduler

_CONSUMED: dict[int, list[tuple[object, int]]] = {}  # pass id -> (auditor, step id) that used it
_REACHED: dict[int, list[object]] = {}  # pass id -> the auditors it reached, in the order it did


class _Grad:
    """What one parameter's ``.grad`` holds, as far as the auditor knows."""

    __slots__ = ("doubts", "manual", "passes", "ref", "stale", "version")

    def __init__(self, p: torch.Tensor, stale: bool = False):
        self.passes: list[int] = []  # backward passes summed in .grad since the last step
        self.stale = stale  # .grad still holds what an earlier step used
        self.manual = False  # .grad was assigned by the loop, not written by a backward
        # In-place changes nobody explained (p.grad.zero_() by hand, or a rescale): the value
        # ``grad.any()`` as a device tensor, read at the next step, and len(passes) then.
        self.doubts: list[tuple[torch.Tensor, int]] = []
        self.record(p)

    def record(self, p: torch.Tensor) -> None:
        grad = p.grad
        self.ref = None if grad is None else weakref.ref(grad)
        self.version = -1 if grad is None else grad._version

    def clear(self, p: torch.Tensor) -> None:
        self.passes, self.stale, self.manual, self.doubts = [], False, False, []
        self.record(p)

    def has_content(self) -> bool:
        return bool(self.passes) or self.manual or self.stale


class LoopAuditor:
    """Watches one optimizer (and the model it trains) through a training loop inside a
    ``with`` block, then lists what went wrong in ``findings`` (empty for a correct loop).

    ``optimizer`` is a torch optimizer or the wrapper a framework hands you (Accelerate's
    ``AcceleratedOptimizer``, Lightning's ``LightningOptimizer``). ``accumulation_steps`` is
    the number of micro-batches per optimizer step your loop intends; left out, it is the
    wrapper's (Accelerate's ``gradient_accumulation_steps``) or 1. Schedulers and GradScalers
    are found by themselves; passing ``scheduler`` or ``scaler`` only checks that they belong.
    ``allow`` lists codes your loop does on purpose (see :meth:`allow` for a few lines only).
    For two optimizers (a GAN), use one auditor each, both active at once, and give each a
    ``name`` for its findings: then each also sees what the other's loss leaked into it.
    ``model`` may be None: then ``params-not-in-optimizer`` is not checked here (an
    :class:`~loop_auditor.session.AuditSession` checks it without the model).

    Limits: it cannot see how a loss was scaled, the model's train/eval mode, graphs that never
    reach ``backward()``, parameters added after the block started, or a clipping function
    imported by name before the block (``from torch.nn.utils import clip_grad_value_``).
    """

    def __init__(
        self,
        model: nn.Module | None,
        optimizer,
        accumulation_steps: int | None = None,
        scheduler=None,
        scaler: torch.amp.GradScaler | None = None,
        allow=(),
        name: str = "",
    ):
        if model is not None and not isinstance(model, nn.Module):
            raise TypeError(
                _("model must be a torch.nn.Module (or None), got {type}").format(
                    type=type(model).__name__
                )
            )
        torch_optimizer = unwrap_optimizer(optimizer)
        if accumulation_steps is None:
            accumulation_steps = accumulation_steps_of(optimizer)
        self.declared = accumulation_steps is not None  #: accumulation_steps was given
        if accumulation_steps is None:
            accumulation_steps = 1
        if isinstance(accumulation_steps, bool) or not isinstance(accumulation_steps, int):
            raise TypeError(
                _(
                    "accumulation_steps must be an int (micro-batches per optimizer step), "
                    "got {value}"
                ).format(value=repr(accumulation_steps))
            )
        if accumulation_steps < 1:
            raise ValueError(
                _("accumulation_steps must be 1 or more (1 = no accumulation), got {value}").format(
                    value=accumulation_steps
                )
            )
        optimized = [p for group in torch_optimizer.param_groups for p in group["params"]]
        if model is not None:
            model_ids = {id(p) for p in model.parameters()}
            if not model_ids:
                raise ValueError(_("the model has no parameters: pass the module your loop trains"))
            if not any(id(p) in model_ids for p in optimized):
                raise ValueError(
                    _(
                        "the optimizer holds none of the model's parameters: pass the optimizer "
                        "built from this model's parameters (for a GAN, one auditor per "
                        "optimizer)"
                    )
                )
        if scheduler is not None:
            inner = unwrap_scheduler(scheduler)
            if unwrap_optimizer(inner.optimizer) is not torch_optimizer:
                raise ValueError(_("the scheduler was built for another optimizer than this one"))
        if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
            raise TypeError(
                _("scaler must be a torch.amp.GradScaler, got {type}").format(
                    type=type(scaler).__name__
                )
            )
        if not isinstance(name, str):
            raise TypeError(
                _("name must be a string (it names the optimizer), got {name}").format(
                    name=repr(name)
                )
            )

        self.model = model
        self.optimizer = torch_optimizer
        self.accumulation_steps = accumulation_steps
        self.scaler = scaler
        self.allowed = check_codes(allow)
        self.label = name  #: names the optimizer in findings (``name``), e.g. "D" in a GAN
        self._params = [p for p in optimized if p.requires_grad]
        self._handles: list = []
        self._inside = False
        self._reset()

    # ----------------------------------------------------------------- state
    def _reset(self) -> None:
        self._found: dict[str, Finding] = {}
        self.steps = 0  #: optimizer steps taken inside the audit
        self.backward_passes = 0  #: backward passes that added to the optimizer's parameters
        self.host_reads = 0  #: times the auditor read a value from the device (a sync on GPU)
        self._grads: dict[int, _Grad] = {}
        self._window: dict[int, None] = {}  # passes that added to .grad since the last step
        self._windows: list[tuple[int, int]] = []  # (step, backward passes it used)
        self._scoped: list[frozenset[str]] = []
        self._window_allows: set[str] = set()
        self._pending: tuple[list[int], int] | None = None
        self._closure_calls = 0
        self._closure_size: int | None = None
        self._skip_next_step_checks = False  # set when the auditor joined in mid-window
        self._touched: list[torch.Tensor] = []
        self._pass_scaler = None
        self._scaled_by = None
        self._unscaled = False
        self._clip_pending = False
        self._scheduler_steps = 0
        self._scheduler_mark = 0
        self._scheduler_names: dict[int, str] = {}  # how the loop calls each scheduler's step()
        self._schedulers_since_mark: dict[int, None] = {}
        self._graphs: list[tuple[int, weakref.ref]] = []
        self._outside: dict[int, tuple[str, torch.Tensor, int | None]] = {}

    @property
    def findings(self) -> list[Finding]:
        """What went wrong, one finding per code, in the order first seen."""
        return list(self._found.values())

    @property
    def codes(self) -> list[str]:
        """The codes of :attr:`findings`."""
        return list(self._found)

    def _report(self, finding: Finding | None) -> None:
        if finding is None:
            return
        if finding.code in self.allowed or finding.code in self._window_allows:
            return
        old = self._found.get(finding.code)
        if old is None:
            self._found[finding.code] = dataclasses.replace(finding, optimizer=self.label)
        else:
            self._found[finding.code] = dataclasses.replace(old, count=old.count + 1)

    def __str__(self) -> str:
        if not self._found:
            return _("No findings ({steps} steps, {passes} backward passes).").format(
                steps=self.steps, passes=self.backward_passes
            )
        return "\n".join(str(f) for f in self._found.values())

    @contextlib.contextmanager
    def allow(self, *codes: str) -> Iterator[None]:
        """Declare a pattern intended for the lines inside: findings with these codes are not
        reported for the optimizer step whose window these lines belong to. For per-loss
        gradients inspected between backward passes (MGDA)::

            with audit.allow("zero-grad-before-step"):
                for loss in losses:
                    optimizer.zero_grad()
                    loss.backward(retain_graph=True)
                    grads.append([p.grad.clone() for p in shared])
        """
        if not self._inside:
            raise RuntimeError(
                _(
                    "audit.allow(...) works inside the auditor's block: "
                    "with LoopAuditor(...) as audit: ... with audit.allow(code): ..."
                )
            )
        scope = check_codes(codes, what="allow()")
        if not scope:
            raise ValueError(
                _("name the code(s) to allow, e.g. audit.allow('zero-grad-before-step')")
            )
        self._scoped.append(scope)
        self._window_allows |= scope
        try:
            yield
        finally:
            if scope in self._scoped:
                self._scoped.remove(scope)
            if not self._window:  # the scope ended with a step: the new window is not in it
                self._window_allows = set().union(*self._scoped)

    # ----------------------------------------------------------- enter, exit
    def __enter__(self) -> LoopAuditor:
        if self._inside:
            raise RuntimeError(_("this LoopAuditor is already in use; make a new one"))
        self._reset()
        self._inside = True
        for p in self._params:
            record = self._grads[id(p)] = _Grad(p, stale=p.grad is not None)
            if p.grad is not None:  # stale unless it is all zeros: read at the first step
                record.doubts.append((p.grad.detach().any(), 0))
            self._handles.append(p.register_hook(lambda _, p=p: self._before_accumulate(p)))
            self._handles.append(p.register_post_accumulate_grad_hook(self._after_accumulate))
        self._handles.append(self.optimizer.register_step_pre_hook(self._before_step))
        self._handles.append(self.optimizer.register_step_post_hook(self._after_step))
        patches.activate(self)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._finish(aborted=exc[0] is not None)
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles.clear()
            patches.deactivate(self)
            if not patches.ACTIVE:  # siblings still finishing need what this one stepped on
                _CONSUMED.clear()
                _REACHED.clear()
            self._inside = False

    # ------------------------------------------------------ what .grad holds
    def _observe(self, p: torch.Tensor) -> None:
        """Bring the record of ``p.grad`` up to date with what happened to it since: set to
        None, replaced by another tensor, or changed in place by code the auditor does not
        know (judged by its value at the next step, in one read for all parameters)."""
        record = self._grads[id(p)]
        grad = p.grad
        if grad is None:
            record.clear(p)
        elif record.ref is None or record.ref() is not grad:
            # Assigned by the loop (PCGrad writing its result), or re-pointed by a framework
            # (DDP into its buckets): what it holds is judged like an in-place change.
            record.manual, record.stale = True, False  # whatever it was, it is gone
            record.doubts.append((grad.detach().any(), len(record.passes)))
            record.record(p)
        elif grad._version != record.version:
            record.doubts.append((grad.detach().any(), len(record.passes)))
            record.version = grad._version

    def _resolve(self) -> None:
        """Read every pending doubt at once (one read per device): a gradient that was all
        zeros at an unexplained change had been reset then."""
        flags = [flag for r in self._grads.values() for flag, _ in r.doubts]
        if not flags:
            return
        by_device: dict[torch.device, list[int]] = {}
        for i, flag in enumerate(flags):
            by_device.setdefault(flag.device, []).append(i)
        nonzero = [True] * len(flags)
        for indices in by_device.values():
            read = torch.stack([flags[i] for i in indices]).tolist()  # the one sync
            self.host_reads += 1
            for i, value in zip(indices, read, strict=True):
                nonzero[i] = bool(value)
        i = 0
        for record in self._grads.values():
            start = None
            for _flag, at in record.doubts:
                if not nonzero[i]:
                    start = at
                i += 1
            if start is not None:
                record.passes = record.passes[start:]
                record.stale = record.manual = False
            record.doubts = []

    def _before_accumulate(self, p: torch.Tensor) -> None:
        """Before a backward pass adds to ``p.grad`` (``torch.autograd.grad`` runs this too,
        and adds nothing): note what happened to ``.grad`` since it was last seen."""
        self._observe(p)

    def _after_accumulate(self, p: torch.Tensor) -> None:
        pass_id = patches.current_pass()
        if pass_id not in self._window:
            if self._clip_pending:
                self._report(rules.clip_per_micro_batch(self.steps + 1))
                self._clip_pending = False
            self._window[pass_id] = None
            self.backward_passes += 1
            _REACHED.setdefault(pass_id, []).append(self)
            if len(_REACHED) > 4096:
                for old in list(_REACHED)[:2048]:
                    del _REACHED[old]
            if self._pass_scaler is not None:
                self._scaled_by = self._pass_scaler
        record = self._grads[id(p)]
        if not record.passes or record.passes[-1] != pass_id:
            record.passes.append(pass_id)
        record.record(p)
        self._touched.append(p)

    # ------------------------------------------------ events from the patches
    def _on_backward_start(self, roots, scaler) -> None:
        self._pass_scaler = scaler
        for root in roots:
            if isinstance(root, torch.Tensor) and root.grad_fn is not None:
                sentinel = _Sentinel()
                for node in patches.nodes_near_root(root.grad_fn):
                    node.metadata[f"loop-auditor-{id(self)}"] = sentinel
                self._graphs.append((self.steps, weakref.ref(sentinel)))

    def _on_backward_end(self) -> None:
        """After a whole backward call: what DDP (or any hook) wrote into .grad during it
        belongs to this pass."""
        for p in self._touched:
            self._grads[id(p)].record(p)
        self._touched.clear()
        self._pass_scaler = None

    def _on_known_reset(self, parameters) -> None:
        for p in parameters:
            record = self._grads.get(id(p))
            if record is not None:
                record.clear(p)

    def _on_known_edit(self, parameters) -> None:
        for p in parameters:
            record = self._grads.get(id(p))
            if record is not None and record.ref is not None and record.ref() is p.grad:
                record.record(p)

    def _ours(self, optimizer) -> bool:
        try:
            return unwrap_optimizer(optimizer) is self.optimizer
        except TypeError:
            return False

    def _on_unscale(self, scaler, optimizer) -> None:
        if self._ours(optimizer):
            self._unscaled = True
            self._on_known_edit(self._params)

    def _on_scaler_update(self, scaler) -> None:
        self._unscaled = False

    def _on_scaler_step(self, scaler, optimizer, stepped: bool) -> None:
        if not self._ours(optimizer):
            return
        self._on_known_edit(self._params)
        if not stepped:
            # inf or nan in the gradients: the scaler skipped step(); the window still ended
            self._check_before_step(self.steps + 1)
            kept, size = self._check_window(self.steps + 1)
            self._consume(kept)
            self._windows.append((self.steps + 1, size))
            self._end_window()

    def _on_scheduler_step(self, scheduler) -> None:
        if self._ours(getattr(scheduler, "optimizer", None)):
            self._scheduler_steps += 1
            if id(scheduler) not in self._scheduler_names:  # found once per scheduler
                name, cls = bound_name(scheduler), type(scheduler).__name__
                self._scheduler_names[id(scheduler)] = (
                    f"{name}.step() ({cls})" if name else f"{cls}.step()"
                )
            self._schedulers_since_mark[id(scheduler)] = None

    def _check_scheduler(self, step: int | None) -> None:
        """The scheduler steps since the last optimizer step (``step`` None: at the end)."""
        names = " and ".join(self._scheduler_names[i] for i in self._schedulers_since_mark)
        extra = self._scheduler_steps - self._scheduler_mark
        self._report(rules.scheduler_per_micro_batch(step, extra, names or "scheduler.step()"))
        self._mark_scheduler()

    def _mark_scheduler(self) -> None:
        self._scheduler_mark = self._scheduler_steps
        self._schedulers_since_mark = {}

    def _on_clip(self, parameters, function: str) -> None:
        ours = [p for p in parameters if id(p) in self._grads]
        if not self._window or not ours:
            return  # nothing accumulated since the last step: not a window's gradient
        step = self.steps + 1
        self._clip_pending = True
        scaler = self._scaled_by or self.scaler
        if scaler is not None and scaler.is_enabled() and not self._unscaled:
            self._report(rules.unscale_after_clip(step, function, scaler.get_scale()))

    # ------------------------------------------------------------------ step
    def _before_step(self, optimizer, args, kwargs):
        step = self.steps + 1
        if self._skip_next_step_checks:  # joined at this step: its window was not seen
            self._skip_next_step_checks = False
            self._pending = ([], 0)
            return None
        self._check_before_step(step)
        closure = args[1] if len(args) > 1 else kwargs.get("closure")
        if closure is None:  # step(None), as Accelerate calls it, is a plain step
            self._pending = self._check_window(step)
            return None
        closure_of = type(self.optimizer).__name__
        # A closure (LBFGS, Lightning) runs forward and backward inside step(), maybe several
        # times: check the window after each call, on what that call's backward produced.
        self._closure_calls = 0
        self._closure_size = None

        def audited_closure(*a, **kw):
            result = closure(*a, **kw)
            self._closure_calls += 1
            kept, size = self._check_window(step, closure=closure_of)
            if self._closure_calls == 1:
                self._closure_size = size
            self._consume(kept)
            self._end_window()
            return result

        if len(args) > 1:
            return (args[0], audited_closure, *args[2:]), kwargs
        return args, {**kwargs, "closure": audited_closure}

    def _after_step(self, optimizer, args, kwargs) -> None:
        self.steps += 1
        if self._pending is not None:
            kept, size = self._pending
            self._consume(kept)
            if size:
                self._windows.append((self.steps, size))
        elif self._closure_calls == 1 and self._closure_size:
            self._windows.append((self.steps, self._closure_size))
        elif self._closure_calls == 0:  # a closure the optimizer never called
            self._consume(self._check_window(self.steps)[0])
        self._pending = None
        self._closure_calls = 0
        self._on_known_edit(self._params)
        self._end_window()

    def _check_before_step(self, step: int) -> None:
        self._check_scheduler(step)
        self._check_graphs(older_than=self.steps - 1, step=step)
        self._report_outside_parameters(step)

    def _window_state(self):
        """(kept, own lost, all_none): the window's passes still in .grad, those of its own
        passes reset before a step used them (another optimizer's are its business), and
        whether every .grad is None."""
        for p in self._params:
            self._observe(p)
        self._resolve()
        contents = {b for r in self._grads.values() for b in r.passes}
        kept = [b for b in self._window if b in contents]
        lost = [b for b in self._window if b not in contents and not self._used_elsewhere(b)]
        all_none = all(p.grad is None for p in self._params)
        return kept, lost, all_none

    def _check_window(self, step: int, closure: str = "") -> tuple[list[int], int]:
        """The step checks; returns the passes the step uses and the window's size.
        ``closure``: the optimizer's class, when this checks what a call of its closure did."""
        kept, lost, all_none = self._window_state()
        k = self.accumulation_steps
        stale = sum(r.stale for r in self._grads.values())
        manual = any(r.manual for r in self._grads.values())
        if self._window or manual:
            self._report(rules.missing_zero_grad(step, stale, len(self._params), k, closure))
        size = sum(not self._used_elsewhere(b) for b in kept)  # another network's: not ours
        if lost and not kept and not manual:
            self._report(rules.reset_after_last_backward(step, all_none, closure))
            size += len(lost)
        elif lost:
            finding = rules.discarded_passes(step, lost, kept, k, closure)
            self._report(finding)
            if finding.code == "zero-grad-before-step":
                size += len(lost)
        elif not self._window and not manual:
            self._report(rules.step_without_grad(step, all_none, stale > 0, closure))
        self._check_leak(step, kept)
        return kept, size

    def _used_elsewhere(self, pass_id: int) -> bool:
        """Whether another optimizer took this pass: an audited one stepped on it, or any
        other optimizer stepped after it (one of a GAN's two, the other not audited)."""
        if any(user is not self for user, _ in _CONSUMED.get(pass_id, ())):
            return True
        return patches.other_stepped_after(pass_id, self.optimizer)

    def _check_leak(self, step: int, kept: list[int]) -> None:
        """A pass another optimizer stepped on, used here with passes from after that step.
        Which of the two networks that pass reached first says which fix applies."""
        for pass_id in kept:
            for user, stepped_at in _CONSUMED.get(pass_id, ()):
                if user is not self and any(b > stepped_at for b in kept):
                    leaked = sum(1 for b in kept if any(u is user for u, _ in _CONSUMED.get(b, ())))
                    order = [id(a) for a in _REACHED.get(pass_id, ())]
                    first = (
                        order.index(id(self)) < order.index(id(user))
                        if id(self) in order and id(user) in order
                        else None
                    )
                    self._report(rules.cross_network_leak(step, leaked, user._name(), first))
                    return

    def _name(self) -> str:
        return self.label or _("the other audited optimizer ({type})").format(
            type=type(self.optimizer).__name__
        )

    def _consume(self, kept: list[int]) -> None:
        """The step used what .grad holds: from now on it is stale until reset."""
        step_id = patches.next_id()
        for pass_id in kept:
            _CONSUMED.setdefault(pass_id, []).append((self, step_id))
        if len(_CONSUMED) > 4096:
            for old in list(_CONSUMED)[:2048]:
                del _CONSUMED[old]
        for p in self._params:
            record = self._grads[id(p)]
            if record.has_content():
                record.passes, record.manual, record.stale = [], False, True
            record.record(p)

    def _end_window(self) -> None:
        self._window.clear()
        self._clip_pending = False
        self._scaled_by = None
        self._mark_scheduler()
        self._window_allows = set().union(*self._scoped)

    # ---------------------------------------------------------------- graphs
    def _check_graphs(self, older_than: int, step: int | None) -> None:
        """Report when graphs backpropagated before ``older_than`` steps ago, from at least
        three different steps, are all still alive: the mark of graphs piling up (one
        variable that lingers a few steps holds one)."""
        alive = [(s, ref) for s, ref in self._graphs if ref() is not None]
        old_steps = sorted({s for s, _ in alive if s < older_than})
        finding = rules.graph_kept_alive(step, old_steps)
        if finding is not None:
            self._report(finding)
            alive = [(s, ref) for s, ref in alive if s >= older_than]
        self._graphs = alive

    # ------------------------------------------------------------ the end
    def _finish(self, aborted: bool = False) -> None:
        self._check_scheduler(None)
        self._check_graphs(older_than=self.steps - 1, step=None)
        self._report_outside_parameters(None)
        kept, lost, _ = self._window_state()
        own = [b for b in kept if not self._used_elsewhere(b)] + lost
        if own and not aborted:  # an error cut the last window short: not a dropped tail
            self._report(rules.leftover_at_end(len(own), self.steps, self.accumulation_steps))
        self._report(rules.window_length(self._windows, self.accumulation_steps, self.declared))

    def _report_outside_parameters(self, step: int | None) -> None:
        """Parameters of the model (as it is now) holding a gradient, in no param group of
        this optimizer or of another auditor's: noted at each step, reported at the end if
        no optimizer that stepped during the block holds them either."""
        if self.model is None:
            return
        known = {
            id(p)
            for optimizer in [a.optimizer for a in [self, *patches.ACTIVE]]
            + patches.stepped_optimizers()
            for group in optimizer.param_groups
            for p in group["params"]
        }
        for name, p in self.model.named_parameters():
            if p.grad is not None and id(p) not in known and id(p) not in self._outside:
                self._outside[id(p)] = (name, p, step)
        for key in [k for k in self._outside if k in known]:
            del self._outside[key]  # another optimizer holds it after all
        if step is None and self._outside:
            names = [name for name, _, _ in self._outside.values()]
            first = min((s for _, _, s in self._outside.values() if s is not None), default=None)
            self._report(rules.params_not_in_optimizer(first, names))


class _Sentinel:
    """Stored in a loss's graph node metadata; it dies when the graph does."""
