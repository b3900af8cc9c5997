"""What the auditor can report: the codes, one line each, and the :class:`Finding` record."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from loop_auditor.language import N_, _

_DESCRIPTIONS = {
    "missing-zero-grad": N_("gradients that an earlier step() had used were still in .grad"),
    "zero-grad-before-step": N_(
        "zero_grad() ran between a backward() and the step() meant to use it"
    ),
    "step-without-grad": N_("step() ran while no parameter had a gradient"),
    "window-length": N_("steps used more or fewer backward passes than accumulation_steps"),
    "cross-network-leak": N_("a step used gradients another network's loss wrote into it"),
    "scheduler-per-micro-batch": N_("the scheduler stepped more often than the optimizer"),
    "clip-per-micro-batch": N_("gradients were clipped on a micro-batch not followed by step()"),
    "unscale-after-clip": N_("clipping ran on gradients still scaled by the GradScaler"),
    "graph-kept-alive": N_("a loss from an earlier step is still referenced, graph and all"),
    "params-not-in-optimizer": N_("parameters got gradients but are in no param group"),
    "leftover-gradients": N_("the loop ended with gradients that no step() used"),
}


class _Codes(Mapping[str, str]):
    """The codes, in order, each with its one-line description in the current language
    (``GM_LANG``): read when it is looked up, so a notebook that sets the language after
    the import reads it in that language."""

    def __init__(self, descriptions: dict[str, str]):
        self._descriptions = descriptions

    def __getitem__(self, code: str) -> str:
        return _.translate(self._descriptions[code])

    def __iter__(self) -> Iterator[str]:
        return iter(self._descriptions)

    def __len__(self) -> int:
        return len(self._descriptions)

    def __repr__(self) -> str:
        return repr(dict(self))


CODES: Mapping[str, str] = _Codes(_DESCRIPTIONS)


@dataclass(frozen=True)
class Finding:
    """One problem: ``code`` (a key of :data:`CODES`), a ``message`` that says what happened
    and how to fix it, the optimizer ``step`` (1 = the first ``step()`` inside the audit)
    it concerns or ``None``, ``count``, how many times it happened, and ``optimizer``, which
    optimizer it concerns when several are audited together (``""`` otherwise)."""

    code: str
    message: str
    step: int | None
    count: int = 1
    optimizer: str = ""

    def __str__(self) -> str:
        where = (
            _("after the loop") if self.step is None else _("step {step}").format(step=self.step)
        )
        times = _(" [{count} times]").format(count=self.count) if self.count > 1 else ""
        whose = _("{optimizer}, ").format(optimizer=self.optimizer) if self.optimizer else ""
        return _("{code} ({whose}{where}){times}: {message}").format(
            code=self.code, whose=whose, where=where, times=times, message=self.message
        )


def check_codes(codes: Iterable[str], what: str = "allow") -> frozenset[str]:
    """``codes`` as a set, or a ValueError that lists the codes there are."""
    if isinstance(codes, str):
        raise TypeError(
            _("{what} must be a list of codes, not one string: {what}=[{codes}]").format(
                what=what, codes=repr(codes)
            )
        )
    try:
        codes = list(codes)
    except TypeError:
        raise TypeError(
            _("{what} must be a list of codes, got {codes}").format(what=what, codes=repr(codes))
        ) from None
    not_names = [c for c in codes if not isinstance(c, str)]
    if not_names:
        raise TypeError(
            _(
                "{what} takes code names (strings), got {code}: for example "
                "{what}=['zero-grad-before-step'], or audit.allow('zero-grad-before-step')"
            ).format(what=what, code=repr(not_names[0]))
        )
    unknown = [c for c in codes if c not in CODES]
    if unknown:
        raise ValueError(
            _("unknown code(s) in {what}: {unknown}; the codes are: {codes}").format(
                what=what, unknown=", ".join(map(repr, unknown)), codes=", ".join(CODES)
            )
        )
    return frozenset(codes)


def allow_hint(code: str) -> str:
    """The sentence a finding ends with when its pattern can also be intended."""
    return _(
        " If this is intended (per-loss gradients inspected between backward passes, as "
        "MGDA or PCGrad do), say so: LoopAuditor(..., allow=[{code}]), or wrap those lines "
        "in `with audit.allow({code}):`."
    ).format(code=repr(code))
