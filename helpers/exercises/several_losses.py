"""Checkers for notebook 04, several losses and one backward."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import nn

from helpers.checks import (
    NOT_ANSWERED,
    AnswerKindError,
    CheckResult,
    LearnerCodeError,
    as_function,
    as_names,
    as_number,
    call_learner,
    checker,
    correct,
    is_unanswered,
    number_checker,
    number_matches,
    wrong,
)
from helpers.models import TwoHeads
from helpers.multitask import flatten, task_gradients

WEIGHTS = (0.3, 2.0)


def _two_task_losses() -> tuple[TwoHeads, torch.Tensor, torch.Tensor]:
    model = TwoHeads((6, 12, 12, 3), seed=5)
    generator = torch.Generator().manual_seed(5)
    inputs = torch.randn(16, 6, generator=generator)
    labels = torch.randint(0, 3, (2, 16), generator=generator)
    out_a, out_b = model(inputs)
    loss_a = nn.functional.cross_entropy(out_a, labels[0])
    loss_b = nn.functional.cross_entropy(out_b, labels[1])
    return model, loss_a, loss_b


@checker
def check_two_task_backward(two_task_backward: Callable) -> CheckResult:
    """Exercise 04.1: ``two_task_backward(loss_a, loss_b, w_a, w_b)`` must leave in the trunk's
    ``.grad`` exactly ``w_a * g_a + w_b * g_b``."""
    if is_unanswered(two_task_backward):
        return wrong(NOT_ANSWERED)
    as_function(two_task_backward, "two_task_backward(loss_a, loss_b, w_a, w_b)")
    model, loss_a, loss_b = _two_task_losses()
    trunk = list(model.trunk.parameters())
    g_a, g_b = (flatten(g) for g in task_gradients([loss_a, loss_b], trunk))
    w_a, w_b = WEIGHTS
    try:
        call_learner(two_task_backward, loss_a, loss_b, w_a, w_b)
    except LearnerCodeError as failure:
        error = failure.error
        if isinstance(error, RuntimeError) and "backward through the graph a second time" in str(
            error
        ):
            return wrong(
                "a second backward() found the graph freed: backward once, on "
                "w_a * loss_a + w_b * loss_b (or pass retain_graph=True to the first of two "
                "backward calls, one per loss)."
            )
        if isinstance(error, TypeError) and "NoneType" in str(error):
            return wrong(
                "backward() returns None, so `w_a * loss_a.backward()` multiplies None: "
                "weight the loss first, `(w_a * loss_a).backward()`."
            )
        raise
    if any(p.grad is None for p in trunk):
        return wrong("the trunk got no gradient: did you call backward()?")
    got = torch.cat([p.grad.flatten() for p in trunk])
    candidates = {
        "right": w_a * g_a + w_b * g_b,
        "unweighted": g_a + g_b,
        "only a": w_a * g_a,
        "only b": w_b * g_b,
        "only a, unweighted": g_a,
        "squared": w_a**2 * g_a + w_b**2 * g_b,
        "normalized": (w_a * g_a + w_b * g_b) / (w_a + w_b),
        "swapped": w_b * g_a + w_a * g_b,
        "a unweighted": g_a + w_b * g_b,
        "b unweighted": w_a * g_a + g_b,
        "halved": (w_a * g_a + w_b * g_b) / 2,
    }
    match = next((n for n, c in candidates.items() if torch.allclose(got, c, atol=1e-6)), None)
    hints = {
        "right": None,
        "unweighted": "the trunk got g_a + g_b: the weights w_a and w_b are missing.",
        "only a": "only loss_a reached the trunk: loss_b was never backpropagated.",
        "only b": "only loss_b reached the trunk: loss_a was never backpropagated.",
        "only a, unweighted": "only loss_a reached the trunk, without its weight.",
        "squared": "each weight was applied twice (w_a**2): weight the losses once.",
        "normalized": "the weights were normalized to sum to 1 (divided by w_a + w_b): use "
        "w_a and w_b as they are.",
        "swapped": "the weights are swapped: w_a weights loss_a and w_b weights loss_b.",
        "a unweighted": "loss_a reached the trunk without its weight w_a.",
        "b unweighted": "loss_b reached the trunk without its weight w_b.",
        "halved": "the weighted sum was halved (a mean of the two losses): add them, "
        "w_a * loss_a + w_b * loss_b.",
    }
    if match == "right":
        return correct("the trunk received w_a * g_a + w_b * g_b.")
    if match is not None:
        return wrong(hints[match])
    return wrong(
        "the trunk's gradient is not w_a * g_a + w_b * g_b: backward "
        "w_a * loss_a + w_b * loss_b once."
    )


GAN_OPTIONS = {
    "A": "score the fakes once; d_loss.backward(retain_graph=True); opt_d.step(); "
    "g_loss on the same scores",
    "B": "D's loss uses D(fake.detach()); after opt_d.step(), score D(fake) again for G's loss",
    "C": "d_loss.backward(retain_graph=True); g_loss.backward() on the same scores; "
    "then both steps",
}


@checker
def check_gan_order(answer: object) -> CheckResult:
    """Exercise 04.2: which orderings run without the in-place error *and* give each model the
    gradient of its own loss only? Only B."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    given = as_names(answer, "{'A'}", letters=True, names=GAN_OPTIONS)
    if not given <= set(GAN_OPTIONS):
        return wrong("the options are 'A', 'B' and 'C'.")
    if given == {"B"}:
        return correct("detach the fake samples for D's step, and score them again after it.")
    hints = []
    if "A" in given:
        hints.append(
            "A raises: opt_d.step() changes D's weights in place, and the retained graph of the "
            "old scores still needs their old values."
        )
    if "C" in given:
        hints.append(
            "C runs, but both models get mixed gradients: g_loss's backward adds into D's "
            "grads before D steps, and d_loss's backward (the scores are not detached) adds "
            "into G's."
        )
    if "B" not in given:
        hints.append("B works: D never sees G's graph, and G's loss uses D after its step.")
    return wrong(" ".join(hints))


check_window_gradient = number_checker(
    -0.4,
    {
        0.1: "That is g1 + g2: each task's weight still scales its gradient.",
        -1.6: "That is 4x too large: each micro-batch's loss was divided by 4, so the "
        "window adds up to the full-batch mean.",
        -0.1: "That is one micro-batch's share: `.grad` adds all 4 micro-batches.",
        -0.3: "That is g2 alone: l1 adds 0.5 * g1 and l2's weight doubles g2.",
        0.8: "Signs: 2 * (-0.3) is -0.6.",
        -0.16: "That divides by the sum of the weights (0.5 + 2 = 2.5): loss weights are not "
        "normalized, the gradient is 0.5 * g1 + 2 * g2 as written.",
        -0.2: "That averages the two tasks (divides by 2): the loss adds them as written, "
        "0.5 * g1 + 2 * g2, with no mean over tasks.",
        -0.05: "That is one micro-batch's share of 0.5 * g1 + 2 * g2, halved: .grad adds "
        "all 4 micro-batches, and the tasks are added, not averaged.",
    },
    "Gradients add over tasks (with their weights) and over micro-batches (each / 4).",
    doc="""Exercise 04.3: loss = 0.5 * l1 + 2 * l2 per micro-batch, divided by 4, over 4 equal
    micro-batches; full-batch trunk gradients g1 = 0.4 and g2 = -0.3 give
    0.5 * 0.4 + 2 * (-0.3) = -0.4.""",
)


def _listed(function, *args):
    """The learner's result, a generator or other iterator run to its end here (inside
    the learner's call), so that its errors are reported as the learner's."""
    result = function(*args)
    if isinstance(result, Iterator):
        result = list(result)
    return result


@checker
def check_task_grad_norms(task_grad_norms: Callable) -> CheckResult:
    """Exercise 04.4: ``task_grad_norms(losses, params)`` returns, for each loss, the norm of
    its gradient over all of ``params`` (a parameter it does not reach counts 0), with
    ``torch.autograd.grad``, leaving every ``.grad`` as it was. The parameters come with the
    gradients an earlier micro-batch left, so that adding to them, resetting them or reading
    them into the norms all show."""
    if is_unanswered(task_grad_norms):
        return wrong(NOT_ANSWERED)
    as_function(task_grad_norms, "task_grad_norms(losses, params)")
    model, loss_a, loss_b = _two_task_losses()
    params = list(model.parameters())  # both heads too: each loss misses the other's head
    reference = task_gradients([loss_a, loss_b], params)
    expected = [flatten(g).norm().item() for g in reference]
    model, loss_a, loss_b = _two_task_losses()
    params = list(model.parameters())
    generator = torch.Generator().manual_seed(6)
    for p in params:  # what an accumulation loop holds between two micro-batches
        p.grad = torch.randn(p.shape, generator=generator)
    held = [p.grad.clone() for p in params]
    try:
        got = call_learner(_listed, task_grad_norms, [loss_a, loss_b], params)
    except LearnerCodeError as failure:
        text = str(failure.error)
        if "backward through the graph a second time" in text:
            return wrong(
                "the second loss found the graph freed: both losses share the trunk's graph, "
                "so pass retain_graph=True to torch.autograd.grad (at least for all but the "
                "last loss)."
            )
        if "appears to not have been used in the graph" in text:
            return wrong(
                "loss_a does not reach head_b's parameters, so torch.autograd.grad refuses "
                "them: pass allow_unused=True and count a None gradient as 0."
            )
        if "NoneType" in text:
            return wrong(
                "with allow_unused=True a parameter a loss does not reach gets None, not a "
                "tensor: count it as 0 (skip it, or use torch.zeros_like)."
            )
        raise
    wiped = sum(p.grad is None for p in params)
    if wiped:
        return wrong(
            f"{wiped} parameters lost the .grad they held (set to None): those were "
            "gradients an accumulation loop still needs. torch.autograd.grad(loss, params, "
            "...) returns each loss's gradients without touching .grad, so there is nothing "
            "to reset."
        )
    changed = sum(not torch.equal(p.grad, h) for p, h in zip(params, held, strict=True))
    if changed:
        return wrong(
            f"{changed} parameters' .grad changed: backward() adds into .grad (and zeroing "
            "it wipes what was there); torch.autograd.grad(loss, params, ...) returns the "
            "gradients instead, leaving .grad alone."
        )
    try:
        values = [as_number(value, "each norm") for value in got]
    except (TypeError, AnswerKindError):
        return wrong(
            "return a list with one number per loss, for example [norm_a, norm_b]; got "
            f"{type(got).__name__}"
        )
    if len(values) != 2:
        return wrong(f"two losses, so two norms; your function returned {len(values)}.")
    if all(number_matches(v, e) for v, e in zip(values, expected, strict=True)):
        return correct(f"the two tasks' gradient norms, {expected[0]:.4g} and {expected[1]:.4g}.")
    squared = [e**2 for e in expected]
    if all(number_matches(v, s) for v, s in zip(values, squared, strict=True)):
        return wrong("these are the squared norms: take the square root of the sum of squares.")
    combined = (flatten(reference[0]) + flatten(reference[1])).norm().item()
    if all(number_matches(v, combined) for v in values):
        return wrong(
            "both numbers are the norm of the summed gradient g_a + g_b: take each loss's "
            "gradient on its own."
        )
    l1 = [flatten(g).abs().sum().item() for g in reference]
    if all(number_matches(v, e) for v, e in zip(values, l1, strict=True)):
        return wrong(
            "these are L1 norms (the sum of absolute values): the gradient norm is the L2 "
            "norm, the square root of the sum of squared entries."
        )
    with_held = [
        (flatten(g) + torch.cat([h.flatten() for h in held])).norm().item() for g in reference
    ]
    if all(number_matches(v, e) for v, e in zip(values, with_held, strict=True)):
        return wrong(
            "these norms include the gradients .grad already held: read each loss's own "
            "gradient from torch.autograd.grad, not from .grad."
        )
    per_tensor_sum = [sum(g.norm().item() for g in grads) for grads in reference]
    if all(number_matches(v, s) for v, s in zip(values, per_tensor_sum, strict=True)):
        return wrong(
            "you added the norms of the separate tensors; the norm over all parameters is "
            "the square root of the sum of all squared entries (torch.cat the flattened "
            "gradients, or sqrt of the sum of squared norms)."
        )
    return wrong(
        f"expected norms near {expected[0]:.4g} and {expected[1]:.4g}, got "
        f"{', '.join(f'{v:.4g}' for v in values)}: the norm of each loss's gradient over "
        "all params (the L2 norm of all entries together)."
    )
