"""A pytest fixture that audits a short training run inside your own test: ``loop_audit``.

Installing the package makes it available (a ``pytest11`` entry point), with no conftest.
A two-step smoke test of your loop, for your CI (README.md has a complete one):

```python
def test_two_steps_have_no_gradient_bugs(loop_audit):
    def train_two_steps():
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train(model, optimizer, batches, accumulation_steps=2)  # your loop and data

    loop_audit(train_two_steps, accumulation_steps=2)
```

``loop_audit(train_fn, accumulation_steps=None, allow=())`` calls ``train_fn()`` under
:class:`loop_auditor.session.AuditSession`, which audits every optimizer built inside it, and
fails the test with the findings, each with its fix. It also fails the test when the run
stepped no optimizer: a smoke test that audited nothing must not pass. Build the optimizer
inside ``train_fn``: one built before is audited from its first ``step()`` only, so its first
window is not checked. Clean, it returns the session (``session.steps``, ``session.auditors``).

For code that is not a function, use it as a block; the test fails when the block ends:

```python
with loop_audit(accumulation_steps=2):
    trainer.fit(module)
```

An error in the run propagates as it is. Without the entry point (under
``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``, or with ``loop_auditor`` importable but not installed),
load it with ``-p loop_auditor.pytest_plugin`` or ``pytest_plugins =
["loop_auditor.pytest_plugin"]`` in your top-level conftest.py. The entry point has that same
name, so loading it both ways at once registers it once (a pytest plugin registered under two
names is an error).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from loop_auditor.language import _

if TYPE_CHECKING:
    from loop_auditor.session import AuditSession

# pytest imports this module at the start of every run once the package is installed: it
# imports torch (through loop_auditor.session) only when a test uses the fixture.

_NO_FUNCTION = object()


def _report(session: AuditSession) -> str | None:
    """What fails the test (the findings, or that nothing was audited), or None."""
    n = len(session.auditors)
    if session.findings:
        return session.report(_("the audited run"))
    if session.steps == 0:
        if n == 0:
            return _(
                "loop auditor: the audited run built no optimizer and stepped none, so nothing "
                "was checked: build the optimizer and run at least one optimizer step inside "
                "loop_audit"
            )
        return _(
            "loop auditor: the audited run made no optimizer step, so nothing was checked: "
            "build the optimizer and run at least one optimizer step inside loop_audit"
        )
    return None


class LoopAudit:
    """The ``with loop_audit(...):`` block: an :class:`AuditSession` that fails the test at
    the end of the block when it has findings or audited nothing."""

    def __init__(self, accumulation_steps: int | None = None, allow=()):
        from loop_auditor.session import AuditSession

        self.session = AuditSession(accumulation_steps=accumulation_steps, allow=allow)
        self.entered = False

    def __enter__(self) -> AuditSession:
        self.entered = True
        return self.session.__enter__()

    def __exit__(self, *exc) -> None:
        __tracebackhide__ = True
        self.session.__exit__(*exc)
        if exc[0] is None and (report := _report(self.session)):
            pytest.fail(report)


@pytest.fixture
def loop_audit():
    """Audit a short training run and fail the test with the findings:
    ``loop_audit(train_fn, accumulation_steps=None, allow=())`` runs ``train_fn()`` and returns
    the :class:`~loop_auditor.session.AuditSession`; without ``train_fn`` it is a ``with``
    block. ``allow`` lists codes the loop does on purpose. The test also fails when the run
    stepped no optimizer. See :mod:`loop_auditor.pytest_plugin`."""
    blocks: list[LoopAudit] = []

    def loop_audit(train_fn=_NO_FUNCTION, *, accumulation_steps=None, allow=()):
        __tracebackhide__ = True
        if train_fn is not _NO_FUNCTION and not callable(train_fn):
            hint = (
                _("pass the function itself, loop_audit(train), not its result loop_audit(train())")
                if train_fn is None
                else _("wrap the run in a function: loop_audit(lambda: train(model, loader))")
            )
            raise TypeError(
                _(
                    "loop_audit takes the function that runs your training, got {function}: "
                    "{hint}, or use a block: with loop_audit(accumulation_steps=2): ..."
                ).format(function=repr(train_fn), hint=hint)
            )
        try:
            block = LoopAudit(accumulation_steps=accumulation_steps, allow=allow)
        except (TypeError, ValueError) as error:  # shown at the test's line, not in ours
            raise error.with_traceback(None) from None
        if train_fn is _NO_FUNCTION:
            blocks.append(block)
            return block
        with block as session:
            train_fn()
        return session

    yield loop_audit
    unused = [block for block in blocks if not block.entered]
    if unused:
        pytest.fail(
            _(
                "loop_audit(...) was called without a function and never used as a block, so "
                "nothing was audited: write `with loop_audit(...):` or pass the function, "
                "loop_audit(train)"
            ),
            pytrace=False,
        )
