"""Notebook 06's script review: the key holds (the script's three bugs are what the key says,
the loop auditor reports two of them and is silent once all three are fixed), and the checker
takes every right answer, names the line a learner wrongly marks, and never raises."""

from __future__ import annotations

import inspect
import textwrap
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook

from helpers.audit import AuditSession
from helpers.audit_and_repair import script_review
from helpers.audit_and_repair.script_review import (
    FINE_LINES,
    SCRIPT_BUGS,
    bug_lines,
    check_script_review,
    numbered_lines,
)
from helpers.data import make_teacher_batches
from helpers.models import make_mlp

FIXES = {  # each bug's repair, as an edit of the script's source
    "undivided": (
        "loss = F.mse_loss(outputs, targets)",
        "loss = F.mse_loss(outputs, targets)"
        " / min(accumulation_steps, len(loader) - step // accumulation_steps * accumulation_steps)",
    ),
    "clip per micro-batch": (
        "            norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
        "",
    ),
    "scheduler per micro-batch": (
        "                optimizer.zero_grad(set_to_none=True)\n            scheduler.step()",
        "                optimizer.zero_grad(set_to_none=True)\n                scheduler.step()",
    ),
}
# the clip moves to the end of the window, right before the step
CLIP_ONCE = (
    "                norms.append(norm.item())",
    "                norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
    "                norms.append(norm.item())",
)


def script(fixed=()):
    """train(), with the repairs of the bugs named in ``fixed``."""
    source = textwrap.dedent(inspect.getsource(script_review.train))
    for bug in fixed:
        old, new = FIXES[bug]
        assert old in source, bug
        source = source.replace(old, new)
        if bug == "clip per micro-batch":
            source = source.replace(*CLIP_ONCE)
    namespace = {"torch": torch, "nn": nn, "F": F, "copy": script_review.copy}
    exec(compile(source, "<review script>", "exec"), namespace)
    return namespace["train"]


def run(train, **options):
    """The script on 10 micro-batches (windows of 4, 4 and 2), audited; with the gradient
    each optimizer step used."""
    batches = make_teacher_batches(n_batches=10, batch_size=8, features=8)
    used = []

    def record(optimizer, *_):
        params = [p for group in optimizer.param_groups for p in group["params"]]
        used.append(torch.cat([p.grad.detach().flatten().clone() for p in params]))

    handle = register_optimizer_step_pre_hook(record)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the scheduler stepped before the optimizer
            with AuditSession(accumulation_steps=4) as session:
                train(make_mlp((8, 16, 1)), batches, batches[:2], **options)
    finally:
        handle.remove()
    return [finding.code for finding in session.findings], used


def test_the_auditor_reports_the_two_bugs_it_can_see():
    codes, _ = run(script())
    assert sorted(codes) == sorted(rule for _, rule in SCRIPT_BUGS.values() if rule)


def test_fixed_the_auditor_is_silent_and_the_missed_bug_is_the_losss_size():
    seen = [bug for bug, (_, rule) in SCRIPT_BUGS.items() if rule]
    codes, _ = run(script(seen))
    assert codes == []  # silent, and yet one bug is left
    codes, _ = run(script(FIXES))
    assert codes == []
    # the same first step, unclipped: the undivided window's gradient is 4 times its mean
    _, half_fixed = run(script(seen), max_norm=1e9)
    _, fixed = run(script(FIXES), max_norm=1e9)
    assert torch.equal(half_fixed[0], 4 * fixed[0])


def test_the_key_names_lines_of_the_script():
    found = bug_lines()
    assert set(found) == set(SCRIPT_BUGS)
    lines = numbered_lines()
    assert all(lines[n].strip() in SCRIPT_BUGS[bug][0] for bug, ns in found.items() for n in ns)
    texts = {line.strip() for line in lines.values()}
    assert set(FINE_LINES) <= texts  # each hint for a fine line names a line of the script
    assert 40 <= len(lines) <= 60
    assert "scaler" not in inspect.getsource(script_review.train)  # AMP comes in notebook 07


def test_every_right_answer_is_taken():
    found = bug_lines()
    first = {min(ns) for ns in found.values()}
    last = {max(ns) for ns in found.values()}
    for answer in (first, last, sorted(first), tuple(last), frozenset(first)):
        result = check_script_review(answer)
        assert result.passed, (answer, result.message)


def test_a_fine_line_marked_is_named_with_why_it_is_fine():
    found = bug_lines()
    right = {min(ns) for ns in found.values()}
    for n in numbered_lines():
        if any(n in ns for ns in found.values()):
            continue
        result = check_script_review(right | {n})
        assert not result.passed and result.message.startswith(f"line {n} ("), result.message


@pytest.mark.parametrize("bug", sorted(SCRIPT_BUGS))
def test_a_missed_bug_gets_its_question(bug):
    found = bug_lines()
    answer = {min(ns) for b, ns in found.items() if b != bug}
    result = check_script_review(answer)
    assert not result.passed and result.message.startswith("you found 2 of the 3 bugs. ")
    assert "?" in result.message


def test_bad_input_gets_what_is_expected():
    for answer, fragment in (
        ("22, 26", "answer with the numbers of the buggy lines"),
        ({1.5}, "answer with the numbers of the buggy lines"),
        ({True}, "answer with the numbers of the buggy lines"),
        ({0}, "there is no line 0"),
        ({999}, "there is no line 999"),
    ):
        result = check_script_review(answer)
        assert not result.passed and fragment in result.message, (answer, result.message)
    assert check_script_review(...).unanswered
