"""Checkers for notebook 09, the capstone: exercise 09.1 (one DDP training function that does
it all, run on 2 real processes) and the optional exercise 09.2 (the gradient all-reduces of
the run)."""

from __future__ import annotations

import math
import re

import torch

from helpers import learner_code
from helpers.at_scale.checkers_07 import OPTIMIZER_STEP, finding_hint, scaler_error_hint
from helpers.capstone import capstone_run, stages
from helpers.checks import (
    NOT_ANSWERED,
    AnswerKindError,
    CheckResult,
    as_function,
    ask_first,
    checker,
    correct,
    is_unanswered,
    number_checker,
    wrong,
)
from helpers.translation import N_, _, translate

# Exercise 09.2: DDP's all-reduces of the gradients on one rank over the whole capstone run,
# with the model's gradients in one bucket (tests/test_capstone.py counts them in a run).
BUCKETS = 1
WINDOWS = len(capstone_run.window_slices(capstone_run.MICRO_BATCHES))  # 3, 3, 3 and 1 micro-batches
check_gradient_allreduces = number_checker(
    WINDOWS * BUCKETS,
    {
        10: N_(
            "10 is one all-reduce per micro-batch: no_sync() skips it on all but each "
            "window's last micro-batch."
        ),
        3: N_(
            "3 leaves out a window. The short last window (1 micro-batch) is a window too. And "
            "window 2, whose step is skipped, still all-reduces: the all-reduce runs during its "
            "last backward, before scaler.step finds the overflow."
        ),
        8: N_(
            "8 counts both ranks, or adds the 4 all-reduces of the token counts: the question "
            "asks for DDP's all-reduces of the gradients, on one rank."
        ),
        20: N_(
            "20 is one all-reduce per micro-batch on both ranks: no_sync() skips it on all "
            "but each window's last micro-batch, and the question asks about one rank."
        ),
        6: N_(
            "6 counts the micro-batches inside no_sync(): those are the ones that do not "
            "all-reduce. Each window's last backward does."
        ),
        1: N_("1 is the number of buckets: DDP all-reduces it once per window."),
        0: N_(
            "the backward of each window's last micro-batch runs outside no_sync(): it "
            "all-reduces the gradients, once per bucket."
        ),
    },
    N_(
        "One all-reduce per bucket per window: 4 windows (3, 3, 3 and 1 micro-batches) x 1 "
        "bucket. Window 2's overflow does not skip it: the all-reduce runs during backward, and "
        "scaler.step skips only the step."
    ),
    questions={
        10: N_("Does no_sync() skip the all-reduce on a window's first micro-batches?"),
        3: N_(
            "Is the short last window a window too, and does a skipped step skip its all-reduce?"
        ),
        8: N_("Does the question count one rank, and the gradients' all-reduces only?"),
        20: N_("Does the question count one rank, and does no_sync() skip any all-reduce?"),
        6: N_("Which micro-batches all-reduce: those inside no_sync(), or each window's last?"),
        1: N_("How many windows does one rank run?"),
        0: N_("Does the backward of a window's last micro-batch run inside no_sync()?"),
        None: N_("How many windows does one rank run, and how many all-reduces does each make?"),
    },
    why=N_(
        "one all-reduce per window, at its last backward, outside no_sync(): 4 windows on "
        "each rank."
    ),
    doc="Exercise 09.2 (optional): 10 micro-batches in windows of 3 (3, 3, 3, 1), one bucket: "
    "a correct train_ddp all-reduces the gradients 4 times on each rank, the overflowing "
    "window included.",
)


CAPSTONE_CALL = "train_ddp(model, optimizer, scheduler, scaler, micro_batches, accumulation_steps)"
CAPSTONE_RTOL, CAPSTONE_ATOL = 1e-5, 1e-6  # measured: correct variants differ by < 1e-7
CAPSTONE_FINDING_HINTS = {
    "leftover-gradients": N_(
        "the short last window was never stepped: after the full windows, "
        "the remaining micro-batches (1 here) make a window of their own, stepped like the others."
    ),
    "window-length": N_(
        "the windows do not hold accumulation_steps micro-batches each (only "
        "the last may be short): take micro_batches[start:start + accumulation_steps] for start "
        "in range(0, len(micro_batches), accumulation_steps)."
    ),
}


def _capstone_error_hint(error: capstone_run.CapstoneRunError, timeout: float) -> str:
    if error.kind == "timeout":
        return _(
            "the 2 processes did not finish within {timeout:g} "
            "s and were stopped: one rank waits in a collective "
            "that the other never reaches. Every rank must call "
            "dist.all_reduce the same number of times, and run "
            "the DDP model's forward and backward on each of its "
            "micro-batches."
        ).format(timeout=timeout)
    if error.kind == "failed":
        return _("the 2-process run failed: {message}").format(message=error.message)
    if any(word in error.message for word in ("gloo", "Connection reset", "Connection closed")):
        return _(
            "the 2 processes' collective calls did not match (gloo "
            "reported: {value}): every rank must call dist.all_reduce "
            "the same number of times, on tensors of the same shape, "
            "and run the DDP model's forward and backward on each "
            "of its micro-batches."
        ).format(value=_short(error.message))
    hint = scaler_error_hint(error.message, error.calls)
    if hint != error.message:
        return hint
    if "is not defined" in error.message:
        return _(
            "{message} The check runs your function's source alone, "
            "in 2 fresh processes: only {PREAMBLE_NAMES} are there, "
            "nothing from other cells."
        ).format(message=error.message, PREAMBLE_NAMES=translate(capstone_run.PREAMBLE_NAMES))
    return _("{message} (in one of the 2 processes)").format(message=error.message)


def _short(message: str) -> str:
    """A gloo error without its source paths and addresses, its first sentence."""
    text = re.sub(r"\[[^\]]*\]:?\d*:?\s*", "", message.split("raised ", 1)[-1])
    return text.split(". ")[0][:160]


@checker
def check_capstone(train_ddp: object, stage: int = 4, timeout: float = 60) -> CheckResult:
    """Exercise 09.1 (the capstone), by ``stage``: 1, 2 and 3 run in this process
    (:mod:`helpers.capstone.stages`: one process without AMP; the tail and tokens; AMP), and
    4, the default, on two DDP ranks. Stage 4: ``train_ddp(model, optimizer, scheduler, scaler,
    micro_batches, accumulation_steps)`` trains on 2 DDP processes (gloo): windows of
    ``accumulation_steps`` uneven micro-batches of padded tokens, the last window short; the
    window's summed token loss divided by its token count over both ranks; a GradScaler;
    clipping of the unscaled gradient; one scheduler step per window. Its final weights must
    equal one process trained on both ranks' data (``helpers.capstone.capstone_run.reference_run``),
    and the loop auditor must find nothing. ``timeout`` bounds the run (a hang is a ❌)."""
    if stage != 4:
        try:
            stages.check_stage(stage)
        except ValueError as error:
            return wrong(str(error))
        return _check_stage(train_ddp, stage)
    function = _capstone_function(train_ddp)
    if isinstance(function, CheckResult):
        return function
    try:
        results = capstone_run.run_capstone(function, timeout=timeout)
    except capstone_run.CapstoneRunError as error:
        return wrong(_capstone_error_hint(error, timeout))
    return _judge_capstone(results)


def judge_capstones(answers: list, timeout: float = 60) -> list[CheckResult]:
    """:func:`check_capstone` on each of ``answers``, the same verdicts, with the answers that
    need a run judged together (``helpers.capstone.capstone_run.run_capstones``: one launch of 2
    processes for all of them, and one more after each answer that runs over ``timeout``
    seconds). For the course's tests, which judge many answers; a learner's answer goes
    through :func:`check_capstone`."""
    verdicts: list = []
    functions, runs = [], []  # the answers that need a run, and their places in verdicts
    for answer in answers:
        try:
            verdict = _capstone_function(answer)
        except AnswerKindError as error:  # what @checker does for check_capstone
            verdict = wrong(str(error))
        if not isinstance(verdict, CheckResult):  # a function to run
            runs.append(len(verdicts))
            functions.append(verdict)
        verdicts.append(verdict)
    for place, outcome in zip(runs, capstone_run.run_capstones(functions, timeout), strict=True):
        if isinstance(outcome, capstone_run.CapstoneRunError):
            verdicts[place] = wrong(_capstone_error_hint(outcome, timeout))
        else:
            verdicts[place] = _judge_capstone(outcome)
    return verdicts


def _capstone_function(train_ddp: object):
    """``train_ddp`` as a function whose source the ranks can run, or the ❌ that says why
    it is not one (raises ``AnswerKindError`` for an answer of the wrong kind)."""
    if is_unanswered(train_ddp):
        return wrong(NOT_ANSWERED)
    function = as_function(train_ddp, CAPSTONE_CALL)
    try:
        source = learner_code.function_source(function)
    except ValueError as error:
        return wrong(str(error))
    if learner_code.has_placeholder(source):
        return wrong(_("your function still has `...` in it: replace each one with code."))
    return function


def _judge_capstone(results: dict) -> CheckResult:
    """The verdict on rank 0's results of :func:`helpers.capstone.capstone_run.run_capstone`."""
    got = torch.tensor(results["weights"])
    calls, windows = results["calls"], len(capstone_run.window_slices(capstone_run.MICRO_BATCHES))
    if results["across_ranks"] > 0 and results["ddp_forwards"] and not results["allreduces"]:
        return wrong(
            _(
                "does any backward all-reduce? The 2 processes ended with different weights "
                "(largest difference {difference:.3g}) and no gradient was all-reduced: the last "
                "micro-batch of each window must run outside no_sync() (its forward too), so "
                "that its backward averages the window's gradients over the processes."
            ).format(difference=results["across_ranks"])
        )
    if results["across_ranks"] > 0:
        return wrong(
            _(
                "the 2 processes ended with different weights (largest "
                "difference {results:.3g}): run the DDP model itself "
                "(model(inputs), not model.module), so that its backward "
                "all-reduces the gradients."
            ).format(results=results["across_ranks"])
        )
    hint = finding_hint(results["findings"], calls, windows, CAPSTONE_FINDING_HINTS)
    if hint is not None:
        return wrong(hint)
    if "optimizer.step" in calls or "step" not in calls or not torch.isfinite(got).all():
        return wrong(OPTIMIZER_STEP)
    steps = calls.count("step")
    if steps == calls.count("update") == windows - 1:
        return wrong(CAPSTONE_FINDING_HINTS["leftover-gradients"])
    if calls.count("update") != windows:
        return wrong(
            _(
                "scaler.update() ran {count} times for {windows} windows: "
                "once per window, after scaler.step(optimizer)."
            ).format(count=calls.count("update"), windows=windows)
        )
    reference = capstone_run.reference_run()
    if results["lrs"] != reference["lrs"]:
        never = len(set(results["lrs"])) == 1
        return wrong(
            _("the steps used the learning rates {results}, the course's {reference}: ").format(
                results=results["lrs"], reference=reference["lrs"]
            )
            + (
                _("scheduler.step() never ran. ")
                if never
                else _("the scheduler stepped more or less often than once per window. ")
            )
            + _(
                "Call scheduler.step() once per window, after scaler.step(optimizer), the "
                "skipped window included."
            )
        )
    if results["scale"] != reference["scales"][-1]:
        return wrong(
            _(
                "the scale ended at {results:g}, the course's at {reference:g}: "
                "scale every micro-batch's loss with scaler.scale(loss) "
                "and call scaler.update() once per window."
            ).format(results=results["scale"], reference=reference["scales"][-1])
        )
    if results["allreduces"] != windows * results["buckets"]:
        return wrong(
            _(
                "DDP all-reduced the gradients {results} times in {windows} "
                "windows, instead of once per bucket ({results2}) on "
                "each window's last backward: run the forward and backward "
                "of the window's other micro-batches inside `with model.no_sync():` "
                "(a test of the exercise: it saves communication, the "
                "weights would be the same)."
            ).format(results=results["allreduces"], windows=windows, results2=results["buckets"])
        )
    if not torch.allclose(got, reference["weights"], rtol=CAPSTONE_RTOL, atol=CAPSTONE_ATOL):
        norms = {
            n for n in results["max_norms"] if n != capstone_run.MAX_NORM and not math.isinf(n)
        }
        if norms:
            return wrong(
                _(
                    "the gradient was clipped at max_norm={min}: clip the "
                    "unscaled gradient to max_norm={MAX_NORM:g}, once per "
                    "window, after scaler.unscale_(optimizer)."
                ).format(min=min(norms), MAX_NORM=capstone_run.MAX_NORM)
            )
        start = capstone_run.flat_weights(capstone_run.make_model())
        should = (reference["weights"] - start).norm()
        for variant, hint in capstone_run.VARIANTS.items():
            if not hint:
                continue
            made = capstone_run.reference_run(variant)["weights"]
            # within 1% of the distance moved, and much nearer this variant than the right
            # weights (the rounding variant lies within 1% of them)
            near = min(0.01 * should, 0.25 * (made - reference["weights"]).norm())
            if (got - made).norm() < near:
                return wrong(translate(hint).format(max_norm=capstone_run.MAX_NORM))
        return wrong(
            _(
                "the weights are {item:.1%} (of the distance they moved) "
                "away from one process on the whole batch: divide each "
                "window's summed token loss by its token count over "
                "both ranks (dist.all_reduce) and multiply by the world "
                "size; scale, unscale_, clip to {MAX_NORM:g}, step "
                "and update once per window."
            ).format(
                item=((got - reference["weights"]).norm() / should).item(),
                MAX_NORM=capstone_run.MAX_NORM,
            )
        )
    return correct(
        _(
            "on 2 processes, the same weights as one process on the whole batch: token counts "
            "all-reduced, one all-reduce of the gradients per window, the overflowing window "
            "skipped, the short last window stepped, clipped and scheduled once per window."
        )
    )


STAGE_DONE = {
    1: N_(
        "one step per window, each on the window's mean token loss, clipped and scheduled "
        "once per window. Next, the short last window and padded tokens."
    ),
    2: N_(
        "each window, the short last one included, stepped on the mean over its non-padding "
        "tokens. Next, AMP."
    ),
    3: N_(
        "under autocast with a GradScaler the same weights as the reference: the overflowing "
        "window skipped, the scale halved, the scheduler stepped once per window. Next, two "
        "DDP ranks."
    ),
}
STAGE_LOSS = {
    1: N_(
        "Is each micro-batch's loss its share of the window's mean? The weights are {away:.1%} "
        "(of the distance they moved) away from the reference: backward each micro-batch's "
        "summed token loss divided by the window's token count."
    ),
    2: N_(
        "Does every micro-batch's loss divide by the same count, the window's non-padding "
        "tokens? The weights are {away:.1%} (of the distance they moved) away from the "
        "reference: sum each micro-batch's token losses (ignore_index=-100) and divide by the "
        "window's count of tokens whose target is not -100."
    ),
    3: N_(
        "Is the loss computed and scaled as in stage 2? The weights are {away:.1%} (of the "
        "distance they moved) away from the reference: under autocast, backward "
        "scaler.scale(loss); then unscale_, clip, scaler.step and update once per window."
    ),
}

# One process has no ranks to average, nor a scaler before stage 3: the hints of
# capstone_run.VARIANTS without them.
STAGE_VARIANT_HINTS = {
    "no clip": N_(
        "Is the gradient clipped at max_norm={max_norm:g}? It was clipped at the wrong norm, or "
        "not at all: clip_grad_norm_(model.parameters(), {max_norm:g}) once per window, before "
        "the step (and after scaler.unscale_(optimizer) once the scaler is in)."
    ),
    "micro-batch mean / window": N_(
        "Do the window's micro-batches hold the same number of tokens? Each micro-batch's "
        "mean token loss was divided by the number of micro-batches in "
        "the window: a micro-batch with few tokens weighs as much as one with many. Sum the "
        "token losses and divide by the window's count of non-padding tokens."
    ),
}


def _ask(hint: str) -> CheckResult:
    """A wrong stage answer: the hint (translated), its question alone the first time."""
    return wrong(ask_first(translate(hint)))


def _check_stage(train_ddp: object, stage: int) -> CheckResult:
    """Stages 1 to 3 of the capstone, in this process: the verdict on ``train_ddp`` against
    :func:`helpers.capstone.stages.reference`. A first wrong answer gets its hint's question
    alone (:func:`ask_first`); stage 4, a 10-second run of two ranks, explains at once."""
    function = _capstone_function(train_ddp)
    if isinstance(function, CheckResult):
        return function
    got = stages.run_stage(function, stage)
    want = stages.reference(stage)
    windows = want["windows"]
    if stage == 3 and "scale" not in got["calls"]:
        return _ask(
            _(
                "Does every micro-batch's loss go through the scaler? backward() ran on "
                "losses that scaler.scale never saw: backward scaler.scale(loss), then, once "
                "per window, scaler.unscale_(optimizer), the clip, scaler.step(optimizer) and "
                "scaler.update()."
            )
        )
    hint = finding_hint(
        got["findings"], got["calls"], windows, CAPSTONE_FINDING_HINTS, scaler=stage >= 3
    )
    if hint is not None:
        return _ask(hint)
    weights = got["weights"]
    if stage == 3 and (
        not torch.isfinite(weights).all() or (got["calls"] and "optimizer.step" in got["calls"])
    ):
        return _ask(OPTIMIZER_STEP)
    steps = len(got["lrs"])
    expected_steps = len(want["lrs"])
    if steps != expected_steps and stage < 3:
        return _ask(
            _(
                "Does the loop step once per window, the short last one included? It stepped "
                "{steps} times; {n} micro-batches in windows of {k} make {windows}."
            ).format(
                steps=steps, n=len(stages.stage_data(stage)), k=capstone_run.K, windows=windows
            )
        )
    if got["lrs"] != want["lrs"]:
        return _ask(
            _(
                "Does the scheduler step once per window? The steps used the learning rates "
                "{got}, the reference's {want}: call scheduler.step() once per window, after "
                "the optimizer's step."
            ).format(got=got["lrs"], want=want["lrs"])
        )
    if stage == 3 and got["scale"] != want["scale"]:
        return _ask(
            _(
                "Does every micro-batch's loss go through scaler.scale? The scale ended at "
                "{got:g}, the reference's at {want:g}: scale each loss, and call "
                "scaler.update() once per window."
            ).format(got=got["scale"], want=want["scale"])
        )
    if torch.allclose(weights, want["weights"], rtol=CAPSTONE_RTOL, atol=CAPSTONE_ATOL):
        return correct(translate(STAGE_DONE[stage]))
    norms = {n for n in got["max_norms"] if n != capstone_run.MAX_NORM and not math.isinf(n)}
    if norms:
        return _ask(
            _(
                "Is the gradient clipped at max_norm={MAX_NORM:g}? It was clipped at "
                "{min}: clip once per window, before the step."
            ).format(min=min(norms), MAX_NORM=capstone_run.MAX_NORM)
        )
    start = capstone_run.flat_weights(capstone_run.make_model())
    moved = (want["weights"] - start).norm()
    for variant in stages.STAGE_VARIANTS[stage][1:]:
        made = stages.reference(stage, variant)["weights"]
        near = min(0.01 * moved, 0.25 * (made - want["weights"]).norm())
        if (weights - made).norm() < near:
            hint = STAGE_VARIANT_HINTS.get(variant, capstone_run.VARIANTS[variant])
            return _ask(translate(hint).format(max_norm=capstone_run.MAX_NORM))
    away = ((weights - want["weights"]).norm() / moved).item()
    return _ask(translate(STAGE_LOSS[stage]).format(away=away))
