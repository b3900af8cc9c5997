"""Notebook 07's helpers: the AMP/clipping/scheduler accumulation loop, the frameworks'
mirrors, the 2-process DDP run, and the exercise checkers. What the notebook says about the
real Lightning, Accelerate and Trainer (Accelerate's short last window with a dataloader it did
not prepare, for one) is tested on the libraries in test_frameworks_real.py."""

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from answers import second_try
from torch import nn
from torch.nn import functional as F

from helpers.accumulation import accumulate_gradients, current_gradients, relative_error, windows
from helpers.at_scale.amp_and_clipping import MISTAKES, train_accumulating
from helpers.at_scale.checkers_07 import (
    ALLREDUCE_K,
    check_allreduces,
    check_trainer_window_loss,
)
from helpers.at_scale.ddp_runs import run_ddp_accumulation
from helpers.at_scale.frameworks import (
    divide_by_k_gradients,
    mean_of_means_gradients,
    num_items_gradients,
    steps_after,
    trainer_fallback_gradients,
)
from helpers.audit import LoopAuditor
from helpers.data import make_padded_tokens
from helpers.grads import StepGradients
from helpers.models import TokenModel, make_mlp
from helpers.processes.run_ranks import free_port, launch, launcher_command
from helpers.versions import why_it_cannot_run

K = 4
ROOT_DIR = Path(__file__).resolve().parents[2]


def classification_batches(n=10, size=8, seed=0):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(n * size, 8, generator=generator)
    labels = torch.randint(0, 3, (n * size,), generator=generator)
    return list(zip(inputs.split(size), labels.split(size), strict=True))


def train(mistake=None, scaler=None, amp_dtype=None, max_norm=None, with_scheduler=False):
    model = make_mlp((8, 16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.5) if with_scheduler else None
    with LoopAuditor(model, optimizer, K, scheduler=scheduler, scaler=scaler) as audit:
        log = train_accumulating(
            model, optimizer, classification_batches(), K, amp_dtype=amp_dtype,
            scaler=scaler, max_norm=max_norm, scheduler=scheduler, mistake=mistake,
        )  # fmt: skip
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return log, weights, audit.codes


def test_each_step_uses_its_windows_mean_gradient_short_tail_included():
    model = make_mlp((8, 16, 3))
    start = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-9)  # the weights barely move
    with StepGradients(optimizer) as recorded:
        log = train_accumulating(model, optimizer, classification_batches(), K)
    reference = make_mlp((8, 16, 3))
    reference.load_state_dict(dict(zip(reference.state_dict(), start, strict=True)))
    for used, window in zip(recorded.at_steps, windows(classification_batches(), K), strict=True):
        reference.zero_grad()
        accumulate_gradients(reference, nn.CrossEntropyLoss(), window)
        expected = torch.cat([g.flatten() for g in current_gradients(reference)])
        torch.testing.assert_close(used, expected, rtol=1e-5, atol=1e-7)
    assert len(log.losses) == 3 and len(log.lrs) == 3


def test_amp_with_one_scale_per_window_matches_full_precision():
    _, full, codes_full = train()
    _, amp, codes_amp = train(scaler=torch.amp.GradScaler("cpu"), amp_dtype=torch.bfloat16)
    start = torch.cat([p.detach().flatten() for p in make_mlp((8, 16, 3)).parameters()])
    assert (amp - full).norm() / (full - start).norm() < 0.05
    assert codes_full == [] and codes_amp == []


def test_update_per_micro_batch_fails_loudly():
    with pytest.raises(AssertionError, match="No inf checks were recorded"):
        train(mistake="update per micro-batch", scaler=torch.amp.GradScaler("cpu"))


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler")
@pytest.mark.parametrize(
    ("mistake", "options", "code"),
    [
        ("clip per micro-batch", {"max_norm": 0.1}, "clip-per-micro-batch"),
        ("clip before unscale", {"max_norm": 0.1, "scaler": "yes"}, "unscale-after-clip"),
        ("scheduler per micro-batch", {"with_scheduler": True}, "scheduler-per-micro-batch"),
    ],
)
def test_each_mistake_changes_the_result_and_is_reported(mistake, options, code):
    if options.get("scaler"):
        options = {**options, "scaler": torch.amp.GradScaler("cpu")}
    _, wrong, codes = train(mistake=mistake, **options)
    if options.get("scaler"):
        options = {**options, "scaler": torch.amp.GradScaler("cpu")}
    _, right, right_codes = train(**options)
    assert codes == [code] and right_codes == []
    assert not torch.allclose(wrong, right)


def test_clipping_once_per_window_bounds_the_step_gradient():
    log, _, _ = train(max_norm=0.1)
    assert all(norm <= 0.1 + 1e-6 for norm in log.grad_norms)


def test_bad_arguments_are_refused():
    model = make_mlp((8, 16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="mistake must be None or one of"):
        train_accumulating(model, optimizer, classification_batches(), K, mistake="typo")
    with pytest.raises(ValueError, match="needs the tool"):
        train_accumulating(model, optimizer, classification_batches(), K, mistake=MISTAKES[0])
    with pytest.raises(ValueError, match="empty"):
        train_accumulating(model, optimizer, [], K)
    with pytest.raises(ValueError, match="accumulation_steps"):
        train_accumulating(model, optimizer, classification_batches(), 0)
    with pytest.raises(TypeError, match="Optimizer"):
        train_accumulating(model, "sgd", classification_batches(), K)


# ----------------------------------------------------------------- frameworks
def test_lightning_and_accelerate_step_every_k_and_at_the_end():
    assert steps_after(10, 4) == [4, 8, 10]
    assert steps_after(8, 4) == [4, 8]
    assert steps_after(3, 1) == [1, 2, 3]
    with pytest.raises(ValueError):
        steps_after(0, 4)


def test_dividing_by_k_gives_a_short_window_its_share_only():
    tail = list(windows(classification_batches(), K))[-1]
    model = make_mlp((8, 16, 3))
    model.zero_grad()
    accumulate_gradients(model, nn.CrossEntropyLoss(), tail)
    exact = torch.cat([g.flatten() for g in current_gradients(model)])
    divided = torch.cat(
        [g.flatten() for g in divide_by_k_gradients(model, F.cross_entropy, tail, K)]
    )
    torch.testing.assert_close(divided, exact * len(tail) / K)


def test_num_items_in_batch_is_exact_and_mean_of_means_is_not():
    tokens, targets, _ = make_padded_tokens(8, 6, seed=3)
    window = list(zip(tokens.split(2), targets.split(2), strict=True))
    model = TokenModel()
    model.zero_grad()  # the reference: the whole window as one batch
    F.cross_entropy(model(tokens), targets, ignore_index=-100).backward()
    exact = current_gradients(model)
    assert relative_error(num_items_gradients(model, window), exact) < 1e-6
    assert relative_error(mean_of_means_gradients(model, window), exact) > 0.05
    with pytest.raises(ValueError, match="no targets"):
        num_items_gradients(model, [(tokens[:1], torch.full_like(targets[:1], -100))])


def test_the_trainers_fallback_divides_by_the_windows_own_size():
    tail = list(windows(classification_batches(), K))[-1]  # 2 micro-batches of equal size
    model = make_mlp((8, 16, 3))
    model.zero_grad()
    accumulate_gradients(model, nn.CrossEntropyLoss(), tail)
    exact = torch.cat([g.flatten() for g in current_gradients(model)])
    fallback = trainer_fallback_gradients(model, F.cross_entropy, tail)
    torch.testing.assert_close(torch.cat([g.flatten() for g in fallback]), exact)
    tokens, targets, _ = make_padded_tokens(8, 6, seed=3)
    window = list(zip(tokens.split(2), targets.split(2), strict=True))
    token_model = TokenModel()
    means = trainer_fallback_gradients(
        token_model, lambda o, t: F.cross_entropy(o, t, ignore_index=-100), window
    )
    assert relative_error(mean_of_means_gradients(token_model, window), means) == 0.0
    with pytest.raises(ValueError, match="empty"):
        trainer_fallback_gradients(model, F.cross_entropy, [])


# ------------------------------------------------------------------ distributed
@pytest.fixture(scope="module")
def ddp_results():
    """One 2-process DDP run, with the k of exercise 07.1, for every test that reads its
    results."""
    return run_ddp_accumulation(nproc=2, k=ALLREDUCE_K, micro_batch=16, repeats=3)


@pytest.mark.skipif(
    why_it_cannot_run("07_accumulation_at_scale") is not None,
    reason=str(why_it_cannot_run("07_accumulation_at_scale")),
)
def test_the_two_process_ddp_run(ddp_results):
    results, k = ddp_results, ALLREDUCE_K
    buckets = results["buckets"]
    assert buckets >= 2 and results["k"] == k and results["effective_batch"] == 2 * k * 16
    assert results["allreduces_per_step"] == {
        "no_sync": buckets,
        "sync every micro-batch": k * buckets,
        "forward outside no_sync": k * buckets,
    }
    gradient_bytes = 4 * results["parameters"]  # float32: every gradient once per all-reduce
    assert results["allreduce_bytes_per_step"] == {
        "no_sync": gradient_bytes,
        "sync every micro-batch": k * gradient_bytes,
        "forward outside no_sync": k * gradient_bytes,
    }
    assert set(results["ms_per_window"]) == set(results["allreduces_per_step"])
    assert results["grad_max_diff_vs_single_process"] < 1e-6
    assert results["weights_max_diff_across_ranks"] == 0.0
    assert results["weights_max_diff_vs_single_process"] < 1e-6
    assert results["auditor_codes"] == {
        "correct": [],
        "no zero_grad after step": ["missing-zero-grad"],
    }


def ranks_with(marker: str) -> list[str]:
    """Command lines of running processes that contain ``marker`` (a unique path)."""
    found = subprocess.run(["pgrep", "-af", re.escape(marker)], capture_output=True, text=True)
    return [line for line in found.stdout.splitlines() if "pgrep" not in line]


def wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_a_failing_run_says_why(tmp_path):
    with pytest.raises(
        RuntimeError, match=r"(?s)failed \(exit 1\):\n.*No module named helpers.no_such"
    ):
        launch("helpers.no_such_module", [], nproc=2, timeout=60, preload=())


IDLE_RANKS = """
import time
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()  # both ranks are up, in one process group
time.sleep(600)  # and never finish: only the launch's timeout ends them
"""


def test_a_run_over_time_is_stopped_with_all_its_ranks(tmp_path, monkeypatch, capfd):
    """Ranks that wait, rather than train, until the timeout: the same stop (SIGTERM to the
    launcher's process group) without two cores busy for 12 s. They do not watch for their
    launcher's end (exit_when_orphaned), so only that stop can end them. With
    GM_RANK_STACKS set (as in CI), where each rank waited goes to standard error."""
    (tmp_path / "idle_ranks.py").write_text(IDLE_RANKS, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("GM_RANK_STACKS", "1")
    monkeypatch.setenv("GM_LAUNCH_SERVER", "")  # the launcher a notebook starts (ranks by command)
    marker = str(tmp_path / "timeout-run")  # in the ranks' command line (forks of the launcher)
    with pytest.raises(RuntimeError, match="took over 12 s and was stopped"):
        launch("idle_ranks", [marker], timeout=12, preload=("torch.distributed",))
    assert wait_until(lambda: not ranks_with(marker), 10), ranks_with(marker)
    err = capfd.readouterr().err
    assert "took over 12 s and was stopped; its output:" in err
    assert "most recent call first" in err and "idle_ranks.py" in err, err  # (the 2 interleave)


def test_ranks_end_when_the_launching_kernel_is_killed(tmp_path):
    marker = str(tmp_path / "killed-kernel.json")
    kernel = subprocess.Popen(
        [sys.executable, "-c", "from helpers.processes.run_ranks import launch; "
         f"launch('helpers.at_scale.ddp_accumulation', ['--out={marker}', '--repeats=1000000'], "
         "timeout=300)"],
        cwd=ROOT_DIR,
        env=dict(os.environ, GM_LAUNCH_SERVER=""),  # as in a notebook: no launch server
    )  # fmt: skip
    try:
        # the kernel, the launcher and both ranks (forks of the launcher) carry the marker
        assert wait_until(lambda: len(ranks_with(marker)) >= 4, 60), "the ranks never started"
        time.sleep(1)  # the ranks are past their start-up (torch is imported before the fork)
        kernel.kill()  # as a kernel killed or restarted from Jupyter
        kernel.wait()
        assert wait_until(lambda: not ranks_with(marker), 20), ranks_with(marker)
    finally:
        for line in ranks_with(marker):
            os.kill(int(line.split()[0]), signal.SIGKILL)


def test_launch_command_and_port():
    port = free_port()
    command = launcher_command("helpers.at_scale.ddp_accumulation", 2, ["--k=4"], port)
    assert command[1:] == ["-m", "helpers.processes.launcher", "--nproc=2", f"--port={port}",
                           "helpers.at_scale.ddp_accumulation", "--k=4"]  # fmt: skip
    with pytest.raises(ValueError, match="nproc"):
        launch("helpers.at_scale.ddp_accumulation", [], nproc=0)


# ------------------------------------------------------------------ checkers
NUMERIC = [
    (check_allreduces, 16),
    (check_trainer_window_loss, 2.5),
]


@pytest.mark.parametrize(("check", "right"), NUMERIC)
def test_numeric_checkers_name_each_misconception(check, right):
    assert check.expected() == right and len(check.misconceptions) >= 3
    for value, hint in check.misconceptions.items():
        result = second_try(check, value)
        assert not result.passed and hint in result.message, (value, result.message)
    assert not check(right + 1000).passed


def test_the_named_misconceptions_give_those_numbers():
    assert (
        "inside it too" in second_try(check_allreduces, 2).message
    )  # no_sync() around backward only
    assert "counts the forward passes" in second_try(check_allreduces, 2 * 8 * 2).message
    assert 100 / 2 in check_trainer_window_loss.misconceptions  # by micro-batches, not tokens


def test_the_allreduce_exercises_answer_is_what_a_run_counts(ddp_results):
    """Exercise 07.1's answer, from the real 2-process run: with k = 8 and the run's
    buckets, a forward outside no_sync() makes every backward all-reduce every bucket."""
    from helpers.at_scale.checkers_07 import ALLREDUCE_BUCKETS

    assert ddp_results["k"] == ALLREDUCE_K
    assert ddp_results["buckets"] == ALLREDUCE_BUCKETS
    counted = ddp_results["allreduces_per_step"]["forward outside no_sync"]
    assert counted == check_allreduces.expected() == ALLREDUCE_BUCKETS * ALLREDUCE_K


@pytest.mark.parametrize(("check", "right"), NUMERIC)
def test_numeric_checkers_take_any_kind_of_number(check, right):
    import decimal
    from fractions import Fraction

    import numpy as np

    for answer in (Fraction(right), decimal.Decimal(str(right)), np.float64(right),
                   np.array(right), torch.tensor([right])):  # fmt: skip
        assert check(answer).passed, answer
    if float(right).is_integer():
        assert check(np.int64(right)).passed
    for answer in (str(right), None):
        result = check(answer)
        assert not result.passed and "must be a number" in result.message, result.message
    assert not check(...).passed and "Not answered" in check(...).message


def test_checkers_pass_in_strict_mode_and_raise_on_wrong_answers(strict_checks):
    assert check_allreduces(16).passed
    with pytest.raises(AssertionError, match="the forward ran outside it"):
        check_allreduces(2)


def test_no_warnings_from_a_correct_scheduled_loop():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(with_scheduler=True, max_norm=1.0)


def test_a_ranks_exception_is_what_the_error_shows():
    from helpers.processes.run_ranks import first_error

    output = "\n".join(
        [
            "[rank0]: Traceback (most recent call last):",
            '[rank0]:   File "x.py", line 3, in <module>',
            "[rank0]: ValueError: k must be positive",
            "E1130 11:53:35.278000 6203 api.py:1002] failed (exitcode: 1) local_rank: 0",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ...",
        ]
    )
    assert first_error(output).endswith("ValueError: k must be positive")
    assert "ChildFailedError" not in first_error(output)


def amp_window_variant(
    divide="samples", zero="start", set_to_none=True, unscale=True, clip="window",
    step="scaler", update="after", norm=1.0, dtype=torch.bfloat16,
):  # fmt: skip
    """An ``amp_window`` written one way, or with one mistake."""

    def amp_window(model, optimizer, scaler, window):
        if zero == "start":
            optimizer.zero_grad(set_to_none=set_to_none)
        samples = sum(len(targets) for _, targets in window)
        for inputs, targets in window:
            with torch.autocast("cpu", dtype=dtype):
                outputs = model(inputs)
                if divide == "inside":  # the sum over the micro-batch / the window's samples
                    loss = F.mse_loss(outputs, targets, reduction="sum") / samples
                elif divide == "len":  # the mistake: by the number of micro-batches
                    loss = F.mse_loss(outputs, targets) / len(window)
                elif divide == "full window":  # the mistake: by a full window's 24 samples
                    loss = F.mse_loss(outputs, targets) * len(targets) / 24
                else:
                    share = len(targets) / samples if divide else 1
                    loss = F.mse_loss(outputs, targets) * share
            scaler.scale(loss).backward()
            if zero == "each micro-batch":
                optimizer.zero_grad()
            if update == "each micro-batch":
                scaler.update()
            if unscale == "each micro-batch":
                scaler.unscale_(optimizer)
            if clip == "each micro-batch":
                nn.utils.clip_grad_norm_(model.parameters(), norm)
            if step == "each micro-batch":
                scaler.step(optimizer)
                scaler.update()
        if clip == "before unscale":
            nn.utils.clip_grad_norm_(model.parameters(), norm)
        if unscale is True:
            scaler.unscale_(optimizer)
        if clip == "window":
            nn.utils.clip_grad_norm_(model.parameters(), norm)
        if update == "before step":
            scaler.update()
        if step == "scaler":
            scaler.step(optimizer)
        elif step == "optimizer":
            optimizer.step()
        if update in ("after", "twice") and step != "each micro-batch":
            scaler.update()
        if update == "twice":
            scaler.update()
        if clip == "after step":
            nn.utils.clip_grad_norm_(model.parameters(), norm)
        if zero == "after step":
            optimizer.zero_grad(set_to_none=set_to_none)

    return amp_window


@pytest.mark.parametrize(
    "written",
    [
        {},
        {"zero": "after step", "set_to_none": False},
        {"zero": "start", "set_to_none": False},
        {"divide": "inside"},
    ],
)
def test_the_amp_window_checker_accepts_a_correct_window_however_written(written):
    from helpers.at_scale.checkers_07 import check_amp_window

    result = check_amp_window(amp_window_variant(**written))
    assert result.passed and "overflowing window was skipped" in result.message, result.message


@pytest.mark.parametrize(
    ("mistake", "hint"),
    [
        ({"unscale": False}, "before clip_grad_norm_"),
        ({"clip": "before unscale"}, "before clip_grad_norm_"),
        ({"clip": "each micro-batch"}, "clipped after each micro-batch"),
        ({"clip": None}, "was not clipped"),
        ({"divide": None}, "the sum, not the mean"),
        ({"divide": "len"}, "divided by the number of micro-batches"),
        ({"update": "each micro-batch"}, "ran after a micro-batch"),
        ({"update": "before step"}, "ran before scaler.step(optimizer)"),
        ({"update": None}, "scaler.update() is missing"),
        ({"step": "optimizer"}, "optimizer.step() was called instead of scaler.step"),
        ({"zero": None}, "zero_grad() is missing or misplaced"),
        ({"zero": "each micro-batch"}, "zero_grad() is misplaced"),
        # the root cause, not its symptoms (a pending clip, a missing update, windows of 1)
        ({"step": None}, "scaler.step(optimizer) never ran"),
        ({"unscale": "each micro-batch"}, "unscale_(optimizer) ran twice in one window"),
        (
            {"unscale": "each micro-batch", "clip": "each micro-batch"},
            "unscale_(optimizer) ran twice in one window",
        ),
        ({"step": "each micro-batch"}, "stepped {micro_batches} times for {windows} windows"),
        ({"update": "twice"}, "scaler.update() ran twice in a row"),
        ({"norm": 0.5}, "clipped at max_norm=0.5: clip the unscaled gradient to max_norm=1.0"),
        ({"clip": "after step"}, "before scaler.step(optimizer)"),
        ({"dtype": torch.float16}, "your autocast ran in float16"),
    ],
)
def test_the_amp_window_checker_names_each_mistake(mistake, hint):
    from helpers.at_scale.checkers_07 import amp_setup, check_amp_window

    *_, windows = amp_setup()
    hint = hint.format(micro_batches=sum(map(len, windows)), windows=len(windows))
    result = second_try(check_amp_window, amp_window_variant(**mistake))
    assert not result.passed and hint in result.message, result.message
    for symptom in ("clipped after each micro-batch", "update() is missing", "zero_grad() is"):
        if symptom not in hint:
            assert symptom not in result.message, result.message
    assert "accumulation_steps=" not in result.message  # the auditor's configuration wording


def summed_window(shared_autocast: bool):
    """``amp_window`` with one backward() on the window's summed loss."""

    def amp_window(model, optimizer, scaler, window):
        optimizer.zero_grad()
        samples = sum(len(y) for _, y in window)
        if shared_autocast:  # one autocast block: its bfloat16 weight casts are cached
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = sum(F.mse_loss(model(x), y) * len(y) for x, y in window) / samples
        else:
            losses = []
            for x, y in window:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    losses.append(F.mse_loss(model(x), y) * len(y) / samples)
            loss = sum(losses)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()

    return amp_window


def test_one_backward_on_the_summed_loss_is_judged_by_its_weights():
    """The auditor sees windows of 1 backward pass; the checker accepts the window when its
    weights are the course's, else it asks for a backward per micro-batch, without the
    auditor's wording about declaring accumulation_steps."""
    from helpers.at_scale.checkers_07 import check_amp_window

    same = check_amp_window(summed_window(shared_autocast=False))
    assert same.passed and "summed loss" in same.message and "memory" in same.message
    assert "gradient is right" in same.message and "not accumulation" in same.message
    differs = check_amp_window(summed_window(shared_autocast=True))
    assert not differs.passed and "backward once per micro-batch" in differs.message
    assert "accumulation_steps" not in differs.message and "declare" not in differs.message

    def backward_after_the_loop(model, optimizer, scaler, window):
        optimizer.zero_grad()
        for inputs, targets in window:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.mse_loss(model(inputs), targets) / len(window)
        scaler.scale(loss).backward()  # only the last micro-batch's loss
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()

    last = check_amp_window(backward_after_the_loop)
    assert not last.passed and "only the last micro-batch's loss" in last.message, last.message


def test_hints_name_the_root_cause_first():
    from helpers.at_scale.checkers_07 import finding_hint, scaler_error_hint

    findings = [("clip-per-micro-batch", "..."), ("leftover-gradients", "...")]
    no_step = ["scale", "scale", "unscale_", "update"] * 2
    assert finding_hint(findings, no_step, windows=2).startswith("scaler.step(optimizer) never")
    two_steps = ["scale", "unscale_", "step", "update"] * 2 + ["scale", "unscale_", "update"]
    assert "call scaler.step(optimizer)" in finding_hint(findings, two_steps, windows=3)
    assert "after each micro-batch" in finding_hint(findings)  # no calls: the auditor's order
    assert finding_hint([]) is None
    twice = "unscale_() has already been called on this optimizer since the last update()."
    assert "ran twice" in scaler_error_hint(twice, ["scale", "unscale_", "scale", "unscale_"])
    after = "unscale_() is being called after step()."
    calls = ["scale", "unscale_", "step", "scale", "unscale_"]
    assert "update() is missing" in scaler_error_hint(after, calls)


def test_the_overflow_window_tells_scaler_step_from_optimizer_step():
    """Without the overflow window optimizer.step() after unscale_ would give the same
    weights: the window is what makes the checker reject it."""
    from helpers.at_scale.checkers_07 import amp_setup

    model, optimizer, scaler, windows = amp_setup()
    before = [p.detach().clone() for p in model.parameters()]
    amp_window_variant()(model, optimizer, scaler, windows[0])
    moved = [p.detach().clone() for p in model.parameters()]
    assert not all(torch.equal(a, b) for a, b in zip(before, moved, strict=True))
    scale = scaler.get_scale()
    amp_window_variant()(model, optimizer, scaler, windows[1])  # overflows: skipped
    assert all(torch.equal(a, b) for a, b in zip(moved, model.parameters(), strict=True))
    assert scaler.get_scale() == scale / 2
    amp_window_variant(step="optimizer")(model, optimizer, scaler, windows[1])
    assert not all(torch.isfinite(p).all() for p in model.parameters())


def test_a_window_divided_by_a_full_windows_samples_is_rejected():
    """The review found 07.2 accepting len(targets) / 24 when every window held 24 samples:
    the short last window now tells it from the window's own total."""
    from helpers.at_scale.checkers_07 import amp_setup, check_amp_window

    *_, windows = amp_setup()
    assert len({sum(len(t) for _, t in window) for window in windows}) > 1
    first = check_amp_window(amp_window_variant(divide="full window"))
    assert not first.passed and first.message.startswith("does every window hold 24 samples?")
    result = check_amp_window(amp_window_variant(divide="full window"))
    assert not result.passed and "divided by a full window's 24 samples" in result.message
    assert check_amp_window(amp_window_variant()).passed


def test_the_amp_window_checker_never_raises():
    from helpers.at_scale.checkers_07 import check_amp_window

    def raises(model, optimizer, scaler, window):
        raise ValueError("a bug in the learner's code")

    def unfinished(model, optimizer, scaler, window):
        optimizer.zero_grad()
        ...

    for answer, fragment in [
        (..., "Not answered"),
        ("amp_window", "pass your function itself"),
        (None, "pass your function itself"),
        (lambda model: None, "give it 4 parameters"),
        (raises, "ValueError: a bug in the learner's code"),
        (unfinished, "still has `...`"),
    ]:
        result = check_amp_window(answer)
        assert not result.passed and fragment in result.message, (answer, result.message)


def test_train_accumulating_runs_the_shown_window(monkeypatch):
    """The notebook shows train_window's source: train_accumulating must really run it, once
    per window."""
    import helpers.at_scale.amp_and_clipping

    calls = []
    real = helpers.at_scale.amp_and_clipping.train_window

    def spy(*args, **kwargs):
        calls.append(len(args[2]))
        return real(*args, **kwargs)

    monkeypatch.setattr(helpers.at_scale.amp_and_clipping, "train_window", spy)
    log, _, _ = train(max_norm=1.0, scaler=torch.amp.GradScaler("cpu"), amp_dtype=torch.bfloat16)
    assert calls == [K, K, 2] and len(log.losses) == 3


def test_the_amp_windows_solution_says_what_a_single_backward_costs():
    """Exercise 07.2's solution says what its checker says of one backward() per window: the
    gradient is right, the graphs stay in memory, it is not accumulation."""
    import nbformat

    path = ROOT_DIR / "notebooks" / "07_accumulation_at_scale.ipynb"
    cells = nbformat.read(path, as_version=4).cells
    [index] = [i for i, c in enumerate(cells) if c.source.startswith("## Exercise 07.2")]
    solution = cells[index + 2].source
    assert "solution" in cells[index + 2].metadata["tags"]
    for fragment in ("gradient is right", "in memory", "not accumulation"):
        assert fragment in " ".join(solution.split()), fragment


@pytest.mark.parametrize(
    ("forward_inside", "backward_inside", "all_reduces"),
    [(True, True, 0), (True, False, 0), (False, True, 1), (False, False, 1)],
)
def test_ddp_decides_at_the_forward_whether_the_backward_all_reduces(
    tmp_path, forward_inside, backward_inside, all_reduces
):
    """The glossary's no_sync entry: where the forward ran decides; where the backward runs
    does not (the trap of notebook 07, and its mirror: a last forward inside never syncs)."""
    import gc

    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        ddp = DDP(nn.Linear(4, 2))  # one bucket
        calls = []

        def counting(state, bucket):
            calls.append(bucket.index())
            return default_hooks.allreduce_hook(None, bucket)

        ddp.register_comm_hook(None, counting)
        x = torch.randn(3, 4)
        ddp(x).sum().backward()  # DDP settles its buckets in the first iteration
        calls.clear()
        with ddp.no_sync() if forward_inside else contextlib.nullcontext():
            out = ddp(x)
        with ddp.no_sync() if backward_inside else contextlib.nullcontext():
            out.sum().backward()
        counted = len(calls)
    finally:
        ddp = None
        gc.collect()
        dist.destroy_process_group()
    assert counted == all_reduces
