"""Checkers for notebook 03, gradient accumulation on purpose."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from helpers import learner_code
from helpers.accumulation import full_batch_gradients, windows
from helpers.checks import (
    NONE_GRAD_IN_A_WINDOW,
    NOT_ANSWERED,
    CheckResult,
    as_function,
    as_names,
    as_number,
    ask_first,
    call_learner,
    checker,
    correct,
    is_unanswered,
    number_checker,
    number_matches,
    wrong,
)
from helpers.data import make_padded_tokens
from helpers.grads import StepGradients
from helpers.models import NORMS, TokenModel
from helpers.parsons import parsons_checker, trains_like
from helpers.predictions import choice_checker
from helpers.trace_tables import Call, trace_checker
from helpers.translation import N_, _, translate

K = 4
MICRO_BATCHES = 10  # windows of 4, 4 and a tail of 2


def _micro_batches(padded: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
    tokens, targets, _ = make_padded_tokens(2 * MICRO_BATCHES, 6, seed=3)
    if not padded:
        generator = torch.Generator().manual_seed(4)
        targets = torch.randint(0, 11, targets.shape, generator=generator)
    return list(zip(tokens.split(2), targets.split(2), strict=True))


def _window_references(model: nn.Module, micro_batches: list) -> list[torch.Tensor]:
    references = []
    for window in windows(micro_batches, K):
        inputs = torch.cat([x for x, _ in window])
        targets = torch.cat([y for _, y in window])
        grads = full_batch_gradients(model, nn.CrossEntropyLoss(), inputs, targets)
        references.append(torch.cat([g.flatten() for g in grads]))
    return references


def _diagnose(got: list[torch.Tensor], references: list[torch.Tensor], case: str) -> str | None:
    """None when every step used its window's gradient, else the likely mistake."""
    expected = len(references)
    if len(got) == expected - 1:
        return _(
            "is the short last window stepped? step() ran {n_got} times, but {MICRO_BATCHES} "
            "micro-batches with k={K} make {expected} windows: the last window "
            "of {value} was never stepped."
        ).format(
            n_got=len(got),
            MICRO_BATCHES=MICRO_BATCHES,
            K=K,
            expected=expected,
            value=MICRO_BATCHES % K,
        )
    if len(got) != expected:
        return _(
            "how many windows are there? step() ran {n_got} times; {MICRO_BATCHES} "
            "micro-batches with k={K} make {expected} windows: one step per window."
        ).format(n_got=len(got), MICRO_BATCHES=MICRO_BATCHES, K=K, expected=expected)
    for index, (g, r) in enumerate(zip(got, references, strict=True)):
        if torch.allclose(g, r, rtol=1e-4, atol=1e-6):
            continue
        if not g.any():
            return _(
                "did zero_grad() run between backward() and step()? Step {value} saw no gradient."
            ).format(value=index + 1)
        if index > 0 and torch.allclose(g - got[index - 1], r, rtol=1e-3, atol=1e-5):
            return _(
                "does each window start from empty grads? Window {value} still held window "
                "{index}'s gradient: zero the grads before each window."
            ).format(value=index + 1, index=index)
        ratio = (g @ r / (r @ r)).item()
        aligned = torch.allclose(g, ratio * r, rtol=1e-3, atol=1e-6)
        if aligned and index == expected - 1 and abs(ratio - (MICRO_BATCHES % K) / K) < 1e-3:
            return _(
                "how many micro-batches does your last window hold? It is divided by k={K} "
                "but holds only {value} micro-batches: its gradient is {ratio:.2g} "
                "of what it should be. Divide by what the window really "
                "holds."
            ).format(K=K, value=MICRO_BATCHES % K, ratio=ratio)
        if aligned and case == "padded" and ratio < 1:
            return _(
                "does targets.numel() count only the tokens that count? Window {value}'s "
                "gradient is {ratio:.3g}x the mean over its tokens: you divided by more tokens "
                "than it holds. targets.numel() counts the padding too: count "
                "the non-padding tokens, (targets != -100).sum(), over "
                "that window."
            ).format(value=index + 1, ratio=ratio)
        if aligned:
            return _(
                "what do you divide the summed loss by? Window {value}'s gradient is "
                "{ratio:.3g}x the mean over its tokens: divide the summed loss by the number "
                "of non-padding tokens (targets != -100) in that window."
            ).format(value=index + 1, ratio=ratio)
        return _(
            "does every token of the window weigh the same? Window {value}'s gradient points "
            "in another direction than the {case} window's mean: the micro-batches are "
            "weighted unequally. Sum the per-token losses over "
            "the window and divide by the window's token count, "
            "not by each micro-batch's."
        ).format(value=index + 1, case=translate(case))
    return None


@checker
def check_accumulation_loop(train_epoch: Callable) -> CheckResult:
    """Exercise 03.2, part 2: ``train_epoch(model, optimizer, loss_fn, micro_batches, k)``, with a
    sum-reduced ``loss_fn``, must step once per window of ``k`` micro-batches (the last
    one shorter) with the gradient of the window's mean loss per non-padding token."""
    if is_unanswered(train_epoch):
        return wrong(NOT_ANSWERED)
    as_function(train_epoch, "train_epoch(model, optimizer, loss_fn, micro_batches, k)")
    for case, padded in ((N_("unpadded"), False), (N_("padded"), True)):
        model = TokenModel(seed=1)
        micro_batches = _micro_batches(padded)
        references = _window_references(model, micro_batches)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # weights stay: easy to compare
        loss_fn = nn.CrossEntropyLoss(reduction="sum")
        with StepGradients(optimizer) as record:
            call_learner(
                train_epoch,
                model,
                optimizer,
                loss_fn,
                micro_batches,
                K,
                meanings=NONE_GRAD_IN_A_WINDOW,
            )
        mistake = _diagnose(record.at_steps, references, case)
        if mistake is not None:
            return wrong(
                ask_first(
                    _("with {case} sequences, {mistake}").format(
                        case=translate(case), mistake=mistake
                    )
                )
            )
    return correct(
        _("every window, the short tail included, stepped with its exact mean gradient.")
    )


check_tail_fraction = number_checker(
    3 / 4,
    {
        3 / 11: N_(
            "3/11 is the tail's share of the data (3 of the 11 micro-batches). The "
            "question compares the tail's step with the tail's own correct gradient, the mean "
            "over its 3 micro-batches."
        ),
        0: N_(
            "The tail is not dropped: the article's `if len(loader) % accumulation_steps != 0` "
            "runs one more step() on it, with the gradient its 3 micro-batches accumulated."
        ),
        1: N_(
            "The article divides every micro-batch's loss by k = 4, the tail's too, but the "
            "tail's correct mean divides by 3."
        ),
        1 / 4: N_("1/4 is one micro-batch's weight; the tail sums three of them: 3 x 1/4."),
        4 / 3: N_(
            "Upside down: the tail gets less than it should (3 terms of 1/4 each, where "
            "the mean needs 3 terms of 1/3)."
        ),
        1 / 2: N_("0.5 is the tail of 2 in section 2; here the tail holds 3."),
    },
    N_("The tail sums 3 micro-batch losses, each divided by 4; its correct mean divides by 3."),
    questions={
        3 / 11: N_("Is the question about the tail's share of the data, or of its own gradient?"),
        0: N_("Does the article's loop drop the tail?"),
        1: N_("What is each of the tail's losses divided by?"),
        1 / 4: N_("How many micro-batches does the tail add up?"),
        4 / 3: N_("Does the tail get more or less than its mean?"),
        1 / 2: N_("How many micro-batches does this tail hold?"),
        None: N_("What is each of the tail's losses divided by, and how many does it add up?"),
    },
    why=N_("3 losses, each divided by 4, add up to 3/4 of their mean."),
    doc="""Exercise 03.1: the article's loop with k = 4 over 11 equal micro-batches: the tail
    window of 3 gets 3/4 of its correct gradient.""",
)


@checker
def check_exact_norms(answer: object) -> CheckResult:
    """An earlier form of exercise 03.4 (a prediction): which normalization layers keep
    accumulation exactly equal to one big batch? GroupNorm and LayerNorm (per-sample
    statistics), not BatchNorm."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    given = as_names(answer, "{'LayerNorm'}", names=NORMS) - {"none"}
    if not given <= set(NORMS):
        return wrong(_("use the names 'BatchNorm', 'GroupNorm' and 'LayerNorm'."))
    if given == {"GroupNorm", "LayerNorm"}:
        return correct(
            _(
                "both normalize each sample on its own, so a sample's output does not "
                "depend on which micro-batch it is in."
            )
        )
    hints = []
    if "BatchNorm" in given:
        hints.append(
            _(
                "BatchNorm normalizes with the mean and variance of the whole (micro-)"
                "batch: smaller micro-batches give other statistics, other outputs."
            )
        )
    for name in ("GroupNorm", "LayerNorm"):
        if name not in given:
            hints.append(
                _(
                    "{name} computes its statistics within each sample: "
                    "it keeps accumulation exact."
                ).format(name=name)
            )
    return wrong(" ".join(hints))


# Exercise 03.4 (optional): which layers and losses keep accumulation exact? Each option with
# the hint a learner gets for getting it wrong: a hint for a wrong pick, or for a right one
# left out.
COUPLING_OPTIONS = ("A", "B", "C", "D")
COUPLING_EXACT = {"A", "B"}
COUPLING_HINTS = {
    "A": N_(
        "A, BatchNorm in eval mode, normalizes with its running statistics: numbers stored in "
        "the layer, not taken from the batch, so each sample's output is its own and accumulation "
        "stays exact."
    ),
    "B": N_(
        "B divides each sample by its own length: nothing from the other samples enters, so "
        "accumulation stays exact."
    ),
    "C": N_(
        "C subtracts the mean of the batch it sees: with micro-batches of 8 that is each "
        "micro-batch's own mean, so a sample's output depends on which micro-batch it is in."
    ),
    "D": N_(
        "D scores each sample against the other samples of its batch: in a micro-batch of 8 a "
        "sample meets 7 others, in one batch of 32 it meets 31, so its loss is another."
    ),
}


@checker
def check_batch_coupling(answer: object) -> CheckResult:
    """Exercise 03.4 (optional, a prediction): of A (BatchNorm in eval mode), B (each sample
    scaled to length 1), C (each feature centred on the batch's mean) and D (a contrastive loss with
    in-batch negatives), which keep 4 accumulated micro-batches of 8 equal to one batch of
    32? A and B: each sample's output and loss depend on that sample alone."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    given = as_names(answer, "{'A', 'B'}", letters=True, names=COUPLING_OPTIONS)
    unknown = given - set(COUPLING_OPTIONS)
    if unknown:
        return wrong(
            _("{unknown}: answer with the letters A, B, C and D, for example {{'A', 'C'}}.").format(
                unknown=", ".join(sorted(unknown))
            )
        )
    if given == COUPLING_EXACT:
        return correct(
            _(
                "A and B give each sample an output of its own; C and D mix the samples of a "
                "batch, so micro-batches change what each sample sees."
            )
        )
    mistaken = (given - COUPLING_EXACT) | (COUPLING_EXACT - given)
    return wrong(" ".join(translate(COUPLING_HINTS[option]) for option in sorted(mistaken)))


# Exercise 03.5 (optional): the loss to log for a window. Each case: the micro-batches' mean
# losses (as loss_fn returned them, before any division) and their counts (samples or tokens).
LOG_CASES = (
    ([2.0, 1.6, 1.2, 3.0], [32, 32, 32, 8]),  # a loader's short last micro-batch
    ([0.9, 1.3], [20, 28]),  # a short window of padded sequences: token counts
    ([1.0, 2.0, 4.0], [16, 16, 16]),  # equal micro-batches
)


def log_mistakes(losses: list[float], counts: list[int]) -> list[tuple[float, str]]:
    """What each typical mistake logs for one window, with its hint."""
    k, total = len(losses), sum(counts)
    summed = sum(loss * count for loss, count in zip(losses, counts, strict=True))
    return [
        (losses[-1], _("that is the last micro-batch's loss alone: log the whole window's.")),
        (
            losses[-1] / k,
            _(
                "that is the last micro-batch's divided loss, what `print(loss.item())` shows "
                "after `loss = loss / k`: log the whole window's loss, not the last piece of it."
            ),
        ),
        (
            losses[-1] * counts[-1] / total,
            _(
                "that is the last micro-batch's scaled loss (its loss x its share of the "
                "window): add up every micro-batch's share."
            ),
        ),
        (
            sum(losses) / k,
            _(
                "that is the mean of the micro-batch means, the sum of the losses divided by k: "
                "a short micro-batch counts as much as a full one. Weight each loss by its count."
            ),
        ),
        (
            sum(losses),
            _(
                "that is the sum of the micro-batch means, k times too large for equal "
                "micro-batches: weight each by its count and divide by the window's count."
            ),
        ),
        (summed, _("that is the window's summed loss: divide it by the window's count.")),
        (
            summed / k,
            _(
                "you divided the summed loss by k, the number of micro-batches: divide by the "
                "number of items in the window, sum(counts)."
            ),
        ),
        (
            summed / (k * max(counts)),
            _(
                "you divided by k x a full micro-batch, as if every micro-batch were full: "
                "divide by what the window holds, sum(counts)."
            ),
        ),
    ]


@checker
def check_window_loss(window_loss: Callable) -> CheckResult:
    """Exercise 03.5 (optional): ``window_loss(losses, counts)`` gets each micro-batch's mean
    loss (a 0-d tensor) and its count of samples or tokens, and must return the window's loss as
    one batch: ``sum(loss * count) / sum(counts)``."""
    if is_unanswered(window_loss):
        return wrong(NOT_ANSWERED)
    as_function(window_loss, "window_loss(losses, counts)")
    for losses, counts in LOG_CASES:
        given = [torch.tensor(loss) for loss in losses]
        result = call_learner(window_loss, given, list(counts))
        if is_unanswered(result):
            return wrong(NOT_ANSWERED)
        value = as_number(result, _("the value your function returns"))
        expected = sum(loss * count for loss, count in zip(losses, counts, strict=True))
        expected /= sum(counts)
        if number_matches(value, expected):
            continue
        where = _("for losses {losses} over counts {counts}, you returned {value:.4g}").format(
            losses=losses, counts=counts, value=value
        )
        for mistaken, hint in log_mistakes(losses, counts):
            if number_matches(value, mistaken):
                return wrong(_("{where}: {hint}").format(where=where, hint=hint))
        return wrong(
            _(
                "{where}, the window's loss is {expected:.4g}: sum(loss "
                "x count) over the micro-batches, divided by sum(counts)."
            ).format(where=where, expected=expected)
        )
    return correct(
        _("the window's loss is its items' mean, the same number one big batch would give.")
    )


# Exercise 03.3: (micro-batches per epoch, k, epochs) -> optimizer steps in the whole run.
SCHEDULE_CASES = ((10, 4, 3), (8, 4, 2), (32, 4, 5), (5, 8, 2), (7, 3, 1))


def _schedule_mistakes(n: int, k: int, epochs: int) -> list[tuple[float, str]]:
    """What each typical mistake counts, with its hint."""
    return [
        (
            n * epochs,
            _(
                "that counts micro-batches, not optimizer steps: a "
                "schedule that long lasts about k = {k} times longer "
                "than training, which ends inside it."
            ).format(k=k),
        ),
        (
            epochs * (n // k),
            _(
                "n // k leaves out each epoch's short last window, which is stepped too: "
                "OneCycleLR then raises after its last step. Round up instead."
            ),
        ),
        (
            epochs * (n // k + 1),
            _(
                "n // k + 1 adds a short window even when k divides n and there is none: "
                "round up, ceil(n / k)."
            ),
        ),
        (
            n * epochs / k,
            _(
                "true division counts a fraction of a step: the short window is one whole "
                "step. Count the windows of one epoch, rounded up, then multiply."
            ),
        ),
        (
            (n * epochs) // k,
            _(
                "windows do not run across epochs: each epoch ends with its own short window. "
                "Count the windows of one epoch, rounded up, then multiply by epochs."
            ),
        ),
        (
            math.ceil(n * epochs / k),
            _(
                "windows do not run across epochs: each epoch ends with its own short window. "
                "Count the windows of one epoch, rounded up, then multiply by epochs."
            ),
        ),
        (math.ceil(n / k), _("that is one epoch's optimizer steps: multiply by epochs.")),
        (
            epochs * round(n / k),
            _(
                "round() goes to the nearest whole number, so a short last window of less than "
                "half of k is dropped (and 2.5 rounds to 2): every short window is one more step, "
                "round up with math.ceil(n / k)."
            ),
        ),
    ]


def _is_whole_number(result: object) -> bool:
    if isinstance(result, torch.Tensor):
        return not (result.is_floating_point() or result.is_complex())
    return isinstance(result, numbers.Integral) and not isinstance(result, bool)


@checker
def check_scheduler_steps(scheduler_steps: Callable) -> CheckResult:
    """Exercise 03.3: ``scheduler_steps(micro_batches_per_epoch, k, epochs)`` must count the
    optimizer steps of the whole run: ``epochs * ceil(micro_batches_per_epoch / k)``."""
    if is_unanswered(scheduler_steps):
        return wrong(NOT_ANSWERED)
    as_function(scheduler_steps, "scheduler_steps(micro_batches_per_epoch, k, epochs)")
    values, as_float = [], False
    for n, k, epochs in SCHEDULE_CASES:
        result = call_learner(scheduler_steps, n, k, epochs)
        if is_unanswered(result):
            return wrong(NOT_ANSWERED)
        values.append(as_number(result, _("the value your function returns")))
        as_float = as_float or not _is_whole_number(result)
    expected = [epochs * math.ceil(n / k) for n, k, epochs in SCHEDULE_CASES]
    wrong_cases = [
        i for i, (v, e) in enumerate(zip(values, expected, strict=True)) if not number_matches(v, e)
    ]
    if wrong_cases:
        # a mistake is named only when it gives every one of the learner's numbers
        mistakes = [_schedule_mistakes(*case) for case in SCHEDULE_CASES]
        for index, (_value, hint) in enumerate(mistakes[0]):
            if all(number_matches(v, m[index][0]) for v, m in zip(values, mistakes, strict=True)):
                first = wrong_cases[0]
                n, k, epochs = SCHEDULE_CASES[first]
                return wrong(
                    _(
                        "with {n} micro-batches per epoch, k = {k} and {epochs} "
                        "epochs you counted {values:g}: {hint}"
                    ).format(n=n, k=k, epochs=epochs, values=values[first], hint=hint)
                )
        n, k, epochs = SCHEDULE_CASES[wrong_cases[0]]
        return wrong(
            _(
                "with {n} micro-batches per epoch, k = {k} and {epochs} "
                "epochs you counted {values:g}, the run makes {expected} "
                "optimizer steps: each epoch has ceil(n / k) windows, "
                "the short last one included, and each window is one "
                "step."
            ).format(
                n=n,
                k=k,
                epochs=epochs,
                values=values[wrong_cases[0]],
                expected=expected[wrong_cases[0]],
            )
        )
    note = (
        _(" Return it as an int: OneCycleLR(total_steps=...) refuses a float.") if as_float else ""
    )
    return correct(_("one step per window, the short last window of every epoch counted.") + note)


def _window_problem():
    """Ten micro-batches of 4 samples (k = 4 leaves a tail of 2), a small classifier and a
    scheduler whose learning rate falls every step."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        model = nn.Linear(3, 2)
        micro_batches = [(torch.randn(4, 3), torch.randint(0, 2, (4,))) for _ in range(10)]
    return model, micro_batches


def train_windows(model, optimizer, scheduler, micro_batches, accumulation_steps):
    """The window loop of notebook 03, section 2, with a scheduler: the reference of the
    Parsons problem."""
    for start in range(0, len(micro_batches), accumulation_steps):
        window = micro_batches[start : start + accumulation_steps]  # the last may be shorter
        optimizer.zero_grad()
        for inputs, targets in window:
            loss = F.cross_entropy(model(inputs), targets)
            (loss / len(window)).backward()  # the window's mean, whatever its size
        optimizer.step()
        scheduler.step()


def _trained(function) -> tuple[torch.Tensor, int]:
    model, micro_batches = _window_problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + step))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a scheduler stepped before the optimizer warns
        function(model, optimizer, scheduler, micro_batches, 4)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return weights, scheduler.last_epoch


check_window_order = parsons_checker(
    "def train(model, optimizer, scheduler, micro_batches, accumulation_steps):",
    {
        "a": "    window = micro_batches[start : start + accumulation_steps]",
        "b": "        (loss / accumulation_steps).backward()",
        "c": "for start in range(0, len(micro_batches), accumulation_steps):",
        "d": "        optimizer.zero_grad()",
        "e": "    optimizer.step()",
        "f": "        loss = F.cross_entropy(model(inputs), targets)",
        "g": "    scheduler.step()",
        "h": "    for inputs, targets in window:",
        "i": "        scheduler.step()",
        "j": "    optimizer.zero_grad()",
        "k": "        (loss / len(window)).backward()",
    },
    distractors={
        "b": N_(
            "does `loss / accumulation_steps` fit the short last window? It holds fewer "
            "micro-batches than that: divide by `len(window)`."
        ),
        "d": N_(
            "does a zero_grad() inside the micro-batch loop leave anything to add up? It "
            "empties `.grad` before every micro-batch."
        ),
        "i": N_(
            "does the schedule count micro-batches or optimizer steps? A scheduler stepped "
            "per micro-batch runs k times too fast."
        ),
    },
    required={
        "c": N_("what makes a window of every k micro-batches? The loop over `start`."),
        "a": N_("which micro-batches are in this window? The slice that makes `window`."),
        "j": N_(
            "what empties `.grad` before each window? Without it, each step adds the "
            "windows before it."
        ),
        "h": N_("what runs the window's micro-batches? The loop over `window`."),
        "f": N_("what computes each micro-batch's loss?"),
        "k": N_("which line runs backward()? Without it no gradient reaches step()."),
        "e": N_("which line moves the weights? Without optimizer.step() nothing trains."),
        "g": N_("where does the scheduler step? Once per optimizer step, right after it."),
    },
    runs_right=trains_like(train_windows, _trained),
    misordered=N_(
        "are zero_grad(), step() and scheduler.step() where they belong? The lines are the "
        "right ones, but in this order the loop does not zero once per window, run backward() "
        "on each micro-batch, then step the optimizer and the scheduler once."
    ),
    why=N_(
        "one zero_grad(), one backward() per micro-batch with its loss divided by the "
        "window's real size, then one step() and one scheduler.step() per window: the short "
        "tail gets its whole gradient."
    ),
    doc="""Section 2's Parsons problem: the window loop with a scheduler, from shuffled lines
    with three distractors (``loss / accumulation_steps``, a zero_grad and a scheduler step per
    micro-batch).""",
    names={"F": F},
    before={
        ("e", "g"): N_(
            "does the scheduler step before the optimizer? It sets the learning rate of the "
            "next step: call scheduler.step() right after optimizer.step()."
        ),
    },
)


check_tail_share = choice_checker(
    {"a": "all of it", "b": "half", "c": "a quarter"},
    "b",
    why=N_(
        "the tail's 2 micro-batch losses were each divided by 4, not by 2: their sum is half "
        "their mean."
    ),
    misconceptions={
        "a": N_(
            "Does the extra step after the loop make the tail whole? It steps on what `.grad` "
            "holds: 2 losses, each divided by 4, so half the tail's mean gradient."
        ),
        "c": N_(
            "Is each loss divided by 4 twice? Each is divided by 4 once, and the tail holds 2 "
            "of them: 2 / 4 of the mean, a half."
        ),
    },
    reveal="the tail step used 0.500 x its correct gradient",
    doc="Section 2's prediction: the share of its correct gradient the article's tail step gets.",
)


check_window_trace = trace_checker(
    1.0,
    torch.optim.SGD,
    [
        Call("backward", lambda w: 2 * w / 2),
        Call("backward", lambda w: 4 * w / 2),
        Call("step"),
        Call("zero_grad"),
        Call("backward", lambda w: 6 * w / 1),
        Call("step"),
    ],
    lr=0.5,
    doc="""Section 2's trace: a window of 2 micro-batches (losses 2w and 4w, each divided by
    2), its step and zero_grad, then a tail window of 1 (loss 6w, divided by 1) and its step,
    plain SGD at lr = 0.5 from w = 1; a row (w, w.grad) per call.""",
)


check_window_zero_grads = choice_checker(
    {"a": "1, before the first window", "b": "3, one per window", "c": "10, one per micro-batch"},
    "b",
    why=N_(
        "a window's micro-batches must add up in .grad, so the loop empties it once per "
        "window, before the window's first backward()."
    ),
    misconceptions={
        "a": N_(
            "Does the second window start from an empty .grad then? It would add to the "
            "first window's gradient, which the first step already used: one zero_grad() "
            "per window."
        ),
        "c": N_(
            "Can the micro-batches of one window add up if .grad is emptied before each of "
            "them? Each step would use its last micro-batch only: one zero_grad() per window."
        ),
    },
    reveal="zero_grad() calls: one per window",
    doc="Section 2's prediction: how many zero_grad() calls the plain window loop makes.",
)


# ------------------------------------------------------------ exercise 03.2, part 1
TAIL_SIZES = (4,) * 9 + (2,)  # a loader's micro-batches: the last one short; k = 4 windows
TAIL_K = 4


def _tail_problem() -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    """Ten micro-batches of 4 samples but the last, of 2, for a small classifier: with k = 4
    the windows hold 4, 4 and 2 micro-batches, the last one 6 samples."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        model = nn.Linear(3, 2)
        micro_batches = [(torch.randn(n, 3), torch.randint(0, 2, (n,))) for n in TAIL_SIZES]
    return model, micro_batches


def _micro_batch_gradients(model: nn.Module, micro_batches: list) -> list[torch.Tensor]:
    """The gradient of each micro-batch's mean loss, flattened."""
    grads = []
    for inputs, targets in micro_batches:
        loss = F.cross_entropy(model(inputs), targets)
        grads.append(
            torch.cat([g.flatten() for g in torch.autograd.grad(loss, model.parameters())])
        )
    return grads


def _tail_mistakes(grads: list[torch.Tensor], sizes: list[int], k: int) -> dict[str, torch.Tensor]:
    """What one window's step would see under each common mistake, by the mistake's name."""
    samples = sum(sizes)
    return {
        "correct": sum(n / samples * g for n, g in zip(sizes, grads, strict=True)),
        "by len(window)": sum(grads) / len(grads),
        "by k": sum(grads) / k,
        "undivided": sum(grads),
        "by samples only": sum(grads) / samples,
        "last micro-batch only": grads[-1] * sizes[-1] / samples,
        "last micro-batch mean": grads[-1],
    }


TAIL_HINTS = {
    "by len(window)": N_(
        "Do the window's micro-batches hold the same number of samples? In window {window} "
        "they hold {sizes}: `loss / len(window)` gives each micro-batch the same weight, so "
        "the short one's samples count double. Weight each by `len(targets) / samples`, the "
        "window's samples."
    ),
    "by k": N_(
        "Does the last window hold k micro-batches? Window {window} holds {count}, so "
        "dividing each of its losses by k={k} adds up to less than its mean. Weight each "
        "micro-batch by its share of the window's samples, `len(targets) / samples`."
    ),
    "undivided": N_(
        "Does the window's gradient add up its micro-batches' means, or average them? "
        "Undivided, window {window} steps on the sum of {count} means: weight each by "
        "`len(targets) / samples`."
    ),
    "by samples only": N_(
        "Is each micro-batch's loss a sum or a mean? `F.cross_entropy` returns the mean, so "
        "dividing it by the window's samples leaves out its own sample count: multiply by "
        "`len(targets)` too."
    ),
    "last micro-batch only": N_(
        "Does a zero_grad() inside the micro-batch loop leave anything to add up? Window "
        "{window} stepped on its last micro-batch alone: zero once per window, before its "
        "first backward()."
    ),
    "last micro-batch mean": N_(
        "Does a zero_grad() inside the micro-batch loop leave anything to add up? Window "
        "{window} stepped on its last micro-batch alone: zero once per window, before its "
        "first backward()."
    ),
}


def _diagnose_tail(got: list[torch.Tensor], grads: list[torch.Tensor]) -> str | None:
    """None when each step used its window's mean over samples, else the likely mistake."""
    sizes = list(TAIL_SIZES)
    spans = [range(s, min(s + TAIL_K, len(sizes))) for s in range(0, len(sizes), TAIL_K)]
    if len(got) != len(spans):
        return _(
            "Does the loop step once per window, the short last one included? step() ran "
            "{n_got} times; {n} micro-batches with k={k} make {expected} windows."
        ).format(n_got=len(got), n=len(sizes), k=TAIL_K, expected=len(spans))
    for number, (seen, span) in enumerate(zip(got, spans, strict=True), start=1):
        window_sizes = [sizes[i] for i in span]
        expected = _tail_mistakes([grads[i] for i in span], window_sizes, TAIL_K)
        if torch.allclose(seen, expected["correct"], rtol=1e-4, atol=1e-6):
            continue
        if not seen.any():
            return _(
                "Did zero_grad() run between backward() and step()? Step {window} saw no gradient."
            ).format(window=number)
        if number > 1:
            previous = got[number - 2]
            if torch.allclose(seen - previous, expected["correct"], rtol=1e-3, atol=1e-5):
                return _(
                    "Is .grad emptied before each window? Window {window} still held window "
                    "{previous}'s gradient: zero the grads once per window."
                ).format(window=number, previous=number - 1)
        for name, value in expected.items():
            if name != "correct" and torch.allclose(seen, value, rtol=1e-4, atol=1e-6):
                return translate(TAIL_HINTS[name]).format(
                    window=number,
                    sizes=", ".join(map(str, window_sizes)),
                    count=len(window_sizes),
                    k=TAIL_K,
                )
        return _(
            "Is window {window}'s gradient the mean over its samples? It is not: weight each "
            "micro-batch's mean loss by `len(targets) / samples`, where samples is the "
            "window's total, and backward that."
        ).format(window=number)
    return None


@checker
def check_tail_window_loop(train_epoch: Callable) -> CheckResult:
    """Exercise 03.2, part 1: ``train_epoch(model, optimizer, micro_batches, k)`` with mean
    losses must step once per window of ``k`` micro-batches (the last one shorter), each step
    with the gradient of the mean over the window's samples, though the last micro-batch holds
    fewer samples than the others."""
    if is_unanswered(train_epoch):
        return wrong(NOT_ANSWERED)
    as_function(train_epoch, "train_epoch(model, optimizer, micro_batches, k)")
    try:
        unfinished = learner_code.has_placeholder(learner_code.function_source(train_epoch))
    except ValueError:  # a lambda or a function made by exec: run it as it is
        unfinished = False
    if unfinished:
        return wrong(NOT_ANSWERED)
    model, micro_batches = _tail_problem()
    grads = _micro_batch_gradients(model, micro_batches)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # weights stay: easy to compare
    with StepGradients(optimizer) as record:
        call_learner(
            train_epoch, model, optimizer, micro_batches, TAIL_K, meanings=NONE_GRAD_IN_A_WINDOW
        )
    mistake = _diagnose_tail(record.at_steps, grads)
    if mistake is not None:
        return wrong(ask_first(mistake))
    return correct(
        _(
            "each window stepped on the mean over its samples: a micro-batch's mean loss "
            "times its share of the window, len(targets) / samples, adds up to that mean."
        )
    )


check_token_mean_prediction = choice_checker(
    {
        "a": "equal, to float precision",
        "b": "off by less than 1%",
        "c": "off by more than 5%",
    },
    "c",
    why=N_(
        "each micro-batch's mean weighs its own tokens by 1 / its token count, so the tokens "
        "of a short micro-batch weigh more than those of a long one."
    ),
    misconceptions={
        "a": N_(
            "Do the four micro-batches hold the same number of tokens? They hold different "
            "numbers, so a mean of their means weighs each token by 1 / its micro-batch's "
            "count, not 1 / the window's."
        ),
        "b": N_(
            "How different are the micro-batches' token counts? The printout above shows "
            "them: a token of the shortest micro-batch weighs far more than one of the "
            "longest, and the gradient moves with it."
        ),
    },
    reveal="the mean of means is off by more than 5%",
    doc="Section 3's prediction: how far the mean of per-micro-batch token means is off.",
)
