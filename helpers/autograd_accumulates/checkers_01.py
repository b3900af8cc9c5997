"""Checkers for notebook 01, autograd accumulates."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from helpers.checks import (
    NOT_ANSWERED,
    CheckResult,
    as_function,
    call_learner,
    checker,
    correct,
    is_unanswered,
    number_checker,
    wrong,
)
from helpers.data import split_batches
from helpers.grads import grad_state
from helpers.predictions import choice_checker
from helpers.trace_tables import Call, trace_checker
from helpers.training import train_steps
from helpers.translation import N_, _

check_grad_prediction = number_checker(
    17.0,
    {
        5.0: N_(
            "That is only the last backward's gradient: backward() adds into `.grad`, "
            "it never overwrites it."
        ),
        6.0: N_(
            "That is the gradient of a single backward of w ** 2 (2 * w = 6), "
            "but three backward calls ran and each one adds."
        ),
        11.0: N_("You counted w ** 2 once: both of its backward calls add 2 * w = 6."),
        12.0: N_(
            "You added the two w ** 2 backwards (6 + 6) but left out (5 * w).backward(), "
            "which adds 5 more."
        ),
        23.0: N_("d(w ** 2)/dw is 2 * w = 6, not w ** 2 = 9: recount the two first terms."),
        27.0: N_("(5 * w).backward() adds d(5 * w)/dw = 5, not the value 5 * w = 15."),
        33.0: N_(
            "That adds the losses' values (9 + 9 + 15): `.grad` adds their gradients, "
            "2 * w = 6, 6 and 5."
        ),
    },
    N_("Add what each backward() contributes: d(w ** 2)/dw = 2 * w, d(5 * w)/dw = 5."),
    questions={
        5.0: N_("Does backward() replace .grad?"),
        6.0: N_("How many backward() calls ran?"),
        11.0: N_("How many times did w ** 2 go through backward()?"),
        12.0: N_("Did every backward() add its gradient?"),
        23.0: N_("Does backward() add the loss's value or its gradient?"),
        27.0: N_("What does (5 * w).backward() add: 5 * w, or its derivative?"),
        33.0: N_("Does .grad add up the losses or their gradients?"),
        None: N_("What does each backward() add into .grad?"),
    },
    why=N_("each backward() adds its gradient into .grad: 2 * 3 + 2 * 3 + 5."),
    doc="""Exercise 01.1: ``w.grad`` after ``(w**2).backward()`` twice and ``(5*w).backward()``
    once, with ``w = 3``. Expected 2*3 + 2*3 + 5 = 17.""",
)


check_weight_without_zero_grad = number_checker(
    0.0,
    {
        0.4: N_(
            "That is the loop *with* zero_grad: each step used only its own gradient "
            "(1, then 2, then 3). Without zero_grad, step t uses g_1 + ... + g_t."
        ),
        -0.8: N_(
            "You applied the total 1 + 2 + 3 = 6 at every step, but step 1 has only "
            "seen g_1 and step 2 has seen g_1 + g_2."
        ),
        0.6: N_("That is two steps (1 + 3 = 4); count the third one, which uses 1 + 2 + 3."),
        0.9: N_("That is one step; the loop runs three."),
        2.0: N_("A sign: SGD subtracts lr times the gradient, w -= 0.1 * .grad; you added it."),
        1.6: N_(
            "Two mistakes: that adds the steps (the sign) and uses each step's own "
            "gradient (the loop with zero_grad)."
        ),
        -9.0: N_(
            "The learning rate is missing: the steps subtract 1 + 3 + 6 = 10 times "
            "lr = 0.1, not 10 itself."
        ),
        -5.0: N_(
            "Two mistakes: no learning rate (each step subtracts lr * .grad, lr = 0.1) and "
            "each step's own gradient (the loop with zero_grad)."
        ),
    },
    N_(
        "Write down `.grad` before each step: 1, then 1 + 2, then 1 + 2 + 3; each step "
        "subtracts lr times that."
    ),
    questions={
        0.4: N_("Which gradient does step 2 use when nothing empties .grad?"),
        -0.8: N_("What has .grad summed by step 1?"),
        0.6: N_("How many steps does the loop take?"),
        0.9: N_("How many steps does the loop take?"),
        2.0: N_("Does SGD add the gradient or subtract it?"),
        1.6: N_("Does SGD add the gradient, and which gradient does each step use?"),
        -9.0: N_("What does each step multiply .grad by?"),
        -5.0: N_("What does each step multiply .grad by, and which gradient does it use?"),
        None: N_("What does .grad hold before each of the three steps?"),
    },
    why=N_("step t uses g_1 + ... + g_t, so w moves by 0.1 × (1 + 3 + 6) = 1."),
    doc="""Exercise 01.5 (optional): start at w = 1.0, lr = 0.1, three SGD steps whose
    backward calls contribute 1, 2 and 3, and no ``zero_grad``. The steps use 1, 1+2 and 1+2+3, so
    w = 1 - 0.1 * (1 + 3 + 6) = 0.0.""",
)


TrainOneEpoch = Callable[[nn.Module, torch.optim.Optimizer, list], object]


def _exercise_problem() -> tuple[nn.Linear, list]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        inputs = torch.randn(12, 3)
        targets = torch.randn(12, 1)
        model = nn.Linear(3, 1)
    return model, split_batches(inputs, targets, 4)


def _overall_grad_state(model: nn.Module) -> str:
    states = {grad_state(p) for p in model.parameters()}
    return "nonzero" if "nonzero" in states else ("zeros" if "zeros" in states else "None")


# What an exception in exercise 01.2's loop usually means (call_learner looks here first).
TRAINING_LOOP_MEANINGS = {
    "has no attribute 'backward'": N_(
        "backward() belongs to the loss tensor, and `.item()` turns it into a plain number: "
        "call loss.backward() on the tensor, and take .item() only to print or log it."
    ),
    "NoneType": N_(
        "In this loop a None is most often what `loss.backward()` or `optimizer.step()` "
        "returns, kept in a name (`loss = loss.backward()`): both return None, so call them on "
        "a line of their own. Or it is a `.grad` before its first backward(): leave clearing "
        "it to optimizer.zero_grad()."
    ),
}


@checker
def check_training_loop(train_one_epoch: TrainOneEpoch) -> CheckResult:
    """Exercise 01.2: ``train_one_epoch(model, optimizer, batches)`` must take one SGD step
    per batch, each with the gradient of that batch's MSE loss alone."""
    if is_unanswered(train_one_epoch):
        return wrong(NOT_ANSWERED)
    as_function(train_one_epoch, "train_one_epoch(model, optimizer, batches)")
    start, batches = _exercise_problem()
    lr = 0.1
    model = copy.deepcopy(start)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    grads_at_steps = []  # what .grad held each time step() ran
    handle = optimizer.register_step_pre_hook(
        lambda *_: grads_at_steps.append(_overall_grad_state(model))
    )
    try:
        call_learner(train_one_epoch, model, optimizer, batches, meanings=TRAINING_LOOP_MEANINGS)
    finally:
        handle.remove()
    got = torch.cat([p.detach().flatten() for p in model.parameters()])

    def reference(zero_grad: bool) -> torch.Tensor:
        trained = copy.deepcopy(start)
        steps = len(batches)
        return train_steps(trained, batches, steps=steps, lr=lr, zero_grad=zero_grad).weights[-1]

    if torch.allclose(got, reference(True), rtol=1e-5, atol=1e-7):
        return correct(_("one step per batch, each with that batch's gradient alone."))
    if torch.allclose(got, reference(False), rtol=1e-5, atol=1e-7):
        return wrong(
            _(
                "each step() used the gradients of every batch so far, not only its own batch's: "
                "backward() adds into `.grad`, and nothing in your loop empties it between batches."
            )
        )
    if not grads_at_steps:
        return wrong(
            _("optimizer.step() was never called: call it once per batch, after backward.")
        )
    empty = [i + 1 for i, state in enumerate(grads_at_steps) if state != "nonzero"]
    if empty:
        return wrong(
            _(
                "step() ran with no gradient (`.grad` was {grads_at_steps}) "
                "at step {empty}: loss.backward() must come before "
                "step(), and zero_grad() must not run between them."
            ).format(grads_at_steps=grads_at_steps[empty[0] - 1], empty=empty[0])
        )
    if len(grads_at_steps) != len(batches):
        return wrong(
            _(
                "step() ran {n_grads_at_steps} times for {n_batches} "
                "batches: take exactly one step per batch."
            ).format(n_grads_at_steps=len(grads_at_steps), n_batches=len(batches))
        )
    return wrong(
        _(
            "every step had a gradient, but not the gradient of its batch's loss: use "
            "`F.mse_loss(model(inputs), targets)` as it is (mean, not scaled), one backward "
            "per batch."
        )
    )


check_second_backward = choice_checker(
    {"a": 2.0, "b": 4.0, "c": "an error"},
    "b",
    why=N_(
        "the second backward() adds its gradient 2 to the 2 already in `.grad`; it never "
        "replaces it."
    ),
    misconceptions={
        "a": N_(
            "Does backward() replace `.grad`? It adds: the second call adds its 2 to the 2 "
            "the first one left, so `.grad` holds 4."
        ),
        "c": N_(
            "Does a second backward() fail? Only through a graph that the first one already "
            "used. Here each line computes w ** 2 afresh, so each backward() has a graph of "
            "its own."
        ),
    },
    reveal="== (2.0, 4.0)",
    doc="""Section 2's prediction: ``w.grad`` after two ``(w**2).sum().backward()`` at w = 1,
    before the cell that prints it.""",
)


check_trace_prediction = choice_checker(
    {
        "a": "w = 1.0, w.grad = None",
        "b": "w = 0.6, w.grad = None",
        "c": "w = 0.6, w.grad = 0.0",
        "d": "w = 0.6, w.grad = 4.0",
    },
    "b",
    why=N_(
        "step() moved w by -lr × .grad = -0.1 × 4, and zero_grad() then set `.grad` to "
        "None; neither undoes the other."
    ),
    misconceptions={
        "a": N_(
            "Does zero_grad() undo the step? It touches only `.grad`: w keeps what step() "
            "made of it, 1 - 0.1 × 4 = 0.6."
        ),
        "c": N_(
            "Does zero_grad() write zeros? By default (set_to_none=True) it sets `.grad` to "
            "None, which is not a tensor of zeros."
        ),
        "d": N_(
            "Does zero_grad() leave `.grad` alone, or does step() refill it? zero_grad() sets "
            "it to None; only a backward() fills it again."
        ),
    },
    reveal="w.grad: None -> 2 -> 4 -> 4 -> None -> 1.2 -> 1.2",
    doc="""Section 3's prediction: w and ``w.grad`` after backward, backward, step and
    zero_grad at w = 1, lr = 0.1, before the trace that shows them.""",
)


check_trace_table = trace_checker(
    2.0,
    torch.optim.SGD,
    [
        Call("backward", lambda w: w**2),
        Call("step"),
        Call("backward", lambda w: w**2),
        Call("step"),
        Call("zero_grad"),
        Call("backward", lambda w: 3 * w),
    ],
    lr=0.25,
    doc="""Exercise 01.3: the trace table of backward, step, backward, step, zero_grad,
    backward at w = 2, lr = 0.25 (plain SGD), a row (w, w.grad) per call.""",
)


check_article_prediction = choice_checker(
    {
        "a": "it climbs and explodes",
        "b": "it stays in range, often lower",
        "c": "it is the same",
    },
    "b",
    why=N_(
        "at lr = 0.01 the summed gradient makes bigger steps, not wild ones: over 15 steps "
        "the loss stays in the correct run's range and is lower on most of them."
    ),
    misconceptions={
        "a": N_(
            "Does the summed gradient blow up at once? Its norm grows, from 1.8 to about 10, "
            "but at lr = 0.01 the steps stay small: the loss stays in the correct run's range."
        ),
        "c": N_(
            "Is the missing zero_grad harmless here? From the second step on, `.grad` holds "
            "the sum of every gradient so far, so the steps differ and so do the losses."
        ),
    },
    reveal="steps where the run without zero_grad has the lower loss: 11 of 15",
    doc="""Section 4's prediction: what the loss without ``zero_grad`` does over 15 steps at
    lr = 0.01, before the table that shows it.""",
)


check_momentum_trace = trace_checker(
    3.0,
    torch.optim.SGD,
    [
        Call("backward", lambda w: w**2),
        Call("step"),
        Call("zero_grad"),
        Call("backward", lambda w: w**2),
        Call("step"),
    ],
    lr=0.1,
    momentum=0.9,
    doc="""Exercise 01.4: the trace table of backward, step, zero_grad, backward, step at
    w = 3, lr = 0.1, momentum 0.9, a row (w, w.grad, momentum_buffer) per call.""",
)
