"""Checkers for notebook 02, inside zero_grad."""

from __future__ import annotations

import torch
from torch import nn

from helpers.checks import (
    NOT_ANSWERED,
    CheckResult,
    as_names,
    as_number,
    correct,
    diagnose_number,
    is_unanswered,
    wrong,
)


def grad_after_sequence() -> float:
    """Exercise 02.1, computed: w = 2, SGD(lr=0.1); backward of w**2 twice; step;
    zero_grad(set_to_none=False); backward of w**2 once more. Returns w.grad."""
    w = nn.Parameter(torch.tensor(2.0))
    optimizer = torch.optim.SGD([w], lr=0.1)
    (w**2).backward()
    (w**2).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
    (w**2).backward()
    return w.grad.item()


def check_grad_after_sequence(answer: object) -> CheckResult:
    """Exercise 02.1: expected 2 * 1.2 = 2.4 (the step moved w from 2 to 2 - 0.1 * 8)."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    if answer is None:
        return wrong(
            "`.grad` is not None: zero_grad(set_to_none=False) leaves a tensor of zeros, and "
            "the last backward() adds its gradient to it."
        )
    value = as_number(answer, "answer")
    expected = grad_after_sequence()
    return diagnose_number(
        value,
        expected,
        {
            4.0: "That is 2 * w for w = 2, but step() moved w before the last backward: "
            "w = 2 - 0.1 * (4 + 4) = 1.2.",
            0.0: "zero_grad() ran, but then one more backward() added 2 * w.",
            8.0 + expected: "zero_grad() did run between the step and the last backward: "
            ".grad restarted from zeros.",
            8.0: "That is `.grad` just before step(); zero_grad() and one more backward() "
            "came after it.",
            3.2: "`.grad` is 8 before the step, not 4: both backward calls add, so the step "
            "moves w to 2 - 0.1 * 8 = 1.2.",
            1.2: "That is w after the step, not its gradient: the last backward adds 2 * w.",
            12.0: "That skips both the step (w changes) and zero_grad (.grad restarts from zeros).",
        },
        "Follow w and .grad line by line: .grad = 4, then 8; step moves w to 1.2; zero_grad "
        "fills zeros; the last backward adds 2 * w.",
    )


def moved_by_first_adamw_step() -> set[str]:
    """Exercise 02.2, computed: which of a (real grad), b (grad of zeros) and c (grad None)
    does a first AdamW step (lr 0.1, weight_decay 0.01) change?"""
    params = {name: nn.Parameter(torch.tensor([1.0])) for name in "abc"}
    optimizer = torch.optim.AdamW(params.values(), lr=0.1, weight_decay=0.01)
    (2 * params["a"]).sum().backward()
    params["b"].grad = torch.zeros(1)
    before = {name: p.detach().clone() for name, p in params.items()}
    optimizer.step()
    return {name for name, p in params.items() if not torch.equal(p.detach(), before[name])}


def check_moved_parameters(answer: object) -> CheckResult:
    """Exercise 02.2: expected {"a", "b"}: a by its gradient, b by weight decay alone."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    given = as_names(answer, "{'a', 'b'}", letters=True)
    if not given <= {"a", "b", "c"}:
        return wrong("the parameters are named 'a', 'b' and 'c'.")
    expected = moved_by_first_adamw_step()
    if given == expected:
        return correct("a moved by its gradient, b by AdamW's weight decay; c was skipped.")
    hints = []
    if "c" in given:
        hints.append("c's grad is None, so the optimizer skips it entirely.")
    if "b" not in given:
        hints.append(
            "b's grad is zeros, not None: AdamW still applies weight decay to it "
            "(p -= lr * weight_decay * p), so it moves."
        )
    if "a" not in given:
        hints.append("a has a real gradient, so its Adam update moves it.")
    return wrong(" ".join(hints))


PLACEMENT_LOOPS = {
    "A": "before forward",
    "B": "between backward and step",
    "C": "after step",
    "D": "after forward",
}
"""The four loops of exercise 02.3 and where each calls zero_grad."""


def check_correct_placements(answer: object) -> CheckResult:
    """Exercise 02.3: the loops that train like the standard one are A, C and D."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    given = {name.upper() for name in as_names(answer, "{'A', 'B'}", letters=True)}
    if not given <= set(PLACEMENT_LOOPS):
        return wrong("the loops are named 'A', 'B', 'C' and 'D'.")
    expected = {
        name for name, where in PLACEMENT_LOOPS.items() if where != "between backward and step"
    }
    if given == expected:
        return correct(
            "zero_grad may go anywhere after the previous step() and before the next backward()."
        )
    hints = []
    if "B" in given:
        hints.append("B zeroes between backward() and step(): the step sees no gradient.")
    if "D" not in given:
        hints.append(
            "D zeroes after the forward pass but before backward(): fine, the forward pass "
            "does not touch .grad."
        )
    if "C" not in given:
        hints.append(
            "C zeroes right after step(): the next backward() then starts from nothing, "
            "as it should."
        )
    if "A" not in given:
        hints.append("A is the standard loop.")
    return wrong(" ".join(hints))
