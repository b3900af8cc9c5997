"""Exercise checking: every checker returns a :class:`CheckResult` that says whether the
answer is right and, when it is not, names the likely mistake.

Set the environment variable ``GM_STRICT_CHECKS=1`` to make a failing check raise
``AssertionError`` instead (the test suite runs every solution this way).
"""

from __future__ import annotations

import ast
import contextvars
import dataclasses
import decimal
import functools
import html
import inspect
import math
import numbers
import os
import re
import textwrap
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from helpers.translation import N_, _, translate

STRICT_ENV_VAR = "GM_STRICT_CHECKS"
# Shown in the language GM_LANG names (helpers/translation.py): correct() and wrong() translate
# a message marked with N_, as these two are; a translation starts with the prefix's.
NOT_ANSWERED_PREFIX = N_("Not answered yet")
NOT_ANSWERED = N_("Not answered yet: replace `...` with your answer and run the cell again.")


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one answer: ``passed`` and a ``message`` for the learner.
    ``wrong_before`` is how many wrong answers the exercise had had before this one (see
    :func:`ask_first`)."""

    passed: bool
    message: str
    wrong_before: int = dataclasses.field(default=0, compare=False)

    @property
    def unanswered(self) -> bool:
        """The exercise still holds its placeholder ``...``: nothing was judged yet."""
        prefixes = (NOT_ANSWERED_PREFIX, translate(NOT_ANSWERED_PREFIX))
        return not self.passed and self.message.startswith(prefixes)

    @property
    def verdict(self) -> str:
        """ "✅ Correct", "❌ Not yet" or, for an exercise not answered yet, "✏️", in the
        language of the messages."""
        if self.unanswered:
            return "✏️"
        return _("✅ Correct") if self.passed else _("❌ Not yet")

    def __repr__(self) -> str:
        if self.unanswered:
            return f"✏️ {self.message}"
        return _("{verdict}: {message}").format(verdict=self.verdict, message=self.message)

    def _repr_html_(self) -> str:
        if self.unanswered:
            return (
                '<div style="border-left: 4px solid #777; padding: 0.3em 0.8em;">'
                f"✏️ {html.escape(self.message)}</div>"
            )
        colour = "#1a7f37" if self.passed else "#b35900"
        return (
            f'<div style="border-left: 4px solid {colour}; padding: 0.3em 0.8em;">'
            + _("<b>{verdict}</b>: {message}").format(
                verdict=self.verdict, message=html.escape(self.message)
            )
            + "</div>"
        )


def correct(message: str) -> CheckResult:
    """A passing result. A message marked with ``N_`` is translated here."""
    return CheckResult(True, translate(message))


def wrong(message: str) -> CheckResult:
    """A failing result; raises ``AssertionError`` in strict mode. A message marked with
    ``N_`` (:data:`NOT_ANSWERED`) is translated here."""
    message = translate(message)
    if os.environ.get(STRICT_ENV_VAR, "") not in ("", "0"):
        raise AssertionError(message)
    return CheckResult(False, message)


def is_unanswered(answer: object) -> bool:
    """True for the placeholder ``...`` that exercise cells start with, and for a function
    whose body is still only ``...``."""
    if answer is Ellipsis:
        return True
    if not inspect.isfunction(answer):
        return False
    try:
        [definition] = ast.parse(textwrap.dedent(inspect.getsource(answer))).body
    except (OSError, TypeError, SyntaxError, ValueError):
        return False
    if not isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False  # a lambda, whose source is the line around it
    body = definition.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str) and len(body) > 1:  # a docstring
            body = body[1:]
    return (
        len(body) == 1
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and body[0].value.value is Ellipsis
    )


class AnswerKindError(TypeError):
    """The answer is of the wrong kind (a string where a number is asked, a function with the
    wrong parameters, ...). A checker decorated with :func:`checker` turns it into a ❌ that
    says what kind of answer is expected."""


class LearnerCodeError(Exception):
    """The learner's function raised: :func:`checker` reports it as a ❌ with what the
    exception usually means, never as a traceback."""

    def __init__(self, error: BaseException, meaning: str):
        self.error, self.meaning = error, meaning
        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raised = _("your function raised {name}").format(name=type(error).__name__)
        if text:  # as Python shows an exception: its name, ": ", its message
            raised += f": {text[:300].rstrip('.')}"
        if meaning:
            raised = _("{raised}. {meaning}").format(raised=raised, meaning=meaning)
        super().__init__(raised)


# Called as observe(checked, args, kwargs, result, seconds) after each outermost call of a
# checker decorated with :func:`checker` that returned: the test suite reruns those calls with
# GM_LANG=zh_CN (tests/conftest.py) to check that every verdict it sees in English also reads
# in Chinese and names the same code, identifiers and numbers.
OBSERVERS: list[Callable] = []
_depth = [0]  # checkers running now (a checker may call another)


# Feedback in two tiers, for the hints that ask their question first (predictions with
# options, trace tables, Parsons problems, code reviews): the first wrong answer to an exercise
# gets the hint's question alone; the second and later ones the whole hint, with the
# computation. WRONG_SO_FAR counts, per checker, the wrong answers since its last right one
# (tests/conftest.py clears it before each test and replays it for the reruns in Chinese).
WRONG_SO_FAR: dict[int, int] = {}
_TIER: contextvars.ContextVar[list | None] = contextvars.ContextVar("tier", default=None)
QUESTION = re.compile(r"(.*?[?？])", re.DOTALL)


def ask_first(hint: str) -> str:
    """``hint`` (already translated) for this wrong answer: on the exercise's first wrong
    answer, its opening question alone and an invitation to answer again; else all of it."""
    state = _TIER.get()
    match = QUESTION.match(hint)
    if state is None or state[0] > 0 or match is None:
        return hint
    state[1] = True
    return _("{question} Answer again: a second wrong answer shows why.").format(
        question=match.group(1)
    )


def checker(check: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
    """Decorate an exercise checker: an answer of the wrong kind, or an exception from the
    learner's code, becomes a ❌ with a message instead of a raised error."""

    @functools.wraps(check)
    def checked(*args, **kwargs) -> CheckResult:
        started = time.perf_counter()
        outermost = not _depth[0]
        state = [WRONG_SO_FAR.get(id(checked), 0), False]  # wrong so far, hint shortened
        token = _TIER.set(state) if outermost else None
        _depth[0] += 1
        try:
            result = check(*args, **kwargs)
        except (AnswerKindError, LearnerCodeError) as error:
            result = wrong(str(error))
        finally:
            _depth[0] -= 1
            if token is not None:
                _TIER.reset(token)
        if outermost:
            if result.passed:
                WRONG_SO_FAR.pop(id(checked), None)
            elif state[1] or state[0]:  # a wrong answer the tiers count
                WRONG_SO_FAR[id(checked)] = state[0] + 1
            result = dataclasses.replace(result, wrong_before=state[0])
        if OBSERVERS and not _depth[0]:
            for observe in OBSERVERS:
                observe(checked, args, kwargs, result, time.perf_counter() - started)
        return result

    return checked


def as_number(answer: object, what: str | None = None) -> float:
    """``answer`` as a float. Any real number is accepted: ``int``, ``float``, ``Fraction``,
    ``Decimal``, numpy scalars and zero-dimensional or one-element arrays, and one-element
    tensors. Anything else raises :class:`AnswerKindError`, which says what is expected;
    ``what`` names the answer there (default: "your answer")."""
    what = _("your answer") if what is None else what
    if isinstance(answer, (torch.Tensor,)) or _is_array_like(answer):
        size = answer.numel() if isinstance(answer, torch.Tensor) else answer.size
        if size != 1:
            raise AnswerKindError(
                _("{what} must be a single number; got {name} of shape {tuple}").format(
                    what=what, name=type(answer).__name__, tuple=tuple(answer.shape)
                )
            )
        return as_number(answer.item(), what)
    if isinstance(answer, bool):
        raise AnswerKindError(
            _("{what} must be a number such as 17.0, not {answer}").format(what=what, answer=answer)
        )
    if isinstance(answer, (numbers.Real, decimal.Decimal)):
        return float(answer)
    if isinstance(answer, str):
        raise AnswerKindError(
            _(
                "{what} must be a number such as 17.0, not the string "
                "{answer!r}: write the number without quotes (a fraction "
                "such as 3 / 4 is fine)"
            ).format(what=what, answer=answer)
        )
    if isinstance(answer, numbers.Complex):
        raise AnswerKindError(
            _("{what} must be a real number, not the complex {answer!r}").format(
                what=what, answer=answer
            )
        )
    kind = "None" if answer is None else type(answer).__name__
    raise AnswerKindError(
        _("{what} must be a number such as 17.0, got {kind}").format(what=what, kind=kind)
    )


def _is_array_like(answer: object) -> bool:
    """A numpy array or scalar (or anything shaped like one), without importing numpy."""
    return all(hasattr(answer, name) for name in ("shape", "size", "item", "dtype"))


def as_function(answer: object, call: str) -> Callable:
    """``answer`` as a function that can be called as ``call``, for example
    ``"train_epoch(model, optimizer, batches)"``; else :class:`AnswerKindError`."""
    _name, parameters = re.fullmatch(r"(\w+)\((.*)\)", call).groups()
    parameters = [p.strip() for p in parameters.split(",") if p.strip()]
    if not callable(answer):
        kind = "None" if answer is None else type(answer).__name__
        raise AnswerKindError(
            _(
                "pass your function itself (its name, without parentheses), "
                "got {kind}: the check calls it as {call}"
            ).format(kind=kind, call=call)
        )
    try:
        signature = inspect.signature(answer)
    except (TypeError, ValueError):  # a builtin without a signature: let the call decide
        return answer
    try:
        signature.bind(*parameters)
    except TypeError:
        required = [
            p.name
            for p in signature.parameters.values()
            if p.default is inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        extra = required[len(parameters) :]
        if extra:
            raise AnswerKindError(
                _(
                    "your function takes {signature}, but it is called "
                    "as {call}: give {extra} a default value in the def "
                    "line, or take exactly ({parameters})"
                ).format(
                    signature=signature,
                    call=call,
                    extra=", ".join(extra),
                    parameters=", ".join(parameters),
                )
            ) from None
        raise AnswerKindError(
            _(
                "your function takes {signature}, but it is called "
                "as {call}: give it {n_parameters} parameters ({parameters})"
            ).format(
                signature=signature,
                call=call,
                n_parameters=len(parameters),
                parameters=", ".join(parameters),
            )
        ) from None
    return answer


# What an exception raised inside a learner's loop usually means, by a fragment of its
# message (first match wins). Checked by tests/core/test_checks.py, one case each.
MEANINGS = {
    "backward through the graph a second time": N_(
        "A second backward() went through a graph "
        "that the first one freed: compute a fresh loss (a new forward pass) before each "
        "backward(), or backward once on the summed loss."
    ),
    "does not require grad and does not have a grad_fn": N_(
        "backward() was called on a tensor "
        "with no graph: was the loss computed under torch.no_grad(), detached, or taken with "
        ".item()?"
    ),
    "No inf checks were recorded for this optimizer": N_(
        "scaler.step(optimizer) found no "
        "gradients: did zero_grad() run between backward() and the step, or no backward() at "
        "all?"
    ),
    "No inf checks were recorded prior to update": N_(
        "scaler.update() ran without a "
        "scaler.step(optimizer) before it: step first, then update, once per optimizer step."
    ),
    "unscale_() is being called after step()": N_(
        "scaler.update() did not run after the last "
        "scaler.step(optimizer): update once per window, after the step, before the next "
        "window's unscale_."
    ),
    "unscale_() has already been called": N_(
        "scaler.unscale_(optimizer) ran twice before one "
        "update(): unscale once per window, after its last backward()."
    ),
    "modified by an inplace operation": N_(
        "A tensor the backward pass needs was changed in "
        "place (often by optimizer.step()) before backward(): step only after the backward "
        "calls that use the old weights."
    ),
    "grad can be implicitly created only for scalar outputs": N_(
        "backward() was called on a "
        "loss with more than one element: reduce it to one number (sum or mean) first."
    ),
    "cannot be multiplied": N_(
        "A shape mismatch inside the model: are inputs and targets the "
        "right way round in `for inputs, targets in ...`?"
    ),
    "not enough values to unpack": N_(
        "Each micro-batch is an (inputs, targets) pair: unpack "
        "it as `for inputs, targets in micro_batches`."
    ),
    "too many values to unpack": N_(
        "Each micro-batch is an (inputs, targets) pair: unpack "
        "it as `for inputs, targets in micro_batches`."
    ),
    "object is not callable": N_(
        "Something that is not a function was called: check for a "
        "name reused for a value (loss = loss(...)) or a missing operator."
    ),
    "Attempted unscale_ but _scale is None": N_(
        "scaler.unscale_ (or scaler.step) ran with no "
        "scaler.scale(loss) before it: call backward() on scaler.scale(loss), not on the loss."
    ),
    "some parameters appear in more than one parameter group": N_(
        "add_param_group() got "
        "parameters the optimizer already holds: add only the new layer's, after it is in the "
        "model."
    ),
    "Tried to step": N_(
        "A scheduler was stepped more times than its total_steps: count its "
        "length in optimizer steps, ceil(n / k) per epoch for n micro-batches, the short last "
        "window included."
    ),
    "Expected positive integer total_steps": N_(
        "total_steps must be an int: use math.ceil(...) or //, not /."
    ),
    "a leaf Variable that requires grad is being used in an in-place operation": N_(
        "A tensor that requires grad was changed in place: cut it from autograd first "
        "(requires_grad_(False) on a leaf, detach_() on a tensor with a grad_fn), or change "
        "it under torch.no_grad()."
    ),
    "you can only change requires_grad flags of leaf variables": N_(
        "requires_grad_(False) works "
        "only on a leaf; a tensor with a grad_fn (made with create_graph=True) needs detach_()."
    ),
    "division by zero": N_("Something was divided by zero: a window or a token count of 0?"),
    "is not defined": N_(
        "A name used in your function is not defined: define it in the "
        "function, or pass it in as a parameter."
    ),
    "NoneType": N_(
        "Something was None where a tensor was expected: is it a `.grad`? It is None after "
        "zero_grad() (set_to_none=True) and before a parameter's first backward(). Or a "
        "result of dist.all_reduce? It returns None: it changes the tensor you pass in place."
    ),
}


# What a None usually is in one kind of exercise, for call_learner's ``meanings``.
NONE_GRAD_IN_A_WINDOW = {
    "NoneType": N_(
        "In this loop a `.grad` is None until the window's first backward() and after each "
        "zero_grad(): weight the loss before its backward() instead of changing `.grad`, "
        "and let optimizer.zero_grad() empty it."
    ),
}
SCALED_BACKWARD = N_(
    "In an AMP window a None is most often `scaler.scale(loss.backward())`: backward() "
    "returns None. Write `scaler.scale(loss).backward()`."
)
NONE_IN_AN_AMP_WINDOW = {
    "outputs must be a Tensor or an iterable of Tensors": SCALED_BACKWARD,  # scale(None)
    "NoneType": SCALED_BACKWARD,
}
NONE_FROM_ALL_REDUCE = {
    "NoneType": N_(
        "In this loop a None is most often `count = all_reduce(count)`: all_reduce returns "
        "None, it sums the tensor you pass in place over the ranks. Call it on its own line "
        "and keep using that tensor."
    ),
}
NONE_IN_THE_CAPSTONE = {
    "outputs must be a Tensor or an iterable of Tensors": SCALED_BACKWARD,
    "NoneType": N_(
        "In this loop a None is most often `tokens = dist.all_reduce(tokens)` (all_reduce "
        "returns None: it sums in place) or `scaler.scale(loss.backward())` (backward() "
        "returns None: write `scaler.scale(loss).backward()`)."
    ),
}


def call_learner(function: Callable, *args, meanings: dict[str, str] | None = None, **kwargs):
    """Call the learner's ``function``; an exception from it becomes
    :class:`LearnerCodeError` with what it usually means: in this exercise, by ``meanings``
    (a fragment of the message -> its meaning, looked at first), else in any (``MEANINGS``)."""
    try:
        return function(*args, **kwargs)
    except (Exception, SystemExit) as error:  # the learner's code: report, never a traceback
        text = str(error)
        known = [*(meanings or {}).items(), *MEANINGS.items()]
        meaning = next((translate(m) for fragment, m in known if fragment in text), "")
        if isinstance(error, SystemExit):
            meaning = _("exit() ends the whole program: return from your function instead.")
        raise LearnerCodeError(error, meaning) from None


def as_names(
    answer: object, example: str, *, letters: bool = False, names: Iterable[str] = ()
) -> set[str]:
    """A set of names from a set, list or tuple of strings, or from one string such as
    "a, b" or "a and b"; with ``letters``, "ab" also means {"a", "b"}. A name that equals one
    of ``names`` but for letter case is given as written there ("layernorm" -> "LayerNorm"),
    so that every exercise takes any letter case. ``example`` shows the expected form in the
    ``TypeError`` for anything else."""
    if isinstance(answer, str):
        tokens = [t for t in re.split(r"[\s,;]+", answer) if t and t.lower() != "and"]
        if letters and len(tokens) == 1 and tokens[0].isalpha():
            tokens = list(tokens[0])
        answer = tokens
    if not isinstance(answer, (set, list, tuple, frozenset)) or not all(
        isinstance(item, str) for item in answer
    ):
        kind = "None" if answer is None else type(answer).__name__
        raise AnswerKindError(
            _("answer must be a set of names such as {example}, got {kind}").format(
                example=example, kind=kind
            )
        )
    spelled = {name.lower(): name for name in names}
    return {spelled.get(item.strip().lower(), item.strip()) for item in answer}


def number_matches(answer: float, expected: float, rel_tol: float = 1e-5) -> bool:
    """Equal within a relative tolerance (and an absolute one of 1e-6 near zero)."""
    return math.isclose(answer, expected, rel_tol=rel_tol, abs_tol=1e-6)


def diagnose_number(
    answer: float,
    expected: float,
    known_mistakes: dict[float, str],
    fallback: str,
    questions: dict[float | None, str] | None = None,
    why: str | None = None,
) -> CheckResult:
    """Compare a numeric answer. A right one gets ``why``, one line on why it is right. A wrong
    one gets the hint of the known mistake it equals, else ``fallback``; with ``questions``
    (by the mistake's value, ``None`` for the fallback), the hint opens with its question, and
    the exercise's first wrong answer gets the question alone (:func:`ask_first`)."""
    if number_matches(answer, expected):
        if why:
            return correct(
                _("{expected:g} is right: {why}").format(expected=expected, why=translate(why))
            )
        return correct(_("{expected:g} is right.").format(expected=expected))
    key, hint = None, fallback
    for value, mistake in known_mistakes.items():
        if number_matches(answer, value):
            key, hint = value, mistake
            break
    question = (questions or {}).get(key)
    shown = translate(hint) if question is None else f"{translate(question)} {translate(hint)}"
    return wrong(_("{answer:g} is not it. {hint}").format(answer=answer, hint=ask_first(shown)))


def number_checker(
    expected: float | Callable[[], float],
    misconceptions: dict[float, str],
    fallback: str,
    *,
    questions: dict[float | None, str],
    why: str,
    doc: str,
    reveal: str | None = None,
) -> Callable[[object], CheckResult]:
    """A checker for a numeric question. ``misconceptions`` maps the number each common
    mistake gives to the computation that shows it wrong, and ``questions`` maps each of those
    numbers (and ``None``, for any other wrong number, whose computation is ``fallback``) to
    the question that names the misconception: a first wrong answer gets the question, a
    second the computation too. ``why`` is one line on why the right number is right.
    ``expected`` may be computed (a function of no arguments). The checker keeps these as
    attributes, so the tests can try each one. ``reveal``, for a prediction that a later cell
    answers, is the text that cell prints (``tests/course/test_predictions_come_first.py``
    checks that nothing prints it before)."""
    if set(questions) != {*misconceptions, None} or not all(
        QUESTION.fullmatch(q.strip()) or q.rstrip().endswith("?") for q in questions.values()
    ):
        raise ValueError(
            _(
                "questions must give each misconception's number, and None for the fallback, "
                "a question ending in '?'"
            )
        )
    if callable(expected):
        expected_value = expected
    else:

        def expected_value() -> float:
            return expected

    @checker
    def check(answer: object) -> CheckResult:
        if is_unanswered(answer):
            return wrong(NOT_ANSWERED)
        return diagnose_number(
            as_number(answer, "answer"),
            expected_value(),
            misconceptions,
            fallback,
            questions,
            why,
        )

    check.__doc__ = doc
    check.expected = expected_value
    check.misconceptions = misconceptions
    check.questions = questions
    check.why = why
    check.reveal = reveal
    return check
