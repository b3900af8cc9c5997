"""Parameters left out of every optimizer, found without knowing the model: what lets
:class:`~loop_auditor.session.AuditSession` (and so the command) report
``params-not-in-optimizer``.

Which ``nn.Parameter`` objects exist: those built inside the session (``nn.Parameter``'s
constructor and module registration are watched while it runs), and, once an optimizer holds a
parameter built before it, every parameter alive then (one pass over the garbage collector's
objects). Which of them received a gradient: a post-accumulate-grad hook on each one that
requires a gradient and that no audited optimizer holds, so the hook fires only in a
``backward()`` (``torch.autograd.grad`` writes no ``.grad`` and fires none). A parameter held
when an optimizer is adopted is let go at once, so a loop whose optimizers hold every trainable
parameter carries no hook at all. A frozen (or lazy) parameter is looked at again before each
``backward()``: unfrozen, it gets its hook then.

Whether it was held is decided at the end, over every audited optimizer (its param groups then
and when it was adopted) and every optimizer that stepped: a parameter added later with
``add_param_group()`` counts as held. A parameter is
named as its model names it (``fc2.weight``), by a pass over the live modules when it first
received a gradient outside every optimizer (a buggy loop only), else by its shape and dtype;
one of a model that no optimizer trains also names the model, by the script's variable for it
(``teacher.weight``) or its class.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import weakref
from collections.abc import Callable, Iterable

import torch
from torch import nn
from torch.nn.modules.module import register_module_parameter_registration_hook
from torch.nn.parameter import is_lazy

from loop_auditor import patches
from loop_auditor.language import _
from loop_auditor.names import bound_name

# Attributes under which a wrapper keeps the model it wraps, whole: DDP and DataParallel
# (``module``), torch.compile (``_orig_mod``), Lightning's strategy wrapper (``_forward_module``).
_WRAPPED = ("module", "_orig_mod", "_forward_module")


@dataclasses.dataclass
class Received:
    """A parameter that received a gradient while no optimizer held it."""

    param: torch.Tensor
    name: str  # its qualified name in its model, or its shape and dtype
    order: tuple  # where it comes in its model, to list the names in the model's order
    owner: object | None  # the auditor of the optimizer that trains the rest of its model
    step: int | None  # the owner's step whose window it was first seen in


def describe(p: torch.Tensor) -> str:
    """A parameter no module names: its dtype and shape."""
    dtype = str(p.dtype).removeprefix("torch.")
    return _("a {dtype} parameter of shape {shape}").format(dtype=dtype, shape=tuple(p.shape))


def _objects_of(kind: type) -> list:
    """Every live object whose type is ``kind`` or a subclass, from the garbage collector's
    list (the filter runs in C: a few tens of milliseconds for a few hundred thousand
    objects)."""
    objects = gc.get_objects()
    kinds = {t for t in set(map(type, objects)) if issubclass(t, kind)}
    found = list(itertools.compress(objects, map(kinds.__contains__, map(type, objects))))
    del objects
    return found


def _children(module: nn.Module) -> dict:
    return vars(module).get("_modules") or {}


def _count(module: nn.Module) -> int:
    return sum(1 for _ in module.parameters())


def _unwrap(root: nn.Module) -> nn.Module:
    """The model inside a wrapper that holds nothing else (DDP's ``module``)."""
    for _depth in range(4):
        for attribute in _WRAPPED:
            child = _children(root).get(attribute)
            if isinstance(child, nn.Module) and _count(child) == _count(root):
                root = child
                break
        else:
            return root
    return root


def model_names(params: list[torch.Tensor], held: set[int]) -> dict[int, tuple]:
    """For the parameters that a live model holds: ``(name, order, model)``, the name the
    outermost module holding it gives it (past a wrapper such as DDP), preferring a model
    that some optimizer also trains."""
    wanted = {id(p) for p in params}
    modules = _objects_of(nn.Module)
    inner = {id(child) for m in modules for child in _children(m).values() if child is not None}
    found: dict[int, tuple] = {}
    for index, root in enumerate(m for m in modules if id(m) not in inner):
        try:
            model = _unwrap(root)
            named = list(model.named_parameters())
        except Exception:  # a module that cannot list its parameters names nothing
            continue
        trained = any(id(q) in held for _, q in named)
        for position, (name, q) in enumerate(named):
            if id(q) in wanted and (id(q) not in found or (trained and not found[id(q)][3])):
                found[id(q)] = (name, (index, position), model, trained)
    return {key: value[:3] for key, value in found.items()}


class LeftOutWatch:
    """Inside an :class:`~loop_auditor.session.AuditSession`: which parameters received a
    gradient in ``backward()`` and are held by no optimizer. ``auditors`` returns the
    session's auditors (their optimizers are the audited ones)."""

    def __init__(self, auditors: Callable[[], list]):
        self._auditors = auditors
        self._known: dict[int, weakref.ref] = {}  # every parameter seen, by id
        self._pending: dict[int, weakref.ref] = {}  # not held, not hooked yet (frozen, lazy)
        self._hooks: dict[int, object] = {}  # the hooked ones: their handles
        self._held: set[int] = set()  # ever held by an adopted optimizer
        self._new: dict[int, torch.Tensor] = {}  # hooked ones that received a gradient since
        self.received: dict[int, Received] = {}  #: outside every optimizer when first seen
        self._scanned = False
        self._original_new = None
        self._registration = None

    # -------------------------------------------------------- start, stop
    def start(self) -> None:
        original = nn.Parameter.__dict__["__new__"]
        self._original_new = original
        make = original.__func__

        def __new__(cls, *args, **kwargs):
            p = make(cls, *args, **kwargs)
            self.discover(p)
            return p

        nn.Parameter.__new__ = staticmethod(__new__)
        # lazy modules build their UninitializedParameter without that constructor
        self._registration = register_module_parameter_registration_hook(
            lambda module, name, p: self.discover(p) if p is not None else None
        )
        patches.WATCHERS.append(self)

    def stop(self) -> None:
        nn.Parameter.__new__ = self._original_new
        self._registration.remove()
        if self in patches.WATCHERS:
            patches.WATCHERS.remove(self)
        for handle in list(self._hooks.values()):
            handle.remove()
        self._hooks.clear()
        self._known.clear()
        self._pending.clear()
        self._new.clear()

    # ---------------------------------------------------------- discovery
    def discover(self, p: torch.Tensor) -> None:
        key = id(p)
        ref = self._known.get(key)
        if ref is not None and ref() is p:
            return
        ref = weakref.ref(p, lambda dead, key=key: self._forget(key, dead))
        self._known[key] = ref
        self._pending[key] = ref
        self._held.discard(key)  # the id of a parameter that died, reused

    def _forget(self, key: int, ref: weakref.ref) -> None:
        """A parameter died (its id may be reused). Called whenever the garbage collector
        runs, so it changes no dict that is being iterated: :meth:`_examine` drops it from
        the pending ones."""
        if self._known.get(key) is ref:
            del self._known[key]
            self._hooks.pop(key, None)

    def _scan(self) -> None:
        """Every parameter alive now: an optimizer holds parameters built before the
        session, so their model may hold others the session never saw built."""
        self._scanned = True
        for p in _objects_of(nn.Parameter):
            self.discover(p)

    def on_adopt(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer is audited from now on: its parameters are held."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if not self._scanned and any(
            (ref := self._known.get(id(p))) is None or ref() is not p for p in params
        ):
            self._scan()
        for p in params:
            self._held.add(id(p))
            self._let_go(p)
        self._examine()

    def _let_go(self, p: torch.Tensor) -> None:
        """Stop watching ``p``: it is held, or known to be outside."""
        key = id(p)
        self._pending.pop(key, None)
        handle = self._hooks.pop(key, None)
        if handle is not None:
            handle.remove()

    def _examine(self) -> None:
        """Hook the parameters that may receive a gradient now: those that require one,
        built (not lazy), and held by no optimizer the session adopted. Runs before each
        backward pass while some are pending (a frozen backbone): one cheap look at each."""
        held = self._held
        changed = [
            key
            for key, ref in self._pending.items()
            if key in held or (p := ref()) is None or p.requires_grad
        ]
        for key in changed:
            ref = self._pending.pop(key)
            p = ref()
            if p is None or key in held:
                continue
            if is_lazy(p):  # not built yet: its first forward pass builds it
                self._pending[key] = ref
            else:
                self._hooks[key] = p.register_post_accumulate_grad_hook(self._accumulated)

    def _on_backward_start(self) -> None:
        if self._pending:
            self._examine()

    def _accumulated(self, p: torch.Tensor) -> None:
        self._new[id(p)] = p

    # ----------------------------------------------------------- judging
    def held(self) -> set[int]:
        """Every parameter of an audited optimizer, now or when it was adopted (mixed
        precision with fp32 master weights, as apex's O2 does, puts fp32 copies in the param
        groups of the optimizer built over the model), or of any optimizer that stepped."""
        optimizers = [a.optimizer for a in self._auditors()] + patches.stepped_optimizers()
        now = {id(p) for o in optimizers for group in o.param_groups for p in group["params"]}
        return now | self._held

    def settle(self, owner_step: bool = True) -> None:
        """Judge the parameters that received a gradient since the last call: held after all
        (an optimizer adopted since, or ``add_param_group()``), or outside every optimizer,
        then named while their model is alive. ``owner_step``: a step is about to run (the
        window's step is then its owner's next), else the block is ending."""
        if not self._new:
            return
        new, self._new = list(self._new.values()), {}
        held = self.held()
        outside = []
        for p in new:
            self._let_go(p)
            if id(p) not in held and id(p) not in self.received:
                outside.append(p)
        if not outside:
            return
        names = model_names(outside, held)
        auditors = self._auditors()
        for p in outside:
            name, order, model = names.get(id(p), (describe(p), (float("inf"), 0), None))
            owner = _owner(model, auditors) if model is not None else None
            if model is not None and owner is None:  # no optimizer's model: name the model
                name = f"{bound_name(model) or type(model).__name__}.{name}"
            step = owner.steps + 1 if owner is not None and owner_step else None
            self.received[id(p)] = Received(p, name, order, owner, step)

    def left_out(self) -> dict[object | None, list[Received]]:
        """At the end: the parameters still outside every optimizer, by owner (None: no
        optimizer trains their model, or no model holds them), in their model's order."""
        self.settle(owner_step=False)
        held = self.held()
        by_owner: dict[object | None, list[Received]] = {}
        for record in sorted(self.received.values(), key=lambda r: r.order):
            if id(record.param) not in held:
                by_owner.setdefault(record.owner, []).append(record)
        return by_owner


def _owner(model: nn.Module, auditors: Iterable) -> object | None:
    """The first auditor whose optimizer trains some of ``model``'s parameters."""
    ids = {id(p) for p in model.parameters()}
    for auditor in auditors:
        if any(id(p) in ids for g in auditor.optimizer.param_groups for p in g["params"]):
            return auditor
    return None
