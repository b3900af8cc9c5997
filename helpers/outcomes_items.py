"""The items of the outcomes check, four per outcome: O1, predict ``.grad`` and the weights
after a sequence of calls; O2, write a correct accumulation loop (its lines in order, its
divisions and its counts); O3, find the bugs in someone else's loop, in a review nobody
announced. The items: :data:`PRE` (notebook 00) and :data:`POST` (notebook 09),
the same misconceptions in the same places, with other numbers and code. An item judges one
answer: right, or wrong with the misconception that answer reveals (``None`` when it reveals
none in particular). The notebook shows each item's question and :attr:`Item.code`; the tests
run that code to check every expected answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from helpers.checks import AnswerKindError, as_number
from helpers.translation import N_, _

OUTCOMES = {
    "O1": N_("predict .grad and the weights after a sequence of calls"),
    "O2": N_("write a correct accumulation loop"),
    "O3": N_("find the bugs in someone else's loop"),
}

# Each misconception: what the learner believes, then what holds instead and where it is taught.
MISCONCEPTIONS = {
    "replaced": N_(
        "backward() replaces .grad. It adds to it: two backward() calls leave the sum "
        "(notebook 01)."
    ),
    "zero_grad_undoes": N_(
        "zero_grad() undoes a step. It only empties .grad; the weights stay where the step "
        "moved them (notebook 01)."
    ),
    "zero_grad_resets_momentum": N_(
        "zero_grad() resets the optimizer's momentum. It only empties .grad: with zeros in "
        ".grad the momentum buffer keeps moving the weight (notebooks 01 and 02)."
    ),
    "none_like_zeros": N_(
        "a None gradient steps like a zero one. The optimizer skips a parameter whose .grad "
        "is None, momentum and all (notebook 02)."
    ),
    "tail_by_k": N_(
        "every window's losses are divided by k. The short last window holds fewer "
        "micro-batches: divide by its own length (notebook 03)."
    ),
    "zero_inside_window": N_(
        "zero_grad() belongs inside the micro-batch loop. There it empties .grad before "
        "every micro-batch, so nothing adds up (notebook 03)."
    ),
    "clip_per_micro_batch": N_(
        "clipping after every micro-batch. Clip once per window, the whole window's gradient "
        "(notebooks 05 and 07)."
    ),
    "clip_before_unscale": N_(
        "clipping before unscale_(). The gradient is then still multiplied by the scale: "
        "unscale_() first, then clip (notebook 07)."
    ),
    "schedule_in_micro_batches": N_(
        "a schedule's length counted in micro-batches. A scheduler stepped once per optimizer "
        "step needs the number of optimizer steps (notebook 03)."
    ),
    "tail_not_a_step": N_(
        "the short last window is no step. It is one: ceil(n / k) steps per epoch for n "
        "micro-batches (notebook 03)."
    ),
    "unusual_is_wrong": N_(
        "a zero_grad() in an unusual place is a bug. Anywhere after the previous step() and "
        "before the next backward() is correct (notebook 02)."
    ),
    "tail_overlooked": N_(
        "a loop that steps every k micro-batches handles the tail. The short last window must "
        "be stepped too, its losses divided by its own length (notebooks 03 and 05)."
    ),
    "zero_between": N_(
        "zero_grad() between backward() and step() is harmless. It empties .grad before the "
        "step can use it: nothing trains (notebooks 02 and 05)."
    ),
    "kept_graph": N_(
        "keeping the loss tensors is harmless. Each keeps its graph alive, so the memory grows "
        "every iteration: keep loss.item() (notebook 05)."
    ),
}

Verdict = tuple[bool, str | None]  # right, and the misconception a wrong answer reveals


@dataclass(frozen=True)
class Item:
    """One item: its ``id`` (``"O1.2"``; its outcome is the part before the dot), the
    ``misconceptions`` it can detect, ``judge`` (the learner's answer -> :data:`Verdict`,
    raising :class:`AnswerKindError` for an answer of the wrong kind), the ``code`` its
    question shows, and ``given``, the numbers its question states."""

    id: str
    misconceptions: tuple[str, ...]
    judge: Callable[[object], Verdict]
    code: str = ""
    given: dict = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        return self.id.split(".")[0]


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)


def number_item(
    id: str, expected: float, mistakes: Mapping[float, str], code: str = "", **given
) -> Item:
    """An item answered with a number: ``expected``, or one of ``mistakes`` (a wrong number ->
    the misconception it reveals)."""

    def judge(answer: object) -> Verdict:
        value = as_number(answer)
        if _close(value, expected):
            return True, None
        return False, next((m for wrong, m in mistakes.items() if _close(value, wrong)), None)

    judge.expected = expected
    return Item(id, tuple(dict.fromkeys(mistakes.values())), judge, code, given)


def letter_item(
    id: str, letters: str, expected: str, mistakes: Mapping[str, str], code: str = ""
) -> Item:
    """An item answered with one of ``letters`` ("abc"; "B" and "(b)" are fine too):
    ``expected``, or a letter of ``mistakes`` (-> its misconception); any other letter reveals
    none in particular."""

    def judge(answer: object) -> Verdict:
        letter = answer.strip().strip("()").lower() if isinstance(answer, str) else None
        if letter is None or len(letter) != 1 or letter not in letters:
            raise AnswerKindError(
                _('answer must be one of the letters {letters}, such as "{first}"').format(
                    letters=", ".join(letters), first=letters[0]
                )
            )
        return letter == expected, None if letter == expected else mistakes.get(letter)

    judge.expected = expected
    return Item(id, tuple(dict.fromkeys(mistakes.values())), judge, code)


def order_item(
    id: str, lines: Mapping[str, str], orders: Sequence[str], distractors: Mapping[str, str]
) -> Item:
    """An item answered with the letters of ``lines`` in order ("dga..."): one of ``orders``
    (every correct order), or an order that uses a line of ``distractors`` (-> the
    misconception that line stands for)."""
    letters = "".join(lines)

    def judge(answer: object) -> Verdict:
        given = (
            "".join(c for c in answer.lower() if not c.isspace() and c not in ",;-")
            if isinstance(answer, str)
            else None
        )
        if not given or set(given) - set(letters):
            raise AnswerKindError(
                _(
                    "answer must be the letters of the lines in order, from {letters} only, "
                    'such as "{example}"'
                ).format(letters=", ".join(letters), example=letters[:3])
            )
        if given in orders:
            return True, None
        used = [distractors[c] for c in given if c in distractors]
        return False, used[0] if used else None

    judge.expected = orders[0]
    judge.lines, judge.orders = dict(lines), tuple(orders)
    return Item(id, tuple(dict.fromkeys(distractors.values())), judge)


# The review's options, the same in both checks: what is wrong with the loop, if anything.
REVIEW_OPTIONS = {
    "a": N_("nothing: it is correct"),
    "b": N_("gradients of earlier steps pile up"),
    "c": N_("the short last window is dropped or weighted wrongly"),
    "d": N_("the step uses no gradient: nothing trains"),
    "e": N_("every iteration's graph is kept: the memory grows"),
}
REVIEW = "".join(REVIEW_OPTIONS)


def review_item(id: str, expected: str, code: str) -> Item:
    """A loop to review: the letter of what is wrong with it, of :data:`REVIEW_OPTIONS`."""
    if expected == "a":  # a correct but unusual loop: calling it a bug is the misconception
        mistakes = {"b": "unusual_is_wrong", "d": "unusual_is_wrong"}
    else:
        overlooked = {"b": "unusual_is_wrong", "c": "tail_overlooked", "d": "zero_between"}
        overlooked["e"] = "kept_graph"
        mistakes = {"a": overlooked[expected]}
    return letter_item(id, REVIEW, expected, mistakes, code)


def _momentum_code(lr: float, momentum: float, slope: float, set_to_none: bool) -> str:
    zero = "optimizer.zero_grad()" if set_to_none else "optimizer.zero_grad(set_to_none=False)"
    return (
        "w = torch.nn.Parameter(torch.tensor(1.0))\n"
        f"optimizer = torch.optim.SGD([w], lr={lr}, momentum={momentum})\n"
        f"({slope:g} * w).backward()\n"
        "optimizer.step()\n"
        f"{zero}\n"
        "optimizer.step()"
    )


def _window_lines(order: str) -> dict[str, str]:
    """The six lines of a window loop and two distractors, lettered by ``order``: the letters
    of the loop, the slice, the zero_grad, the inner loop, the right backward, the step, the
    backward divided by k and the zero_grad inside the inner loop."""
    lines = (
        "for start in range(0, len(micro_batches), accumulation_steps):",
        "    window = micro_batches[start : start + accumulation_steps]",
        "    optimizer.zero_grad()",
        "    for inputs, targets in window:",
        "        (loss_fn(model(inputs), targets) / len(window)).backward()",
        "    optimizer.step()",
        "        (loss_fn(model(inputs), targets) / accumulation_steps).backward()",
        "        optimizer.zero_grad()",
    )
    return dict(sorted(zip(order, lines, strict=True)))


PRE_REVIEW = {
    "O3.1": (
        "a",
        """def train(model, optimizer, batches):
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()""",
    ),
    "O3.2": (
        "c",
        """def train(model, optimizer, micro_batches, accumulation_steps=4):
    optimizer.zero_grad()
    for i, (inputs, targets) in enumerate(micro_batches):
        (F.mse_loss(model(inputs), targets) / accumulation_steps).backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()""",
    ),
    "O3.3": (
        "d",
        """def train(model, optimizer, batches):
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.zero_grad()
        optimizer.step()""",
    ),
    "O3.4": (
        "e",
        """def train(model, optimizer, batches):
    total = 0.0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        total += loss
    return total / len(batches)""",
    ),
}

POST_REVIEW = {
    "O3.1": (
        "a",
        """def train(model, optimizer, batches):
    for inputs, targets in batches:
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()
        optimizer.zero_grad()""",
    ),
    "O3.2": (
        "c",
        """def train(model, optimizer, micro_batches, accumulation_steps=4):
    optimizer.zero_grad()
    for i, (inputs, targets) in enumerate(micro_batches):
        (F.mse_loss(model(inputs), targets) / accumulation_steps).backward()
        if (i + 1) % accumulation_steps == 0 or i == len(micro_batches) - 1:
            optimizer.step()
            optimizer.zero_grad()""",
    ),
    "O3.3": (
        "d",
        """def train(model, optimizer, batches):
    for inputs, targets in batches:
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        model.zero_grad()
        optimizer.step()""",
    ),
    "O3.4": (
        "e",
        """def train(model, optimizer, batches):
    losses = []
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss)
    return sum(losses).item() / len(losses)""",
    ),
}

PRE = (
    number_item(
        "O1.1",
        7.0,
        {4.0: "replaced", 3.0: "replaced"},
        "w = torch.tensor(2.0, requires_grad=True)\n(3 * w).backward()\n(w * w).backward()",
        asks="w.grad",
    ),
    number_item(
        "O1.2",
        0.4,
        {0.6: "replaced"},
        "w = torch.nn.Parameter(torch.tensor(1.0))\n"
        "optimizer = torch.optim.SGD([w], lr=0.1)\n"
        "for _ in range(2):\n    (2 * w).backward()\n    optimizer.step()",
        asks="w",
    ),
    number_item(
        "O1.3",
        0.43,
        {0.7: "zero_grad_resets_momentum", 1.0: "zero_grad_undoes"},
        _momentum_code(0.1, 0.9, 3, set_to_none=False),
        asks="w",
    ),
    number_item(
        "O1.4",
        0.7,
        {0.43: "none_like_zeros", 1.0: "zero_grad_undoes"},
        _momentum_code(0.1, 0.9, 3, set_to_none=True),
        asks="w",
    ),
    order_item(
        "O2.1",
        _window_lines("dgahcbef"),
        ("dgahcb", "daghcb", "dghcba"),
        {"e": "tail_by_k", "f": "zero_inside_window"},
    ),
    number_item("O2.2", 2.0, {4.0: "tail_by_k"}, micro_batches=10, accumulation_steps=4),
    letter_item("O2.3", "abc", "c", {"a": "clip_per_micro_batch", "b": "clip_before_unscale"}),
    number_item(
        "O2.4",
        9.0,
        {30.0: "schedule_in_micro_batches", 6.0: "tail_not_a_step", 7.5: "tail_not_a_step"},
        micro_batches=10,
        accumulation_steps=4,
        epochs=3,
    ),
    *(review_item(id, expected, code) for id, (expected, code) in PRE_REVIEW.items()),
)

POST = (
    number_item(
        "O1.1",
        8.0,
        {6.0: "replaced", 2.0: "replaced"},
        "w = torch.tensor(3.0, requires_grad=True)\n(2 * w).backward()\n(w * w).backward()",
        asks="w.grad",
    ),
    number_item(
        "O1.2",
        -0.5,
        {0.0: "replaced"},
        "w = torch.nn.Parameter(torch.tensor(1.0))\n"
        "optimizer = torch.optim.SGD([w], lr=0.5)\n"
        "for _ in range(2):\n    (1 * w).backward()\n    optimizer.step()",
        asks="w",
    ),
    number_item(
        "O1.3",
        -0.5,
        {0.0: "zero_grad_resets_momentum", 1.0: "zero_grad_undoes"},
        _momentum_code(0.5, 0.5, 2, set_to_none=False),
        asks="w",
    ),
    number_item(
        "O1.4",
        0.0,
        {-0.5: "none_like_zeros", 1.0: "zero_grad_undoes"},
        _momentum_code(0.5, 0.5, 2, set_to_none=True),
        asks="w",
    ),
    order_item(
        "O2.1",
        _window_lines("hbgecdaf"),
        ("hbgecd", "hgbecd", "hbecdg"),
        {"a": "tail_by_k", "f": "zero_inside_window"},
    ),
    number_item("O2.2", 1.0, {3.0: "tail_by_k"}, micro_batches=7, accumulation_steps=3),
    letter_item("O2.3", "abc", "a", {"c": "clip_per_micro_batch", "b": "clip_before_unscale"}),
    number_item(
        "O2.4",
        6.0,
        {14.0: "schedule_in_micro_batches", 4.0: "tail_not_a_step", 14 / 3: "tail_not_a_step"},
        micro_batches=7,
        accumulation_steps=3,
        epochs=2,
    ),
    *(review_item(id, expected, code) for id, (expected, code) in POST_REVIEW.items()),
)

CHECKS = {"pre": PRE, "post": POST}
