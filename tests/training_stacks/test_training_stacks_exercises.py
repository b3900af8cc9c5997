"""Notebook 08's checkers: correct answers written several ways pass, each known mistake is
named."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from answers import second_try
from torch import nn
from torch.nn import functional as F

from helpers.training_stacks import (
    backward_step_exercise,
    checkers_08,
    scale_after_exercise,
    window_records,
)
from helpers.versions import why_it_cannot_run

# Notebook 08's helpers: skipped on a torch too old for notebook 08 (helpers/versions.py).
NOT_ON_THIS_TORCH = why_it_cannot_run("08_training_stacks")
pytestmark = pytest.mark.skipif(NOT_ON_THIS_TORCH is not None, reason=str(NOT_ON_THIS_TORCH))

PAD = -100


def _sums(model, micro_batches, no_sync=True):
    count = torch.zeros((), dtype=torch.int64)
    batches = list(micro_batches)
    for j, (tokens, targets) in enumerate(batches):
        last = j == len(batches) - 1
        with model.no_sync() if no_sync and not last else torch.enable_grad():
            F.cross_entropy(model(tokens), targets, ignore_index=PAD, reduction="sum").backward()
        count += (targets != PAD).sum()
    return count


def foreach_version(model, optimizer, micro_batches, world_size, all_reduce):
    optimizer.zero_grad()
    count = _sums(model, micro_batches)
    all_reduce(count)
    torch._foreach_mul_([p.grad for p in model.parameters()], world_size / count)
    nn.utils.clip_grad_norm_(model.parameters(), 0.4)
    optimizer.step()


def dividing_version(model, optimizer, micro_batches, world_size, all_reduce):
    for p in model.parameters():
        p.grad = None
    count = _sums(model, micro_batches, no_sync=False)
    all_reduce(count)
    for p in model.parameters():
        p.grad /= count / world_size
    nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.4)
    optimizer.step()


def reassigning_version(model, optimizer, micro_batches, world_size, all_reduce):
    optimizer.zero_grad(set_to_none=False)
    count = _sums(model, micro_batches)
    all_reduce(count)
    factor = world_size / count.item()
    for p in model.parameters():
        p.grad = p.grad * factor
    torch.nn.utils.clip_grad_norm_(list(model.parameters()), 0.4)
    optimizer.step()


@pytest.mark.parametrize("answer", [foreach_version, dividing_version, reassigning_version])
def test_correct_windows_pass(answer):
    assert checkers_08.check_scale_after_window(answer).passed


def _mistake(kind):
    def window(model, optimizer, micro_batches, world_size, all_reduce):
        if kind != "no zero_grad":
            optimizer.zero_grad()
        count = torch.zeros((), dtype=torch.int64)
        batches = list(micro_batches)
        if kind == "count first":
            count = sum((t != PAD).sum() for _, t in batches)
            all_reduce(count)
        for tokens, targets in batches:
            reduction = "mean" if kind == "mean loss" else "sum"
            loss = F.cross_entropy(model(tokens), targets, ignore_index=PAD, reduction=reduction)
            if kind == "count first":
                loss = loss * world_size / count
            loss.backward()
            if kind != "count first":
                count += (targets != PAD).sum()
        if kind == "no all_reduce":
            pass
        elif kind != "count first":
            all_reduce(count if kind != "local count" else count.clone())
        factor = 1 / count if kind == "no world factor" else world_size / count
        if kind == "clip before scaling":
            nn.utils.clip_grad_norm_(model.parameters(), 0.4)
        if kind != "count first":
            for p in model.parameters():
                p.grad *= factor
        if kind not in ("clip before scaling", "no clip"):
            nn.utils.clip_grad_norm_(model.parameters(), 0.4)
        optimizer.step()
        if kind == "two steps":
            optimizer.step()

    return window


@pytest.mark.parametrize(
    ("kind", "hint"),
    [
        ("no world factor", "averaged them over the ranks"),
        ("local count", "own token count"),
        ("mean loss", "backward the sum"),
        ("clip before scaling", "clipped before they were scaled"),
        ("no clip", "not clipped"),
        ("no zero_grad", "zero the gradients"),
        ("count first", "before the window's last backward"),
        ("no all_reduce", "all_reduce was never called"),
        ("two steps", "step once"),
    ],
)
def test_each_window_mistake_is_named(kind, hint):
    result = checkers_08.check_scale_after_window(_mistake(kind))
    assert not result.passed and hint in result.message, result.message


def test_wrong_kinds_and_placeholders():
    assert "Not answered yet" in checkers_08.check_scale_after_window(...).message
    assert "5 parameters" in checkers_08.check_scale_after_window(lambda model: None).message

    def raises(model, optimizer, micro_batches, world_size, all_reduce):
        all_reduce(3)

    assert "sums a tensor in place" in checkers_08.check_scale_after_window(raises).message

    def real_collective(model, optimizer, micro_batches, world_size, all_reduce):
        torch.distributed.all_reduce(torch.zeros(1))

    assert (
        "call the all_reduce it passes in"
        in checkers_08.check_scale_after_window(real_collective).message
    )


def fixed(model, micro_batches, k):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for start in range(0, len(micro_batches), k):
        window = micro_batches[start : start + k]
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()


def fixed_by_sum(model, micro_batches, k):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    windows = [micro_batches[i : i + k] for i in range(0, len(micro_batches), k)]
    for window in windows:
        for p in model.parameters():
            p.grad = None
        for x, y in window:
            F.mse_loss(model(x), y, reduction="sum").div(len(y) * len(window)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()


@pytest.mark.parametrize("answer", [fixed, fixed_by_sum])
def test_repaired_windows_pass(answer):
    assert checkers_08.check_repaired_window(answer).passed


def _broken(model, micro_batches, k):
    optimizers = {p: torch.optim.SGD([p], lr=0.5) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()
        optimizers[p].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)
    for start in range(0, len(micro_batches), k):
        for inputs, targets in micro_batches[start : start + k]:
            F.mse_loss(model(inputs), targets).backward()


def _by_k(model, micro_batches, k):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for start in range(0, len(micro_batches), k):
        optimizer.zero_grad()
        for inputs, targets in micro_batches[start : start + k]:
            (F.mse_loss(model(inputs), targets) / k).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()


def _per_micro_batch(model, micro_batches, k):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for inputs, targets in micro_batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        optimizer.step()


def _no_clip(model, micro_batches, k):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for start in range(0, len(micro_batches), k):
        window = micro_batches[start : start + k]
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        optimizer.step()


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (_broken, "still steps inside backward"),
        (_by_k, "divided by k = 3"),
        (_per_micro_batch, "7 optimizer steps"),
        (_no_clip, "not clipped"),
    ],
)
def test_each_repair_mistake_is_named(answer, hint):
    result = checkers_08.check_repaired_window(answer)
    assert not result.passed and hint in result.message, result.message


@pytest.mark.parametrize("answer", [4 / 3, 80 / 60, Fraction(4, 3), torch.tensor(4 / 3)])
def test_the_naive_token_weight_right_answers(answer):
    assert checkers_08.naive_token_weight() == pytest.approx(4 / 3)  # the run gives 80/60
    result = checkers_08.check_naive_token_weight(answer)
    assert result.passed, result.message


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (1, "the per-rank mean is exact"),
        (3 / 4, "the inverse"),
        (1 / 60, "the token's weight itself"),
        (80 / 30, "forgets that DDP averages"),
        (1 / 30, "within rank 0's own mean"),
        (0.8, "a token of rank 1"),
        (50 / 30, "compares a token of rank 0 with a token of rank 1"),
        (30 / 50, "compares the two ranks' counts"),
        (1.33, "write the fraction"),
    ],
)
def test_the_naive_token_weight_names_each_mistake(answer, hint):
    result = second_try(checkers_08.check_naive_token_weight, answer)
    assert not result.passed and hint in result.message, result.message


def test_08_1_never_raises_at_a_learner():
    assert "Not answered yet" in checkers_08.check_naive_token_weight(...).message
    for answer in ("four thirds", None, [1], float("nan")):
        assert not checkers_08.check_naive_token_weight(answer).passed


@pytest.mark.parametrize(
    "answer", [2 / 80, 1 / 40, 0.025, Fraction(2, 80), torch.tensor(0.025), 2 / (45 + 35)]
)
def test_a_rank_with_fewer_micro_batches_right_answers(answer):
    result = checkers_08.check_fewer_micro_batches(answer)
    assert result.passed, result.message


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (1 / 80, "DDP averages"),
        (2 / 35, "rank 1's own count"),
        (1 / 35, "rank 1's own token mean"),
        (2 / 45, "rank 0's count"),
        (3 / 80, "more weight for running fewer micro-batches"),
        (2 / 120, "less weight for running fewer micro-batches"),
        (1 / 2, "rank 1's 2 micro-batches"),
        (1 / 5, "the window's 5 micro-batches"),
        (2 / 5, "the window's 5 micro-batches"),
        (1 / 160, "world size a second time"),
        (40, "inverse"),
        (80, "multiplies by the count"),
        (0.3, "does not enter"),
    ],
)
def test_a_rank_with_fewer_micro_batches_names_each_mistake(answer, hint):
    result = second_try(checkers_08.check_fewer_micro_batches, answer)
    assert not result.passed and hint in result.message, result.message


def test_every_misconception_of_08_3_has_its_own_hint():
    hints = checkers_08.check_fewer_micro_batches.misconceptions
    assert len(hints) >= 10
    for value, hint in hints.items():
        assert not checkers_08.check_fewer_micro_batches(value).passed
        assert hint in checkers_08.check_fewer_micro_batches(value).message


def test_08_3_never_raises_at_a_learner():
    for answer in ("two eightieths", None, [1], float("nan")):
        result = checkers_08.check_fewer_micro_batches(answer)
        assert not result.passed


# --------------------------------------------------- 08.2: after the learner review
def _window(
    *,
    factor=lambda count, world: world / count,
    clip=0.4,
    sync="all",
    count_of=lambda t: (t != PAD).sum(),
    reduce_times=1,
    reduce_at_last_forward=False,
    per_tensor_clip=False,
    bypass=False,
    **reduce_kwargs,
):
    """A scale-after window with one knob turned away from the right answer."""

    def window(model, optimizer, micro_batches, world_size, all_reduce):
        optimizer.zero_grad()
        count = torch.zeros((), dtype=torch.float64)
        batches = list(micro_batches)
        for j, (tokens, targets) in enumerate(batches):
            last = j == len(batches) - 1
            skip = sync == "never" or (sync == "last" and not last)
            with model.no_sync() if skip else torch.enable_grad():
                net = model.module if bypass else model
                loss = F.cross_entropy(net(tokens), targets, ignore_index=PAD, reduction="sum")
                count += count_of(targets)
                if last and reduce_at_last_forward:
                    all_reduce(count)  # overlapped with the last backward, as torchtune does
                loss.backward()
        if not reduce_at_last_forward:
            for _ in range(reduce_times):
                work = all_reduce(count, **reduce_kwargs)
                if reduce_kwargs.get("async_op"):
                    work.wait()
        scale = factor(count, world_size)
        for p in model.parameters():
            p.grad.mul_(scale)
        if per_tensor_clip:
            for p in model.parameters():
                nn.utils.clip_grad_norm_([p], clip)
        else:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()

    return window


@pytest.mark.parametrize(
    "answer",
    [
        _window(reduce_at_last_forward=True),
        _window(reduce_at_last_forward=True, sync="last"),
        _window(async_op=True),
        _window(op=torch.distributed.ReduceOp.SUM),
        _window(factor=lambda count, world: 1 / (count / world)),
    ],
)
def test_reviewed_correct_windows_pass(answer):
    result = checkers_08.check_scale_after_window(answer)
    assert result.passed, result.message


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (_window(factor=lambda count, world: 1.0), "it was not scaled"),
        (_window(factor=lambda count, world: count / world), "the factor is inverted"),
        (_window(factor=lambda count, world: world**2 / count), "(world_size) times too large"),
        (_window(factor=lambda count, world: 1 / count), "already averaged them"),
        (_window(factor=lambda count, world: world / 3), "number of micro-batches"),
        (_window(op=torch.distributed.ReduceOp.AVG), "must be summed over the ranks"),
        (_window(sync="never"), "no backward of the window synchronized"),
        (_window(count_of=lambda t: t.numel()), "padding included (t.numel())"),
        (_window(reduce_times=2), "all_reduce ran 2 times in one window"),
        (_window(clip=1.0), "clipped to 1, not to 0.4"),
        (_window(per_tensor_clip=True), "one at a time"),
        (_window(bypass=True), "went around the DDP model"),
    ],
)
def test_reviewed_window_mistakes_are_named(answer, hint):
    result = checkers_08.check_scale_after_window(answer)
    assert not result.passed and hint in result.message, result.message


def _reads_twice(model, optimizer, micro_batches, world_size, all_reduce):
    optimizer.zero_grad()
    count = sum((t != PAD).sum() for _, t in micro_batches)
    for tokens, targets in micro_batches:
        F.cross_entropy(model(tokens), targets, ignore_index=PAD, reduction="sum").backward()
    all_reduce(count)
    for p in model.parameters():
        p.grad.mul_(world_size / count)
    nn.utils.clip_grad_norm_(model.parameters(), 0.4)
    optimizer.step()


def _reads_twice_quietly(model, optimizer, micro_batches, world_size, all_reduce):
    try:
        _reads_twice(model, optimizer, micro_batches, world_size, all_reduce)
    except Exception:  # the second pass's error swallowed: the check still says why
        pass


@pytest.mark.parametrize("answer", [_reads_twice, _reads_twice_quietly])
def test_reading_the_micro_batches_twice_is_explained(answer):
    result = checkers_08.check_scale_after_window(answer)
    assert not result.passed and "can be read only once" in result.message, result.message
    assert "NoneType" not in result.message


def test_the_all_reduce_stand_in_behaves_like_torch():
    model = scale_after_exercise.EmulatedDDP(scale_after_exercise.make_token_model())
    all_reduce = scale_after_exercise._AllReduce(5, model)
    count = torch.tensor(3)
    assert all_reduce(count) is None and count.item() == 8
    assert all_reduce(count, async_op=True).wait() and count.item() == 13
    with pytest.raises(window_records.CheckStop, match="summed over the ranks"):
        all_reduce(count, op=torch.distributed.ReduceOp.MAX)


# --------------------------------------------------- 08.4: after the learner review
def _window_norms():
    """The pre-clip gradient norm of each window of the ordinary loop on the check's data."""
    model = backward_step_exercise._repair_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    batches, norms = backward_step_exercise.repair_data(), []
    for start in range(0, len(batches), 3):
        window = batches[start : start + 3]
        optimizer.zero_grad()
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
        optimizer.step()
    return norms


def test_the_repair_data_clips_one_full_window_and_not_another():
    full = _window_norms()[:2]
    assert min(full) < 0.9 and max(full) > 1.1, full
    assert _window_norms()[2] < 3  # divided by k = 3, the short window is not clipped


def _repair(
    *,
    factor=1.0,
    divide=True,
    reduction="mean",
    zero="window",
    clip=1.0,
    where="end",
    make=lambda params: torch.optim.SGD(params, lr=0.5),
):
    def train(model, micro_batches, k):
        optimizer = make(model.parameters())
        for start in range(0, len(micro_batches), k):
            window = micro_batches[start : start + k]
            if zero == "window":
                optimizer.zero_grad()
            for inputs, targets in window:
                if zero == "micro-batch":
                    optimizer.zero_grad()
                loss = F.mse_loss(model(inputs), targets, reduction=reduction) * factor
                (loss / len(window) if divide else loss).backward()
                if where == "loop":
                    nn.utils.clip_grad_norm_(model.parameters(), clip)
            if where == "end":
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()

    return train


def _per_parameter_optimizers(model, micro_batches, k):
    optimizers = {p: torch.optim.SGD([p], lr=0.5) for p in model.parameters()}
    for start in range(0, len(micro_batches), k):
        window = micro_batches[start : start + k]
        for inputs, targets in window:
            (F.mse_loss(model(inputs), targets) / len(window)).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for optimizer in optimizers.values():
            optimizer.step()
            optimizer.zero_grad()


def _logging_hook_kept(model, micro_batches, k):
    norms = []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: norms.append(p.grad.norm()))
    fixed(model, micro_batches, k)


def _hook_frees_grads(model, micro_batches, k):
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))
    fixed(model, micro_batches, k)


@pytest.mark.parametrize("answer", [_per_parameter_optimizers, _logging_hook_kept])
def test_reviewed_repairs_pass(answer):
    result = checkers_08.check_repaired_window(answer)
    assert result.passed, result.message


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (_repair(factor=5), "5 times the ordinary loop's"),
        (_repair(factor=100), "100 times the ordinary loop's"),
        (_repair(factor=0.9), "0.9 times the ordinary loop's"),
        (_repair(divide=False), "not divided by len(window)"),
        (_repair(reduction="sum"), "reduction='sum'"),
        (_repair(zero="micro-batch"), "zero_grad() ran before each micro-batch's backward"),
        (_repair(where="loop"), "clipped after each micro-batch's backward"),
        (_repair(clip=0.5), "clipped to 0.5"),
        (_repair(clip=2.0), "clipped to 2"),
        (_hook_frees_grads, "the weights did not move"),
        (_repair(make=lambda ps: torch.optim.SGD(ps, lr=0.5, momentum=0.9)), "momentum=0.9"),
        (_repair(make=lambda ps: torch.optim.SGD(ps, lr=0.5, weight_decay=0.01)), "weight_decay"),
        (_repair(make=lambda ps: torch.optim.SGD(ps, lr=0.1)), "the learning rate is 0.1"),
        (_repair(make=lambda ps: torch.optim.Adam(ps, lr=0.5)), "the loop steps Adam"),
    ],
)
def test_reviewed_repair_mistakes_are_named(answer, hint):
    result = checkers_08.check_repaired_window(answer)
    assert not result.passed and hint in result.message, result.message
    assert "inside backward" not in result.message


# --------------------------------------------------- 08.2: text, solution and checker agree
def notebook_solution(model, optimizer, micro_batches, world_size, all_reduce):
    """Exercise 08.2's solution as the notebook folds it: every backward synchronized."""
    optimizer.zero_grad()
    count = torch.zeros((), dtype=torch.int64)
    for tokens, targets in micro_batches:
        loss = F.cross_entropy(model(tokens), targets, ignore_index=-100, reduction="sum")
        loss.backward()
        count += (targets != -100).sum()
    all_reduce(count)
    for p in model.parameters():
        p.grad.mul_(world_size / count)
    nn.utils.clip_grad_norm_(model.parameters(), 0.4)
    optimizer.step()


def test_the_solution_without_no_sync_passes_with_no_advice_to_use_it():
    result = checkers_08.check_scale_after_window(notebook_solution)
    assert result.passed and "no_sync" not in result.message, result.message


def test_a_window_with_no_sync_passes_and_hears_it_all_reduced_once():
    result = checkers_08.check_scale_after_window(foreach_version)
    assert result.passed and "all-reduced the gradients once" in result.message, result.message


def test_the_notebook_folds_the_solution_this_file_tests():
    import inspect

    from course import NOTEBOOKS, read

    nb = read(NOTEBOOKS / "08_training_stacks.ipynb")
    [solution] = [
        c.source
        for c in nb.cells
        if "solution" in c.metadata.get("tags", []) and "def scale_after_window" in c.source
    ]
    body = inspect.getsource(notebook_solution).split('"""', 2)[2]
    for line in body.strip().splitlines():
        assert line.strip().split("  #")[0] in solution, line
    assert "no_sync" not in solution.split("```python")[1]
    assert "torch._" not in solution
