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
    ask_first,
    call_learner,
    checker,
    correct,
    is_unanswered,
    number_matches,
    wrong,
)
from helpers.models import TwoHeads
from helpers.predictions import choice_checker
from helpers.several_losses.gan_parsons import check_gan_order as check_gan_order
from helpers.several_losses.multitask import flatten, task_gradients
from helpers.translation import N_, _

WEIGHTS = (0.3, 2.0)


def _two_task_losses() -> tuple[TwoHeads, torch.Tensor, torch.Tensor]:
    """The model and two mean losses of exercise 04.3."""
    model = TwoHeads((6, 12, 12, 3), seed=5)
    generator = torch.Generator().manual_seed(5)
    inputs = torch.randn(16, 6, generator=generator)
    labels = torch.randint(0, 3, (2, 16), generator=generator)
    out_a, out_b = model(inputs)
    loss_a = nn.functional.cross_entropy(out_a, labels[0])
    loss_b = nn.functional.cross_entropy(out_b, labels[1])
    return model, loss_a, loss_b


WINDOW_SIZES = (6, 6, 4)  # a window of 3 micro-batches, the last one short


def _two_task_window() -> tuple[TwoHeads, list[tuple[torch.Tensor, torch.Tensor]], list[int]]:
    """A model, each micro-batch's two mean losses (one forward each) and its sample count."""
    model = TwoHeads((6, 12, 12, 3), seed=5)
    generator = torch.Generator().manual_seed(5)
    inputs = torch.randn(sum(WINDOW_SIZES), 6, generator=generator)
    labels = torch.randint(0, 3, (2, sum(WINDOW_SIZES)), generator=generator)
    losses = []
    parts = (t.split(WINDOW_SIZES) for t in (inputs, labels[0], labels[1]))
    for x, y_a, y_b in zip(*parts, strict=True):
        out_a, out_b = model(x)
        ce = nn.functional.cross_entropy
        losses.append((ce(out_a, y_a), ce(out_b, y_b)))
    return model, losses, list(WINDOW_SIZES)


@checker
def check_two_task_window(two_task_window: Callable) -> CheckResult:
    """Exercise 04.1: ``two_task_window(losses, counts, w_a, w_b)`` gets each micro-batch's
    two mean losses ``(loss_a, loss_b)`` and its sample count, micro-batches of 6, 6 and 4
    samples, and must leave in the trunk's ``.grad`` the gradient of the whole window's
    ``w_a * loss_a + w_b * loss_b``: each micro-batch's weighted sum scaled by its share
    ``count / sum(counts)``, one backward per micro-batch."""
    if is_unanswered(two_task_window):
        return wrong(NOT_ANSWERED)
    as_function(two_task_window, "two_task_window(losses, counts, w_a, w_b)")
    model, losses, counts = _two_task_window()
    trunk = list(model.trunk.parameters())
    # each micro-batch's two trunk gradients, g_a and g_b (the graphs are kept for the learner)
    per_micro = [[flatten(g) for g in task_gradients(list(pair), trunk)] for pair in losses]
    w_a, w_b = WEIGHTS
    try:
        call_learner(two_task_window, losses, list(counts), w_a, w_b)
    except LearnerCodeError as failure:
        error = failure.error
        if isinstance(error, RuntimeError) and "backward through the graph a second time" in str(
            error
        ):
            return wrong(
                _(
                    "a second backward() found a micro-batch's graph freed: loss_a and loss_b "
                    "of one micro-batch share its trunk nodes. Weight and add them first, then "
                    "call backward() once per micro-batch."
                )
            )
        if isinstance(error, TypeError) and "NoneType" in str(error):
            return wrong(
                _(
                    "backward() returns None, so `w_a * loss_a.backward()` multiplies None: "
                    "weight the loss first, `(w_a * loss_a).backward()`."
                )
            )
        raise
    if any(p.grad is None for p in trunk):
        return wrong(_("the trunk got no gradient: did you call backward()?"))
    got = torch.cat([p.grad.flatten() for p in trunk])
    total, k = sum(counts), len(counts)

    def window(scale, task_a=w_a, task_b=w_b, which=range(k)):
        return sum(scale(i) * (task_a * per_micro[i][0] + task_b * per_micro[i][1]) for i in which)

    def share(i):
        return counts[i] / total

    candidates = [
        (window(share), None),
        (
            window(lambda i: 1 / k),
            _(
                "each micro-batch was divided by k = {k}, but the micro-batches "
                "hold {counts} samples: the short one counts as much "
                "as a full one. Scale each by its share of the window, "
                "count / sum(counts)."
            ).format(k=k, counts=counts),
        ),
        (
            window(lambda i: 1),
            _(
                "the micro-batches' losses were added undivided: the "
                "window's gradient is {k} micro-batch means added up. "
                "Scale each by its share, count / sum(counts)."
            ).format(k=k),
        ),
        (
            window(lambda i: counts[i]),
            _(
                "each micro-batch was multiplied by its count but never divided by the window's "
                "count: divide by sum(counts) too."
            ),
        ),
        (
            window(lambda i: 1 / total),
            _(
                "each micro-batch's mean loss was divided by the window's count alone: a mean "
                "loss is already divided by its own count, so scale it by count / sum(counts)."
            ),
        ),
        (
            window(share, 1, 1),
            _("the trunk got g_a + g_b: the weights w_a and w_b are missing."),
        ),
        (window(share, w_b, w_a), _("the weights are swapped: w_a weights loss_a, w_b loss_b.")),
        (
            window(share, w_a, 0),
            _("only loss_a reached the trunk: add w_b * loss_b before backward."),
        ),
        (
            window(share, 0, w_b),
            _("only loss_b reached the trunk: add w_a * loss_a before backward."),
        ),
        (window(share, 1, w_b), _("loss_a reached the trunk without its weight w_a.")),
        (window(share, w_a, 1), _("loss_b reached the trunk without its weight w_b.")),
        (
            window(share, w_a**2, w_b**2),
            _("each weight was applied twice: weight the losses once."),
        ),
        (
            window(share) / (w_a + w_b),
            _(
                "the weights were normalized to sum to 1 (divided by w_a + w_b): use w_a and w_b "
                "as they are."
            ),
        ),
        (
            window(share) / 2,
            _(
                "the weighted sum was halved (a mean of the two losses): add them, "
                "w_a * loss_a + w_b * loss_b."
            ),
        ),
        (
            window(share, which=[k - 1]),
            _(
                "only the last micro-batch reached the trunk: call backward() for every "
                "micro-batch of the window."
            ),
        ),
        (
            window(lambda i: 1 / k, which=[k - 1]),
            _(
                "only the last micro-batch reached the trunk: call backward() for every "
                "micro-batch of the window."
            ),
        ),
    ]
    for candidate, hint in candidates:
        if torch.allclose(got, candidate, atol=1e-6):
            if hint is None:
                return correct(
                    _(
                        "the trunk holds the window's w_a * g_a + w_b * g_b, the short micro-batch "
                        "weighted by its share."
                    )
                )
            return wrong(hint)
    return wrong(
        _(
            "the trunk's gradient is not the window's w_a * g_a + w_b * g_b: for each micro-batch, "
            "backward (w_a * loss_a + w_b * loss_b) * count / sum(counts) once."
        )
    )


MISORDERED_GAN = {
    "A": N_("it raises the in-place error"),
    "B": N_("opt_d.step() uses a gradient of g_loss as well as the gradient of d_loss"),
    "C": N_("opt_g.step() uses the gradient of g_loss only"),
}
"""Exercise 04.2's statements about this update (G's backward first, both steps last)::

    opt_d.zero_grad()
    opt_g.zero_grad()
    fake = G(noise)
    g_loss = bce(D(fake), ones)
    g_loss.backward()
    d_loss = bce(D(real), ones) + bce(D(fake.detach()), zeros)
    d_loss.backward()
    opt_d.step()
    opt_g.step()

B and C are true (tests/core/test_data_models_grads.py runs the update)."""
MISORDERED_GAN_TRUE = {"B", "C"}


@checker
def check_misordered_gan(answer: object) -> CheckResult:
    """Exercise 04.2: which statements about the misordered GAN update are true? B and C. Each
    wrong choice, and each true statement left out, gets its own hint."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    given = as_names(answer, "{'A'}", letters=True, names=MISORDERED_GAN)
    unknown = given - set(MISORDERED_GAN)
    if unknown:
        return wrong(
            _("the statements are 'A', 'B' and 'C'; {unknown} is not one of them.").format(
                unknown=", ".join(sorted(map(repr, unknown)))
            )
        )
    if given == MISORDERED_GAN_TRUE:
        return correct(
            _(
                "D's step mixes in the gradient of the generator's loss (zero D's gradients right "
                "before d_loss.backward() to fix it), and fake.detach() keeps G's gradient its own."
            )
        )
    hints = []
    if "A" in given:
        hints.append(
            _(
                "Does anything step between a forward and the backward through it? "
                "A is false: nothing raises. The in-place error needs a step between a forward "
                "and the backward through it; here both steps come after every backward."
            )
        )
    if "B" not in given:
        hints.append(
            _(
                "What does D's .grad hold when opt_d.step() runs? "
                "B is true: g_loss.backward() goes back through D to reach G, and it runs after "
                "opt_d.zero_grad(), so D's .grad still holds g_loss's gradient when D steps."
            )
        )
    if "C" not in given:
        hints.append(
            _(
                "Where does d_loss's backward stop? "
                "C is true: fake.detach() stops d_loss's backward at D, so G's .grad holds only "
                "g_loss's gradient."
            )
        )
    return wrong(ask_first(" ".join(hints)))


def _listed(function, *args):
    """The learner's result, a generator or other iterator run to its end here (inside
    the learner's call), so that its errors are reported as the learner's."""
    result = function(*args)
    if isinstance(result, Iterator):
        result = list(result)
    return result


@checker
def check_task_grad_norms(task_grad_norms: Callable) -> CheckResult:
    """Exercise 04.3: ``task_grad_norms(losses, params)`` returns, for each loss, the norm of
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
                _(
                    "the second loss found the graph freed: both losses share the trunk's graph, "
                    "so pass retain_graph=True to torch.autograd.grad (at least for all but the "
                    "last loss)."
                )
            )
        if "appears to not have been used in the graph" in text:
            return wrong(
                _(
                    "loss_a does not reach head_b's parameters, so torch.autograd.grad refuses "
                    "them: pass allow_unused=True and count a None gradient as 0."
                )
            )
        if "NoneType" in text:
            return wrong(
                _(
                    "with allow_unused=True a parameter a loss does not reach gets None, not a "
                    "tensor: count it as 0 (skip it, or use torch.zeros_like)."
                )
            )
        raise
    wiped = sum(p.grad is None for p in params)
    if wiped:
        return wrong(
            _(
                "{wiped} parameters lost the .grad they held (set to "
                "None): those were gradients an accumulation loop still "
                "needs. torch.autograd.grad(loss, params, ...) returns "
                "each loss's gradients without touching .grad, so there "
                "is nothing to reset."
            ).format(wiped=wiped)
        )
    changed = sum(not torch.equal(p.grad, h) for p, h in zip(params, held, strict=True))
    if changed:
        return wrong(
            _(
                "{changed} parameters' .grad changed: backward() adds "
                "into .grad (and zeroing it wipes what was there); "
                "torch.autograd.grad(loss, params, ...) returns the "
                "gradients instead, leaving .grad alone."
            ).format(changed=changed)
        )
    try:
        values = [as_number(value, _("each norm")) for value in got]
    except (TypeError, AnswerKindError):
        return wrong(
            _(
                "return a list with one number per loss, for example [norm_a, norm_b]; got {name}"
            ).format(name=type(got).__name__)
        )
    if len(values) != 2:
        return wrong(
            _("two losses, so two norms; your function returned {n_values}.").format(
                n_values=len(values)
            )
        )
    if all(number_matches(v, e) for v, e in zip(values, expected, strict=True)):
        return correct(
            _("the two tasks' gradient norms, {expected:.4g} and {expected2:.4g}.").format(
                expected=expected[0], expected2=expected[1]
            )
        )
    squared = [e**2 for e in expected]
    if all(number_matches(v, s) for v, s in zip(values, squared, strict=True)):
        return wrong(_("these are the squared norms: take the square root of the sum of squares."))
    combined = (flatten(reference[0]) + flatten(reference[1])).norm().item()
    if all(number_matches(v, combined) for v in values):
        return wrong(
            _(
                "both numbers are the norm of the summed gradient g_a + g_b: take each loss's "
                "gradient on its own."
            )
        )
    l1 = [flatten(g).abs().sum().item() for g in reference]
    if all(number_matches(v, e) for v, e in zip(values, l1, strict=True)):
        return wrong(
            _(
                "these are L1 norms (the sum of absolute values): the gradient norm is the L2 "
                "norm, the square root of the sum of squared entries."
            )
        )
    with_held = [
        (flatten(g) + torch.cat([h.flatten() for h in held])).norm().item() for g in reference
    ]
    if all(number_matches(v, e) for v, e in zip(values, with_held, strict=True)):
        return wrong(
            _(
                "these norms include the gradients .grad already held: read each loss's own "
                "gradient from torch.autograd.grad, not from .grad."
            )
        )
    per_tensor_sum = [sum(g.norm().item() for g in grads) for grads in reference]
    if all(number_matches(v, s) for v, s in zip(values, per_tensor_sum, strict=True)):
        return wrong(
            _(
                "you added the norms of the separate tensors; the norm over all parameters is "
                "the square root of the sum of all squared entries (torch.cat the flattened "
                "gradients, or sqrt of the sum of squared norms)."
            )
        )
    return wrong(
        _(
            "expected norms near {expected:.4g} and {expected2:.4g}, "
            "got {names}: the norm of each loss's gradient over "
            "all params (the L2 norm of all entries together)."
        ).format(
            expected=expected[0], expected2=expected[1], names=", ".join(f"{v:.4g}" for v in values)
        )
    )


check_memory_prediction = choice_checker(
    {"a": "two backward passes, retain_graph=True", "b": "one backward of the sum", "c": "neither"},
    "a",
    why=N_(
        "retain_graph=True keeps every saved tensor of the graph alive until the second pass; "
        "one backward of the sum frees each node's tensors as it goes."
    ),
    misconceptions={
        "b": N_(
            "Does the summed loss hold both tasks' activations longer? One backward frees each "
            "node's saved tensors as it passes; it is retain_graph=True that keeps them all."
        ),
        "c": N_(
            "Do both ways keep the same tensors? retain_graph=True keeps the whole graph's saved "
            "tensors for the second pass; one backward of the sum frees them as it goes."
        ),
    },
    reveal="retain_graph=True peaks higher",
    doc="Section 2's prediction: which way of backing up two losses peaks higher in memory.",
)


check_generator_backward_writes = choice_checker(
    {"a": "G's only", "b": "D's only", "c": "both G's and D's"},
    "c",
    why=N_(
        "g_loss's graph runs through D's layers into G, and backward() adds into the .grad "
        "of every parameter on that graph."
    ),
    misconceptions={
        "a": N_(
            "Does a backward stop at the parameters you mean to step? It reaches every "
            "parameter on the loss's graph, and G's loss passes through D to get to G."
        ),
        "b": N_(
            "Does g_loss's graph reach G? D scores G's output, fake, which is not detached "
            "here: the graph goes on into G's parameters."
        ),
    },
    reveal="g_loss.backward() wrote into D's .grad too",
    doc="Section 4's prediction: whose .grad the generator's backward writes.",
)

check_second_task_backward = choice_checker(
    {
        "a": "the trunk's .grad holds both losses' gradients",
        "b": "the second backward() raises an error",
        "c": "the second backward() replaces the first one's gradient",
    },
    "b",
    why=N_("the first backward() freed the trunk's saved tensors, and the second one needs them."),
    misconceptions={
        "a": N_(
            "Is the trunk's graph still whole after the first backward()? The first one freed "
            "the values the forward pass saved for it (its saved tensors) as it went: the second "
            "raises an error before it adds anything."
        ),
        "c": N_(
            "Does backward() ever replace .grad? It adds; but here the second one fails "
            "first: the first backward() freed the trunk's saved tensors."
        ),
    },
    reveal="RuntimeError: Trying to backward through the graph a second time",
    doc="Section 1's prediction: two backward passes through a shared trunk.",
)


check_two_ways_agree = choice_checker(
    {
        "a": "they are the same",
        "b": "two passes give twice the gradient",
        "c": "the summed backward loses loss_a's part",
    },
    "a",
    why=N_(
        "the gradient of a sum is the sum of the gradients, and two backward passes add "
        "theirs into .grad: the same two terms either way."
    ),
    misconceptions={
        "b": N_(
            "Does retain_graph=True make the second pass count loss_a again? It only keeps "
            "the saved tensors: each pass adds its own loss's gradient, once."
        ),
        "c": N_(
            "Does the backward of a sum drop one of its terms? The gradient of a sum is the "
            "sum of the gradients: both losses reach .grad."
        ),
    },
    reveal="two backward passes = one summed backward",
    doc="Section 2's prediction: two backward passes against one backward of the sum.",
)
