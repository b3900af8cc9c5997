"""Audit every optimizer of a piece of code, without naming them: what the command runs, and
the way to audit code that builds its optimizers itself (Lightning's ``trainer.fit``).

```python
with AuditSession(accumulation_steps=4) as session:
    trainer.fit(model)
print(session)
```
"""

from __future__ import annotations

import functools

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from loop_auditor import rules
from loop_auditor.auditor import LoopAuditor
from loop_auditor.findings import Finding, check_codes
from loop_auditor.language import _
from loop_auditor.left_out import LeftOutWatch
from loop_auditor.names import assigned_name, bound_name
from loop_auditor.unwrap import unwrap_optimizer


class AuditSession:
    """Inside the ``with`` block, every optimizer that is built gets a :class:`LoopAuditor`
    from its first line on; one built before the block gets one at its first ``step()`` (its
    first window is then not checked). Each auditor finds its schedulers and GradScalers by
    itself. ``findings`` gathers them all, each naming its optimizer: by the variable the code
    assigns it to (``optimizerD``), else by order and class ("optimizer 1 (Adam)").

    Without knowing the model, it also reports ``params-not-in-optimizer``: every
    ``nn.Parameter`` that received a gradient from a ``backward()`` in the block and is, at the
    end, in no param group of an audited optimizer or of one that stepped (one added with
    ``add_param_group()`` counts; a frozen one receives no gradient). The finding names them as
    their model does (``fc2.weight``) and goes to the optimizer that trains the rest of that
    model; with no such optimizer it names no optimizer. See :mod:`loop_auditor.left_out`."""

    def __init__(self, accumulation_steps: int | None = None, allow=()):
        if accumulation_steps is not None and (
            isinstance(accumulation_steps, bool) or not isinstance(accumulation_steps, int)
        ):
            raise TypeError(
                _("accumulation_steps must be an int, got {value}").format(
                    value=repr(accumulation_steps)
                )
            )
        if accumulation_steps is not None and accumulation_steps < 1:
            raise ValueError(
                _("accumulation_steps must be 1 or more, got {value}").format(
                    value=accumulation_steps
                )
            )
        self.accumulation_steps = accumulation_steps
        self.allow = check_codes(allow)
        self.auditors: list[LoopAuditor] = []
        self._adopted: set[int] = set()
        self._original_init = None
        self._hook = None
        self._watch: LeftOutWatch | None = None
        self._own: list[Finding] = []  # findings of no optimizer: params no optimizer trains
        #: set when the audited code failed: its last window is then not a dropped tail
        self.aborted = False

    @property
    def findings(self) -> list[Finding]:
        return [f for auditor in self.auditors for f in auditor.findings] + self._own

    @property
    def steps(self) -> int:
        return sum(a.steps for a in self.auditors)

    def summary(self) -> str:
        """What was audited: ``2 optimizers, 6 steps``."""
        n, steps = len(self.auditors), self.steps
        optimizers = (_("{n} optimizers") if n != 1 else _("{n} optimizer")).format(n=n)
        steps_taken = (_("{steps} steps") if steps != 1 else _("{steps} step")).format(steps=steps)
        return _("{optimizers}, {steps}").format(optimizers=optimizers, steps=steps_taken)

    def report(self, where: str, who: str | None = None) -> str:
        """The findings as the command and the pytest fixture print them: a line that names
        ``where`` and what was audited, then a finding a line; or that there are none.
        ``who`` begins the first line (default: "loop auditor", in the current language)."""
        findings = self.findings
        who = _("loop auditor") if who is None else who
        if not findings:
            return _("{who}: no findings in {where} ({summary}).").format(
                who=who, where=where, summary=self.summary()
            )
        lines = [
            _("{who}: {count} finding(s) in {where} ({summary}):").format(
                who=who, count=len(findings), where=where, summary=self.summary()
            )
        ]
        return "\n".join(lines + [f"  {finding}" for finding in findings])

    def __str__(self) -> str:
        if not self.findings:
            n = len(self.auditors)
            optimizers = (_("{n} optimizers") if n != 1 else _("{n} optimizer")).format(n=n)
            return _("No findings ({optimizers}, {steps} steps, {passes} backward passes).").format(
                optimizers=optimizers,
                steps=self.steps,
                passes=sum(a.backward_passes for a in self.auditors),
            )
        return "\n".join(str(f) for f in self.findings)

    def _adopt(self, optimizer: torch.optim.Optimizer, late: bool = False) -> None:
        if id(optimizer) in self._adopted or unwrap_optimizer(optimizer) is not optimizer:
            return  # seen, or a wrapper (Accelerate's) around an optimizer audited already
        self._adopted.add(id(optimizer))
        auditor = LoopAuditor(
            None, optimizer, accumulation_steps=self.accumulation_steps, allow=self.allow
        )
        auditor.label = self._label(optimizer, late)
        auditor.__enter__()
        if late:
            auditor._skip_next_step_checks = True
        self.auditors.append(auditor)
        self._watch.on_adopt(optimizer)

    def _label(self, optimizer: torch.optim.Optimizer, late: bool) -> str:
        """The script's name for ``optimizer``: the variable its construction is assigned to,
        or (adopted at its first step) the one the stepping code holds it in; a name given
        twice (an optimizer rebuilt each epoch) gets its count. Else its order and class."""
        name = bound_name(optimizer) if late else assigned_name(optimizer)
        if not name:
            return _("optimizer {n} ({type})").format(
                n=len(self.auditors) + 1, type=type(optimizer).__name__
            )
        same = sum(a.label == name or a.label.startswith(f"{name} #") for a in self.auditors)
        return f"{name} #{same + 1}" if same else name

    def __enter__(self) -> AuditSession:
        if self._hook is not None:
            raise RuntimeError(_("this AuditSession is already in use; make a new one"))
        self.auditors, self._adopted, self._own = [], set(), []
        self.aborted = False
        self._watch = LeftOutWatch(lambda: self.auditors)
        self._watch.start()
        original = torch.optim.Optimizer.__init__
        self._original_init = original

        @functools.wraps(original)
        def __init__(optimizer, *args, **kwargs):
            original(optimizer, *args, **kwargs)
            self._adopt(optimizer)

        torch.optim.Optimizer.__init__ = __init__

        def adopt_late(optimizer, args, kwargs):
            self._adopt(optimizer, late=True)
            self._watch.settle()

        self._hook = register_optimizer_step_pre_hook(adopt_late)
        return self

    def __exit__(self, *exc) -> None:
        torch.optim.Optimizer.__init__ = self._original_init
        self._hook.remove()
        self._hook = None
        errors = []
        try:
            self._report_left_out()
        except Exception as error:
            errors.append(error)
        finally:
            self._watch.stop()
        failed = exc if exc[0] is not None else (RuntimeError, None, None) if self.aborted else exc
        for auditor in reversed(self.auditors):
            try:
                auditor.__exit__(*failed)
            except Exception as error:  # finish every auditor, then raise the first
                errors.append(error)
        if errors:
            raise errors[0]

    def _report_left_out(self) -> None:
        """``params-not-in-optimizer``, to the optimizer that trains the rest of their model,
        or the session's own when none does (before the auditors end: the optimizers that
        stepped are forgotten with the last one). Without any optimizer (a loop that updates
        its parameters by hand) there is nothing they were left out of."""
        if not self.auditors:
            return
        for owner, records in self._watch.left_out().items():
            names = [record.name for record in records]
            if owner is not None:
                step = min((r.step for r in records if r.step is not None), default=None)
                owner._report(rules.params_not_in_optimizer(step, names))
            elif "params-not-in-optimizer" not in self.allow:
                self._own.append(rules.params_not_in_optimizer(None, names, model_known=False))
