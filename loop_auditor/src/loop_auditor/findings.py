"""What the auditor can report: the codes, one line each, and the :class:`Finding` record."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

CODES = {
    "missing-zero-grad": "gradients that an earlier step() had used were still in .grad",
    "zero-grad-before-step": "zero_grad() ran between a backward() and the step() meant to use it",
    "step-without-grad": "step() ran while no parameter had a gradient",
    "window-length": "steps used more or fewer backward passes than accumulation_steps",
    "cross-network-leak": "a step used gradients another network's loss wrote into it",
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
    it concerns or ``None``, ``count``, how many times it happened, and ``optimizer``, which
    optimizer it concerns when several are audited together (``""`` otherwise)."""

    code: str
    message: str
    step: int | None
    count: int = 1
    optimizer: str = ""

    def __str__(self) -> str:
        where = "after the loop" if self.step is None else f"step {self.step}"
        times = f" [{self.count} times]" if self.count > 1 else ""
        whose = f"{self.optimizer}, " if self.optimizer else ""
        return f"{self.code} ({whose}{where}){times}: {self.message}"


def check_codes(codes: Iterable[str], what: str = "allow") -> frozenset[str]:
    """``codes`` as a set, or a ValueError that lists the codes there are."""
    if isinstance(codes, str):
        raise TypeError(f"{what} must be a list of codes, not one string: {what}=[{codes!r}]")
    try:
        codes = list(codes)
    except TypeError:
        raise TypeError(f"{what} must be a list of codes, got {codes!r}") from None
    not_names = [c for c in codes if not isinstance(c, str)]
    if not_names:
        raise TypeError(
            f"{what} takes code names (strings), got {not_names[0]!r}: for example "
            f"{what}=['zero-grad-before-step'], or audit.allow('zero-grad-before-step')"
        )
    unknown = [c for c in codes if c not in CODES]
    if unknown:
        raise ValueError(
            f"unknown code(s) in {what}: {', '.join(map(repr, unknown))}; "
            f"the codes are: {', '.join(CODES)}"
        )
    return frozenset(codes)


def allow_hint(code: str) -> str:
    """The sentence a finding ends with when its pattern can also be intended."""
    return (
        f" If this is intended (per-loss gradients inspected between backward passes, as "
        f"MGDA or PCGrad do), say so: LoopAuditor(..., allow=[{code!r}]), or wrap those lines "
        f"in `with audit.allow({code!r}):`."
    )
