"""Checkers for notebook 05, pitfalls: predict what each bug does before its run shows it,
what clipping every micro-batch leaves in ``.grad`` (exercise 05.1), and review six loops
nobody labelled (exercise 05.2)."""

from __future__ import annotations

import math

import torch

from helpers.audit import CODES
from helpers.checks import (
    NOT_ANSWERED,
    AnswerKindError,
    CheckResult,
    ask_first,
    checker,
    correct,
    is_unanswered,
    number_checker,
    wrong,
)
from helpers.pitfalls.review_loops import REVIEW_KEY
from helpers.predictions import choice_checker
from helpers.trace_tables import Call, trace_checker
from helpers.translation import N_, _, translate

CLIP_MAX_NORM, CLIP_K = 0.5, 4

check_clipped_norm = number_checker(
    CLIP_MAX_NORM,
    {
        CLIP_K * CLIP_MAX_NORM: N_(
            "That is 4 x 0.5, as if four clipped micro-batch gradients "
            "added up. clip_grad_norm_ rescales the whole of .grad, the running sum, in place: "
            "the clip after the 4th backward() caps the sum itself."
        ),
        math.sqrt(CLIP_K) * CLIP_MAX_NORM: N_(
            "That is the norm of four clipped pieces at right "
            "angles (2 x 0.5). But the last clip_grad_norm_ runs on the whole sum in .grad, "
            "after the 4th backward()."
        ),
        CLIP_MAX_NORM / CLIP_K: N_(
            "That is 0.5 / 4, as if the clipped gradient were divided "
            "by k afterwards. The losses were divided by 4 before backward(); the clip after "
            "the 4th backward() then caps the summed .grad at max_norm."
        ),
    },
    N_(
        "clip_grad_norm_ scales the whole of .grad in place whenever its norm is above "
        "max_norm. What does .grad hold after the 4th backward(), and what does the clip right "
        "after it do?"
    ),
    questions={
        2.0: N_("Do the clipped pieces add up past the last clip?"),
        1.0: N_("Which .grad does the last clip act on?"),
        0.125: N_("Is the gradient divided by k after the clip?"),
        None: N_("What does the last clip_grad_norm_ act on?"),
    },
    why=N_(
        "the last clip runs on the whole sum in .grad, so the step sees a norm of at most max_norm."
    ),
    doc="Exercise 05.1: the norm of the gradient that step() uses when clip_grad_norm_("
    "max_norm=0.5) runs after every one of 4 micro-batch backward() calls.",
    reveal="clipping every micro-batch: the step's norm is 0.5",
)


check_missing_zero_grad = choice_checker(
    {
        "a": "lower than the correct loop's",
        "b": "about the first step's",
        "c": "thousands of times the first, or more",
    },
    "c",
    why=N_(
        "each step applies the sum of every gradient so far, and momentum 0.9 piles those "
        "sums up again: the steps grow every batch until the loss overflows."
    ),
    misconceptions={
        "a": N_(
            "Does a missing zero_grad stay harmless, as in notebook 01's short run? That run "
            "had no momentum; here momentum 0.9 adds up the summed gradients once more, and "
            "the steps grow every batch."
        ),
        "b": N_(
            "Does the loss stay where it started? Each step applies every earlier gradient "
            "again, and momentum 0.9 adds them up once more: the steps grow every batch."
        ),
    },
    reveal="the loss overflows to inf at step 27 of 36",
    doc="Section 2's prediction: the loss of the loop without zero_grad, with momentum 0.9.",
)


check_zero_between = choice_checker(
    {"a": "they train as usual", "b": "they move a tiny amount", "c": "no weight moves"},
    "c",
    why=N_(
        "zero_grad() ran between backward() and step(): every `.grad` is None when step() "
        "runs, and step() skips a parameter whose `.grad` is None."
    ),
    misconceptions={
        "a": N_(
            "Does step() still find the gradients? zero_grad() ran after backward(): with "
            "set_to_none=True every `.grad` is None when step() runs."
        ),
        "b": N_(
            "Where would a tiny move come from? With set_to_none=True there is no gradient at "
            "all, not a small one, and this optimizer has no weight decay."
        ),
    },
    reveal="12 steps moved no weight == 0.0",
    doc="Section 3's prediction: what zero_grad() between backward() and step() leaves.",
)


check_dropped_tail = choice_checker(
    {"a": 0, "b": 2, "c": 4},
    "b",
    why=N_(
        "the loop steps after micro-batches 4 and 8; micro-batches 9 and 10 add into `.grad` "
        "and no step follows them."
    ),
    misconceptions={
        "a": N_(
            "Does `(i + 1) % k == 0` catch the end of the data? It is true at i + 1 = 4 and "
            "8 only: micro-batches 9 and 10 add into `.grad`, and no step follows."
        ),
        "c": N_(
            "Is the tail a whole window? 10 = 2 × 4 + 2: two full windows of 4, and a tail "
            "of 2 that no step follows."
        ),
    },
    reveal="micro-batches never stepped: 2 of 10",
    doc="Section 5's prediction: how many of 10 micro-batches never reach a step with k = 4.",
)


check_graph_bytes = choice_checker(
    {"a": "12 batches' worth", "b": "one batch's", "c": "none"},
    "c",
    why=N_(
        "each backward() freed what its graph had saved; `total` keeps the chain of nodes, "
        "which grows every batch, but no activation."
    ),
    misconceptions={
        "a": N_(
            "Does a kept graph keep its activations? Each backward() freed what its graph "
            "had saved: `total` keeps the nodes, not their tensors."
        ),
        "b": N_(
            "Does the last batch's graph keep its activations? Its backward() ran too, and "
            "freed them: `total` keeps only nodes."
        ),
    },
    reveal="activation bytes those graphs still hold: 0",
    doc="Section 7's prediction: the activation bytes the graphs kept by `total += loss` hold.",
)


check_new_head = choice_checker(
    {
        "a": "gradients, and weights that moved",
        "b": "gradients, and weights that never moved",
        "c": "no gradients",
    },
    "b",
    why=N_(
        "backward() gives every parameter that requires grad a gradient, the new head's "
        "too; step() moves only the parameters in the optimizer's param groups."
    ),
    misconceptions={
        "a": N_(
            "Does the optimizer see a layer added after it was built? It holds the "
            "parameters it was given: the new head's are in no param group, and step() "
            "never touches them."
        ),
        "c": N_(
            "Does backward() need the optimizer? It computes a gradient for every "
            "parameter that requires grad, the new head's included; only step() skips them."
        ),
    },
    reveal="largest change of the new head's weights: 0.0",
    doc="Section 8's prediction: a head swapped in after the optimizer was built.",
)


OK_WORDS = ("ok", "correct", "fine", "no bug", "none")
# What a wrong verdict on each loop asks first: marked buggy when it is correct ("ok"), marked
# correct when it is buggy ("bug"), or given another rule than the one it breaks ("rule").
REVIEW_HINTS = {
    ("A", "ok"): N_(
        "Loop A zeroes after the forward pass: does the forward pass read or write `.grad`? "
        "It does not; what counts is that `.grad` is empty before this batch's backward(), "
        "and it is."
    ),
    ("B", "bug"): N_(
        "Loop B zeroes once, before the loop: what does `.grad` hold at its second step()? "
        "The gradients of both batches: each step applies every gradient so far. Which rule "
        "is that?"
    ),
    ("B", "rule"): N_(
        "Loop B breaks a rule, but not that one: what does `.grad` hold at its second step()?"
    ),
    ("C", "ok"): N_(
        "Loop C keeps zeros instead of None: does backward() add differently to zeros? It "
        "adds this batch's gradient to them, as it fills a None: the step is the same."
    ),
    ("D", "bug"): N_(
        "Loop D clips after every backward(): what does the clip after the first backward() "
        "of a window do to the partial sum in `.grad`? Which rule is that?"
    ),
    ("D", "rule"): N_(
        "Loop D breaks a rule, but not that one: where does it clip, and how often per step()?"
    ),
    ("E", "ok"): N_(
        "Loop E zeroes at the end of each iteration: is that before the next backward()? "
        "It is, after step(): where zero_grad() may go. The first batch finds `.grad` None."
    ),
    ("F", "bug"): N_(
        "Loop F zeroes between backward() and step(): what does step() find in `.grad`? "
        "Which rule is that?"
    ),
    ("F", "rule"): N_("Loop F breaks a rule, but not that one: what does step() find in `.grad`?"),
    ("F", "step-without-grad"): N_(
        "Loop F does step without a gradient, but why? Its backward() ran: which call emptied "
        "`.grad` between that backward() and the step? Name the rule for that call."
    ),
}


def _verdict(value: object, letter: str, rules: tuple[str, ...]) -> str:
    if value is None:
        return "ok"
    if not isinstance(value, str):
        raise AnswerKindError(
            _('loop {letter}: write "ok" or the rule id it breaks, as a string, got {kind}').format(
                letter=letter, kind=type(value).__name__
            )
        )
    text = value.strip().strip("`").strip().lower().replace("_", "-").replace(" ", "-")
    if text.replace("-", " ") in OK_WORDS:
        return "ok"
    if text not in rules:
        raise AnswerKindError(
            _("loop {letter}: {value!r} is not a rule id; use one of: {rules}").format(
                letter=letter, value=value, rules=", ".join(("ok", *rules))
            )
        )
    return text


@checker
def check_loop_review(answer: object) -> CheckResult:
    """Exercise 05.2: a verdict per loop of :mod:`helpers.pitfalls.review_loops`, "ok" or the
    rule id it breaks, as a dict such as ``{"A": "ok", "B": "missing-zero-grad", ...}``."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    letters = list(REVIEW_KEY)
    buggy = {letter for letter, rule in REVIEW_KEY.items() if rule != "ok"}
    rules = tuple(CODES)
    if isinstance(answer, (set, frozenset, list, tuple)) and all(
        isinstance(item, str) for item in answer
    ):
        marked = {item.strip().upper() for item in answer}
        if marked == buggy:
            return wrong(
                _(
                    "{letters} are the buggy ones. Now name the rule each breaks: answer "
                    'with a dict such as {{"A": "ok", "B": "<rule id>", ...}}'
                ).format(letters=", ".join(sorted(buggy)))
            )
        return wrong(
            _(
                'answer with a dict, a verdict per loop: "ok" or the rule id it breaks, '
                'such as {{"A": "ok", "B": "<rule id>", ...}}'
            )
        )
    if not isinstance(answer, dict):
        raise AnswerKindError(
            _(
                'answer must be a dict, a verdict per loop, such as {{"A": "ok", "B": '
                '"<rule id>", ...}}; got {kind}'
            ).format(kind="None" if answer is None else type(answer).__name__)
        )
    given = {str(key).strip().upper(): value for key, value in answer.items()}
    if given and all(value is Ellipsis for value in given.values()):
        return wrong(NOT_ANSWERED)
    unfilled = [letter for letter in letters if given.get(letter) is Ellipsis]
    if unfilled:
        return wrong(
            _('loop {letter} still holds ...: write "ok" or the rule id it breaks').format(
                letter=unfilled[0]
            )
        )
    missing = [letter for letter in letters if letter not in given]
    if missing:
        return wrong(
            _("give a verdict for every loop, A to {last}: missing {missing}").format(
                last=letters[-1], missing=", ".join(missing)
            )
        )
    for letter in letters:
        verdict, right = _verdict(given[letter], letter, rules), REVIEW_KEY[letter]
        if verdict == right:
            continue
        kind = "ok" if right == "ok" else ("bug" if verdict == "ok" else "rule")
        hint = REVIEW_HINTS.get((letter, verdict), REVIEW_HINTS[letter, kind])  # a symptom
        return wrong(ask_first(translate(hint)))
    return correct(
        _(
            "every verdict is right: A, C and E empty `.grad` before each backward() (after "
            "the forward pass, with zeros, at the end of the loop); B never empties it between "
            "steps, D clips partial sums, and F empties it right before the step."
        )
    )


check_loop_review.hints = REVIEW_HINTS


check_clip_trace = trace_checker(
    1.0,
    torch.optim.SGD,
    [
        Call("backward", lambda w: 6 * w / 2),
        Call("clip", max_norm=2.0),
        Call("backward", lambda w: -2 * w / 2),
        Call("clip", max_norm=2.0),
        Call("step"),
    ],
    lr=0.1,
    doc="""Section 6's trace: clipping every micro-batch of a window of 2 (losses 6w and -2w,
    each divided by 2), max_norm = 2, plain SGD at lr = 0.1 from w = 1; a row (w, w.grad) per
    call.""",
)
