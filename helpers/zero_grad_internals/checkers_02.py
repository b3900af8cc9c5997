"""Checkers for notebook 02, inside zero_grad."""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Iterator

import torch
from torch import nn

from helpers.checks import (
    NOT_ANSWERED,
    CheckResult,
    LearnerCodeError,
    as_function,
    as_names,
    ask_first,
    call_learner,
    checker,
    correct,
    is_unanswered,
    number_checker,
    wrong,
)
from helpers.predictions import choice_checker
from helpers.translation import N_, _, translate


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


_check_grad_number = number_checker(
    grad_after_sequence,
    {
        4.0: N_(
            "That is 2 * w for w = 2, but step() moved w before the last backward: "
            "w = 2 - 0.1 * (4 + 4) = 1.2."
        ),
        0.0: N_("zero_grad() ran, but then one more backward() added 2 * w."),
        8.0 + 2 * 1.2: N_(
            "zero_grad() did run between the step and the last backward: "
            ".grad restarted from zeros."
        ),
        8.0: N_(
            "That is `.grad` just before step(); zero_grad() and one more backward() came after it."
        ),
        3.2: N_(
            "`.grad` is 8 before the step, not 4: both backward calls add, so the step "
            "moves w to 2 - 0.1 * 8 = 1.2."
        ),
        1.2: N_("That is w after the step, not its gradient: the last backward adds 2 * w."),
        1.44: N_("That is the value of w ** 2 at w = 1.2, not its gradient 2 * w."),
        12.0: N_("That skips both the step (w changes) and zero_grad (.grad restarts from zeros)."),
    },
    N_(
        "Follow w and .grad line by line: .grad = 4, then 8; step moves w to 1.2; zero_grad "
        "fills zeros; the last backward adds 2 * w."
    ),
    questions={
        4.0: N_("Where is w when the last backward() runs?"),
        0.0: N_("Does anything run after zero_grad()?"),
        8.0 + 2 * 1.2: N_("What does zero_grad(set_to_none=False) leave in .grad?"),
        8.0: N_("Which call comes last in the sequence?"),
        3.2: N_("What does .grad hold when step() runs?"),
        1.2: N_("Is the question about w or about its gradient?"),
        1.44: N_("Does backward() add the loss's value or its gradient?"),
        12.0: N_("What do step() and zero_grad() change before the last backward()?"),
        None: N_("What do w and .grad hold after each line?"),
    },
    why=N_(
        "the step moved w to 1.2, zero_grad(set_to_none=False) left zeros, and the last "
        "backward() added 2 × 1.2."
    ),
    doc="",
)


@checker
def check_grad_after_sequence(answer: object) -> CheckResult:
    """Exercise 02.1: expected 2 * 1.2 = 2.4 (the step moved w from 2 to 2 - 0.1 * 8)."""
    if answer is None:
        return wrong(
            _(
                "`.grad` is not None: zero_grad(set_to_none=False) leaves a tensor of zeros, and "
                "the last backward() adds its gradient to it."
            )
        )
    return _check_grad_number(answer)


check_grad_after_sequence.expected = _check_grad_number.expected
check_grad_after_sequence.misconceptions = _check_grad_number.misconceptions
check_grad_after_sequence.questions = _check_grad_number.questions
check_grad_after_sequence.why = _check_grad_number.why


def moved_by_first_adam_step() -> set[str]:
    """Exercise 02.4, computed: which of a (real grad), b (grad of zeros) and c (grad None)
    does the first step of a new Adam optimizer (lr 0.1, no weight decay) change?"""
    params = {name: nn.Parameter(torch.tensor([1.0])) for name in "abc"}
    optimizer = torch.optim.Adam(params.values(), lr=0.1)
    (2 * params["a"]).sum().backward()
    params["b"].grad = torch.zeros(1)
    before = {name: p.detach().clone() for name, p in params.items()}
    optimizer.step()
    return {name for name, p in params.items() if not torch.equal(p.detach(), before[name])}


@checker
def check_moved_parameters(answer: object) -> CheckResult:
    """Exercise 02.4: expected {"a"}: a moves by its gradient; b's zeros meet moments that
    are still zero (a first step) and no weight decay; c (None) is skipped."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    given = as_names(answer, "{'a'}", letters=True, names=("a", "b", "c"))
    if not given <= {"a", "b", "c"}:
        return wrong(_("the parameters are named 'a', 'b' and 'c'."))
    expected = moved_by_first_adam_step()
    if given == expected:
        return correct(
            _(
                "only a moved. b's zero gradient met moments that were still zero (nothing in the "
                "past to keep pushing) and no weight decay; c was skipped."
            )
        )
    hints = []
    if "c" in given:
        hints.append(_("c's grad is None, so the optimizer skips it entirely."))
    if "b" in given:
        hints.append(
            _(
                "b's grad is zeros, so Adam does not skip it, but what would move it? This is the "
                "optimizer's first step: its moments start at zero and a zero gradient keeps them "
                "there, and this Adam has no weight decay."
            )
        )
    if "a" not in given:
        hints.append(_("a has a real gradient, so its Adam update moves it."))
    return wrong(" ".join(hints))


loss_fn = nn.functional.mse_loss


# The four loops of exercise 02.2. Each is meant to take one step per pair of batches, with
# the gradient of the pair's summed loss (two backward() calls add up).
def loop_a(model, optimizer, batches):
    for i, (x, y) in enumerate(batches):
        loss_fn(model(x), y).backward()
        if i % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()


def loop_b(model, optimizer, batches):
    for i, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        if i % 2 == 1:
            optimizer.step()


def loop_c(model, optimizer, batches):
    for i, (x, y) in enumerate(batches):
        if i % 2 == 0:
            optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        if i % 2 == 1:
            optimizer.step()


def loop_d(model, optimizer, batches):
    for i, (x, y) in enumerate(batches):
        loss_fn(model(x), y).backward()
        if i % 2 == 1:
            optimizer.step()
        optimizer.zero_grad()


ACCUMULATION_LOOPS = {"A": loop_a, "B": loop_b, "C": loop_c, "D": loop_d}
"""The loops of exercise 02.2, by the letter the notebook gives them."""

_LR = 0.1


def _loop_case() -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    generator = torch.Generator().manual_seed(0)
    model = nn.Linear(3, 1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
    batches = [
        (torch.randn(4, 3, generator=generator), torch.randn(4, 1, generator=generator))
        for _ in range(6)
    ]
    return model, batches


def _pair_reference() -> list[torch.Tensor]:
    """The weights after three pairs of batches, each step computed by hand:
    p <- p - lr * gradient of the pair's summed loss (torch.autograd.grad, .grad untouched)."""
    model, batches = _loop_case()
    params = list(model.parameters())
    for first in range(0, len(batches), 2):
        loss = sum(loss_fn(model(x), y) for x, y in batches[first : first + 2])
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p -= _LR * g
    return [p.detach() for p in params]


def correct_pair_loops() -> set[str]:
    """Exercise 02.2, computed: the letters of the loops whose weights, after three pairs of
    batches under plain SGD (lr 0.1), match the pairs' gradients applied by hand."""
    reference = _pair_reference()
    right = set()
    for letter, loop in ACCUMULATION_LOOPS.items():
        model, batches = _loop_case()
        loop(model, torch.optim.SGD(model.parameters(), lr=_LR), batches)
        if all(
            torch.allclose(p.detach(), r, atol=1e-6)
            for p, r in zip(model.parameters(), reference, strict=True)
        ):
            right.add(letter)
    return right


_LOOP_HINTS = {
    # (letter, whether the answer includes it): the hint that names the mistake
    ("B", True): N_(
        "What does B's zero_grad() before a pair's second batch wipe? B zeroes at the top of "
        "every batch, so the second batch's zero_grad() wipes the first one's gradient before "
        "the step: each step sees only half of its pair."
    ),
    ("D", True): N_(
        "What runs between D's first backward() of a pair and its step()? D zeroes at the end "
        "of every batch, also after the first batch of a pair: that is between its backward() "
        "and the step() that needs it, so each step sees only half of its pair."
    ),
    ("A", False): N_(
        "What is in .grad when A's next pair begins? A zeroes right after each step(), so the "
        "next pair's first backward() starts from nothing, as it should."
    ),
    ("C", False): N_(
        "Where does C call zero_grad(), and what has run before it? C zeroes only before the "
        "first batch of each pair: after the previous step() and before the pair's first "
        "backward() (its very first call finds the grads None, which is fine)."
    ),
}


@checker
def check_correct_loops(answer: object) -> CheckResult:
    """Exercise 02.2: the loops that step once per pair of batches with the pair's gradient
    are A and C."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    given = as_names(answer, "{'A', 'B'}", letters=True, names=ACCUMULATION_LOOPS)
    if not given <= set(ACCUMULATION_LOOPS):
        return wrong(_("the loops are named 'A', 'B', 'C' and 'D'."))
    expected = correct_pair_loops()
    if given == expected:
        return correct(
            _(
                "zero_grad() goes after the previous step() and before the first backward() of "
                "the next step, never between two backward() calls that one step adds up."
            )
        )
    hints = [
        translate(hint)
        for (letter, included), hint in _LOOP_HINTS.items()
        if (letter in given) == included and (letter in expected) != included
    ]
    return wrong(ask_first(" ".join(hints)))


def _zero_grad_case() -> tuple[torch.optim.Optimizer, dict[str, nn.Parameter]]:
    """An SGD optimizer over two param groups whose parameters hold each kind of grad: a
    plain one (with an inf in it), None, one in the second group, one with a grad_fn
    (create_graph=True) and one that is a leaf requiring grad (set by hand)."""
    params = {
        name: nn.Parameter(torch.ones(3)) for name in ("plain", "none", "second", "graph", "leaf")
    }
    (params["plain"] * torch.tensor([1.0, 2.0, float("inf")])).sum().backward()
    (params["second"] * 3).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_graph=True on a parameter warns of a cycle
        (params["graph"] ** 2).sum().backward(create_graph=True)
    params["leaf"].grad = torch.full((3,), 4.0, requires_grad=True)
    groups = [
        {"params": [params["plain"], params["none"]]},
        {"params": [params["second"], params["graph"], params["leaf"]], "lr": 0.01},
    ]
    return torch.optim.SGD(groups, lr=0.1), params


class Delegated(Exception):
    """The learner's my_zero_grad called torch's own zero_grad."""


@contextlib.contextmanager
def _zero_grad_refused() -> Iterator[None]:
    """torch's own ``zero_grad`` (the optimizer's, or a module's) raises ``Delegated`` while
    the learner's function runs: the exercise is to write what it does."""
    originals = {cls: cls.zero_grad for cls in (torch.optim.Optimizer, nn.Module)}

    def refuse(*_, **__):
        raise Delegated

    for cls in originals:
        cls.zero_grad = refuse
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls.zero_grad = original


def run_zero_grad(my_zero_grad, **options) -> tuple[dict, dict]:
    optimizer, params = _zero_grad_case()
    before = {name: p.grad for name, p in params.items()}
    with _zero_grad_refused():
        call_learner(my_zero_grad, optimizer, **options)
    return before, {name: p.grad for name, p in params.items()}


@checker
def check_my_zero_grad(my_zero_grad: object) -> CheckResult:
    """Exercise 02.3: ``my_zero_grad(optimizer, set_to_none=True)`` must do what
    ``Optimizer.zero_grad`` does (without the foreach path): every param group, None grads
    left alone, ``None`` by default, else the same tensor cut from its graph and zeroed."""
    if is_unanswered(my_zero_grad):
        return wrong(NOT_ANSWERED)
    as_function(my_zero_grad, "my_zero_grad(optimizer)")
    if inspect.unwrap(my_zero_grad) is inspect.unwrap(torch.optim.Optimizer.zero_grad):
        return wrong(DELEGATED)
    try:
        inspect.signature(my_zero_grad).bind(None, set_to_none=False)
    except (TypeError, ValueError):
        return wrong(
            _(
                "give your function the parameter set_to_none with a default, "
                "`def my_zero_grad(optimizer, set_to_none=True):`, so that "
                "my_zero_grad(optimizer, set_to_none=False) works too."
            )
        )
    try:
        _before, after = run_zero_grad(my_zero_grad)
    except LearnerCodeError as error:
        return wrong(_none_grad_hint(error) or str(error))
    if after["second"] is not None and after["plain"] is None:
        return wrong(
            _(
                "the parameters of the second param group kept their grads: loop over every "
                "group in optimizer.param_groups, not param_groups[0] (the article's mistake)."
            )
        )
    kept = [name for name, grad in after.items() if grad is not None]
    if kept:
        if all(not grad.any() for grad in after.values() if grad is not None):
            return wrong(
                _(
                    "my_zero_grad(optimizer) filled the grads with zeros: set_to_none defaults "
                    "to True, as in torch, so the grads become None."
                )
            )
        return wrong(_("with set_to_none=True every grad must become None."))
    try:
        before, after = run_zero_grad(my_zero_grad, set_to_none=False)
    except LearnerCodeError as error:
        return wrong(_none_grad_hint(error) or str(error))
    return diagnose_zeroed(before, after)


DELEGATED = N_(
    "your function calls torch's own zero_grad, which is what the exercise asks you to "
    "write: loop over optimizer.param_groups and each group's 'params', and reset each "
    "p.grad yourself (None, or detach_() and zero_() it in place)."
)


def _none_grad_hint(error: LearnerCodeError) -> str | None:
    if isinstance(error.error, Delegated):
        return translate(DELEGATED)
    if isinstance(error.error, AttributeError) and "NoneType" in str(error.error):
        return _(
            "your function failed on a parameter whose grad is "
            "None (it never had a gradient): skip those, as torch "
            "does. ({error})"
        ).format(error=error)
    return None


def diagnose_zeroed(before: dict, after: dict) -> CheckResult:
    if after["none"] is not None:
        return wrong(_("a grad that was None must stay None: skip it, do not make zeros for it."))
    if after["second"] is before["second"] and after["second"].any():
        return wrong(
            _(
                "the parameters of the second param group kept their grads: loop over every "
                "group in optimizer.param_groups, not param_groups[0] (the article's mistake)."
            )
        )
    for name in ("plain", "second", "graph", "leaf"):
        grad = after[name]
        if grad is None:
            return wrong(
                _("with set_to_none=False the grads must stay tensors (of zeros), not None.")
            )
        if grad is not before[name]:
            return wrong(
                _(
                    "set_to_none=False keeps the same grad tensor and zeroes it in place "
                    "(grad.zero_()); a new tensor (torch.zeros_like) costs a new allocation, "
                    "and anything holding the old one (DDP's buckets) would not see the zeros."
                )
            )
        if torch.isnan(grad).any():
            return wrong(
                _(
                    "a grad that held inf is now NaN: inf * 0 is NaN, so multiplying by 0 does not "
                    "zero it; use grad.zero_() (or fill_(0))."
                )
            )
        if grad.any():
            return wrong(
                _("a grad still holds nonzero values after zeroing ({name}).").format(name=name)
            )
        if grad.grad_fn is not None:
            return wrong(
                _(
                    "a grad made with create_graph=True still has a grad_fn: cut it from its graph "
                    "with grad.detach_() before zero_(), as torch does."
                )
            )
        if grad.requires_grad:
            return wrong(
                _(
                    "a grad still requires grad: torch calls grad.requires_grad_(False) on a grad "
                    "without a grad_fn (and detach_() on one with a grad_fn) before zero_()."
                )
            )
    return correct(
        _(
            "every group, None left alone, None by default, else the same tensor cut from its "
            "graph and zeroed in place: what Optimizer.zero_grad does."
        )
    )


check_none_or_zeros_step = choice_checker(
    {"a": "neither", "b": "only with zeros", "c": "only with None", "d": "both"},
    "b",
    why=N_(
        "step() skips a parameter whose .grad is None; zeros are a gradient of 0, and the "
        "momentum buffer still moves the parameter."
    ),
    misconceptions={
        "a": N_(
            "Does a gradient of 0 leave the parameter where it is? With momentum the step "
            "still applies the buffer: 0.9 × 0.5 = 0.45, times lr 0.1."
        ),
        "c": N_(
            "Does step() update a parameter whose .grad is None? It skips it; only zeros "
            "make a step, and the buffer moves the parameter."
        ),
        "d": N_(
            "Does step() update a parameter whose .grad is None? It skips it: only the step "
            "on zeros moves it."
        ),
    },
    reveal="None never moves the parameter",
    doc="Section 2's prediction: which second step of SGD with momentum moves the parameter.",
)

check_misplaced_zero_grad = choice_checker(
    {
        "a": "before the forward pass",
        "b": "after the forward pass",
        "c": "after step()",
        "d": "between backward() and step()",
    },
    "d",
    why=N_(
        "only there does it empty .grad before the step that needs it; the forward pass "
        "never touches .grad."
    ),
    misconceptions={
        "a": N_(
            "Is that not the standard loop itself? It is the reference the others are "
            "compared with: look for the place where the step finds .grad empty."
        ),
        "b": N_(
            "Does the forward pass read or write .grad? It does neither, so zeroing after it "
            "is the same as zeroing before it."
        ),
        "c": N_(
            "Has step() not already used .grad by then? It has: zeroing after the step is "
            "the same as zeroing before the next forward pass."
        ),
    },
    reveal="only between backward and step differs",
    doc="Section 4's prediction: the one place for zero_grad that trains differently.",
)
