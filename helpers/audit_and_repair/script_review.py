"""Notebook 06's code review: a training script written for the course in the style of a
public fine-tuning script (SGD with momentum, a warm-up then linear decay, accumulation,
clipping with a logged norm, validation, a best checkpoint), with three bugs that nobody
announces; each breaks a rule that notebooks 03 and 05 teach on their main paths.
:data:`SCRIPT_BUGS` names the lines that hold them, by their text; the learner gives their line
numbers to :func:`check_script_review`. tests/audit_and_repair/test_script_review.py checks
the key by running the script under the loop auditor, and with its bugs fixed."""

from __future__ import annotations

import copy
import inspect

import torch
from torch import nn
from torch.nn import functional as F

from helpers.checks import (
    NOT_ANSWERED,
    AnswerKindError,
    CheckResult,
    ask_first,
    checker,
    correct,
    is_unanswered,
    wrong,
)
from helpers.translation import N_, _, translate


def train(model, loader, val_loader, epochs=2, lr=0.01, accumulation_steps=4, max_norm=5.0):
    """Fine-tune `model` on `loader` (batches of inputs and targets) with SGD, a linear
    warm-up then decay, gradient accumulation and clipping; evaluate on `val_loader` after each
    epoch and keep the best weights. Returns each epoch's losses and largest gradient norm."""
    if not len(loader):
        raise ValueError("train() needs at least one batch")
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
    steps = epochs * -(-len(loader) // accumulation_steps)  # optimizer steps, tails included
    warmup = max(1, steps // 10)

    def warmup_then_decay(step):
        return min(1.0, (step + 1) / warmup) * max(0.0, 1.0 - step / steps)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_decay)
    history, best, best_state = [], float("inf"), None
    for epoch in range(epochs):
        model.train()
        running, seen, norms = 0.0, 0, []
        for step, (inputs, targets) in enumerate(loader):
            outputs = model(inputs)
            loss = F.mse_loss(outputs, targets)
            loss.backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            running += loss.item() * len(targets)
            seen += len(targets)
            if (step + 1) % accumulation_steps == 0 or step + 1 == len(loader):
                norms.append(norm.item())  # the norm of the window's gradient, for the log
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            scheduler.step()
        model.eval()
        with torch.no_grad():
            val = sum(F.mse_loss(model(x), y, reduction="sum").item() for x, y in val_loader)
        val /= sum(len(y) for _, y in val_loader)
        history.append(
            {
                "epoch": epoch,
                "train": running / seen,
                "val": val,
                "norm": max(norms),
                "lr": scheduler.get_last_lr()[0],
            }
        )
        if val < best:  # keep the best epoch's weights, as a checkpoint would
            best, best_state = val, copy.deepcopy(model.state_dict())
    model.load_state_dict(best_state)
    return history


# Each bug: the text of the line or lines that hold it (either names it), and the loop
# auditor's rule for it ("" where it has none: it cannot see how a loss
# was scaled).
SCRIPT_BUGS = {
    "undivided": (("loss = F.mse_loss(outputs, targets)", "loss.backward()"), ""),
    "clip per micro-batch": (
        ("norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)",),
        "clip-per-micro-batch",
    ),
    "scheduler per micro-batch": (("scheduler.step()",), "scheduler-per-micro-batch"),
}


def numbered_lines(function=train) -> dict[int, str]:
    """The function's source lines by number, from 1 for its ``def`` line."""
    return dict(enumerate(inspect.getsource(function).splitlines(), 1))


def bug_lines() -> dict[str, set[int]]:
    """Each bug of :data:`SCRIPT_BUGS` and the numbers of its lines in :func:`train`."""
    found: dict[str, set[int]] = {}
    for bug, (texts, _rule) in SCRIPT_BUGS.items():
        found[bug] = {n for n, line in numbered_lines().items() if line.strip() in texts}
        if len(found[bug]) != len(texts):
            raise RuntimeError(f"each line of bug {bug!r} must appear exactly once in train()")
    return found


# What a learner who marks a correct line may think is wrong with it: asked first, then why the
# line is fine. Lines not named here get a general question.
FINE_LINES = {
    "optimizer.zero_grad(set_to_none=True)": N_(
        "Is zeroing after the step too late? The step has used .grad; zeroing here empties it "
        "for the next window, which is where it must be empty."
    ),
    "if (step + 1) % accumulation_steps == 0 or step + 1 == len(loader):": N_(
        "Does this test drop the short last window? Its `or` steps on the tail too: the "
        "window ends at every k-th micro-batch and at the last one."
    ),
    "norms.append(norm.item())  # the norm of the window's gradient, for the log": N_(
        "Does logging the norm change the gradient? .item() only reads a number: the bug, "
        "if any, is where that norm came from."
    ),
    "running += loss.item() * len(targets)": N_(
        "Does this sum keep graphs alive? .item() is a Python float: no graph is kept."
    ),
    'val = sum(F.mse_loss(model(x), y, reduction="sum").item() for x, y in val_loader)': N_(
        "Does the validation pass touch .grad? It runs under torch.no_grad(): no graph, no "
        "gradient."
    ),
    "scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_decay)": N_(
        "Is the schedule's length wrong? `steps` counts optimizer steps, tails included: "
        "right, if the scheduler steps once per optimizer step."
    ),
    "steps = epochs * -(-len(loader) // accumulation_steps)  # optimizer steps, tails included": N_(
        "Is this count off? -(-n // k) is ceil(n / k): one optimizer step per window, the short "
        "last one included."
    ),
}

# Each bug's hint when it is still unlisted: a question, then what the line does.
BUG_HINTS = {
    "undivided": N_(
        "What is each micro-batch's loss divided by before its backward()? By nothing: a "
        "full window's gradient is 4 times its mean (the tail's 2 times), so the steps have "
        "the wrong size and the tail weighs half as much as a full window."
    ),
    "clip per micro-batch": N_(
        "When does clip_grad_norm_ run? After every micro-batch's backward(): it rescales each "
        "partial sum on the way, not the window's gradient. Clip once, right before the step."
    ),
    "scheduler per micro-batch": N_(
        "How often does scheduler.step() run? Once per micro-batch: a schedule counted in "
        "optimizer steps runs accumulation_steps times too fast and ends long before the "
        "training does."
    ),
}


@checker
def check_script_review(answer: object) -> CheckResult:
    """Exercise: the line numbers of the three bugs of :func:`train`, as a set such as
    ``{3, 12, 30}``; either line of a misordered pair names its bug."""
    if is_unanswered(answer):
        return wrong(NOT_ANSWERED)
    lines = numbered_lines()
    if isinstance(answer, int) and not isinstance(answer, bool):
        answer = {answer}
    if not isinstance(answer, (set, frozenset, list, tuple)) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in answer
    ):
        raise AnswerKindError(
            _(
                "answer with the numbers of the buggy lines, as a set such as {{3, 12, 30}}; "
                "got {kind}"
            ).format(kind="None" if answer is None else type(answer).__name__)
        )
    outside = sorted(n for n in answer if n not in lines)
    if outside:
        return wrong(
            _("there is no line {n}: train() has lines 1 to {last}").format(
                n=outside[0], last=len(lines)
            )
        )
    found = bug_lines()
    for n in sorted(answer):
        if not any(n in numbers for numbers in found.values()):
            text = lines[n].strip()
            hint = FINE_LINES.get(text)
            if hint is None:
                hint = N_(
                    "What would it do wrong to .grad, the weights or the learning rate? "
                    "Look for a call in the wrong place, or a loss of the wrong size."
                )
            return wrong(
                _("line {n} (`{text}`) is fine. {hint}").format(
                    n=n, text=text or " ", hint=ask_first(translate(hint))
                )
            )
    missing = [bug for bug, numbers in found.items() if not numbers & set(answer)]
    if missing:
        return wrong(
            _("you found {found} of the {total} bugs. {hint}").format(
                found=len(found) - len(missing),
                total=len(found),
                hint=ask_first(translate(BUG_HINTS[missing[0]])),
            )
        )
    return correct(
        _(
            "all three: the losses are not divided by their window's size, the clip and the "
            "scheduler run once per micro-batch. Run the next cell to see which of them the "
            "loop auditor reports."
        )
    )
