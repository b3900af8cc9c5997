"""The loop auditor: each code fires on its bug and not on the fix, correct loops of every
kind report nothing, results are unchanged, and misuse is refused."""

import contextlib

import pytest
import torch
from torch import nn

from helpers.audit import CODES, LoopAuditor
from loop_auditor import patches

K = 4
N_MICRO = 10  # 2 full windows of K and a tail of 2


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))


def batches(n=N_MICRO, size=4, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 5, generator=generator), torch.randn(size, 1, generator=generator))
            for _ in range(n)]  # fmt: skip


def loss_of(model, batch):
    inputs, targets = batch
    return nn.functional.mse_loss(model(inputs), targets)


# --------------------------------------------------------------------------- loops
# Each loop takes (model, optimizer, extras) and trains on batches(); extras holds the
# scheduler or scaler when the loop needs one.


def plain(model, opt, _):
    for batch in batches():
        opt.zero_grad()
        loss_of(model, batch).backward()
        opt.step()


def plain_zeros(model, opt, _):
    for batch in batches():
        opt.zero_grad(set_to_none=False)
        loss_of(model, batch).backward()
        opt.step()


def no_zero_grad(model, opt, _):
    for batch in batches():
        loss_of(model, batch).backward()
        opt.step()


def zero_between_backward_and_step(model, opt, _, set_to_none=True):
    for batch in batches():
        loss_of(model, batch).backward()
        opt.zero_grad(set_to_none=set_to_none)
        opt.step()


def step_without_backward(model, opt, _):
    opt.zero_grad()
    for batch in batches():
        loss_of(model, batch)  # forgot .backward()
        opt.step()


def accumulation_off_by_one(model, opt, _):
    """Steps when i % K == 0, with i from 0: windows of 1, 4, 4 and a tail of 1."""
    for i, batch in enumerate(batches()):
        (loss_of(model, batch) / K).backward()
        if i % K == 0:
            opt.step()
            opt.zero_grad()
    opt.step()


def accumulation_with_tail(model, opt, _):
    """Correct: every window divided by its own size, the tail stepped after the loop."""
    data = batches()
    opt.zero_grad()
    for start in range(0, len(data), K):
        window = data[start : start + K]
        for batch in window:
            (loss_of(model, batch) / len(window)).backward()
        opt.step()
        opt.zero_grad()


def accumulation_dropping_tail(model, opt, _):
    opt.zero_grad()
    for i, batch in enumerate(batches()):
        (loss_of(model, batch) / K).backward()
        if (i + 1) % K == 0:
            opt.step()
            opt.zero_grad()


def accumulation_zeroing_every_other_window(model, opt, _):
    opt.zero_grad()
    for i, batch in enumerate(batches(n=8)):
        (loss_of(model, batch) / K).backward()
        if (i + 1) % K == 0:
            opt.step()
        if (i + 1) % (2 * K) == 0:
            opt.zero_grad()


def scheduler_per_window(model, opt, extras):
    for start in range(0, 8, K):
        opt.zero_grad()
        for batch in batches(n=8)[start : start + K]:
            (loss_of(model, batch) / K).backward()
        opt.step()
        extras["scheduler"].step()


def scheduler_per_micro_batch(model, opt, extras):
    opt.zero_grad()
    for i, batch in enumerate(batches(n=8)):
        (loss_of(model, batch) / K).backward()
        if (i + 1) % K == 0:
            opt.step()
            opt.zero_grad()
        extras["scheduler"].step()


def clip_per_window(model, opt, _):
    opt.zero_grad()
    for i, batch in enumerate(batches(n=8)):
        (loss_of(model, batch) / K).backward()
        if (i + 1) % K == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            opt.step()
            opt.zero_grad()


def clip_per_micro_batch(model, opt, _):
    opt.zero_grad()
    for i, batch in enumerate(batches(n=8)):
        (loss_of(model, batch) / K).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        if (i + 1) % K == 0:
            opt.step()
            opt.zero_grad()


def amp_loop(model, opt, extras, unscale=True, clip_first=False):
    """GradScaler with one scale per window: scale each micro-batch, unscale_ once, clip,
    step, update (bf16 autocast, since this runs on the CPU)."""
    scaler = extras["scaler"]
    opt.zero_grad()
    for i, batch in enumerate(batches(n=8)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_of(model, batch) / K
        scaler.scale(loss).backward()
        if (i + 1) % K == 0:
            if clip_first:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if unscale:
                scaler.unscale_(opt)
            if not clip_first:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()


def amp_clip_without_unscale(model, opt, extras):
    amp_loop(model, opt, extras, unscale=False)


def amp_unscale_after_clip(model, opt, extras):
    amp_loop(model, opt, extras, clip_first=True)


def logs_loss_item(model, opt, _):
    total = 0.0
    for batch in batches():
        opt.zero_grad()
        loss = loss_of(model, batch)
        loss.backward()
        opt.step()
        total += loss.item()


def logs_loss_tensor(model, opt, _):
    total = 0.0
    for batch in batches():
        opt.zero_grad()
        loss = loss_of(model, batch)
        loss.backward()
        opt.step()
        total += loss  # keeps every iteration's graph


def multi_loss(model, opt, _):
    """Two losses on one output: one backward of the sum, or two with retain_graph."""
    for i, (inputs, targets) in enumerate(batches()):
        opt.zero_grad()
        out = model(inputs)
        loss_a = nn.functional.mse_loss(out, targets)
        loss_b = out.abs().mean()
        if i % 2:
            (loss_a + 0.1 * loss_b).backward()
        else:
            loss_a.backward(retain_graph=True)
            (0.1 * loss_b).backward()
        opt.step()


def sliced_optimizer_loop(model, opt, _):
    plain(model, opt, _)


def run(loop, optimizer_params=None, audit=True, scheduler=False, scaler=False, **kwargs):
    """Train a fresh model with ``loop``; return (auditor or None, final weights)."""
    model = make_model()
    params = list(model.parameters()) if optimizer_params is None else optimizer_params(model)
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    extras = {}
    if scheduler:
        extras["scheduler"] = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
    if scaler:
        extras["scaler"] = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    auditor = None
    if audit:
        auditor = LoopAuditor(
            model,
            opt,
            accumulation_steps=kwargs.get("k"),  # None: not declared
            scheduler=extras.get("scheduler"),
            scaler=extras.get("scaler"),
        )
    with auditor if audit else contextlib.nullcontext():
        loop(model, opt, extras)
    return auditor, [p.detach().clone() for p in model.parameters()]


def last_layer_only(model):
    return list(model[2].parameters())


# (code, buggy loop, fixed loop, run options)
PAIRS = [
    ("missing-zero-grad", no_zero_grad, plain, {}),
    ("missing-zero-grad", accumulation_zeroing_every_other_window, accumulation_with_tail,
     {"k": K}),
    ("zero-grad-before-step", zero_between_backward_and_step, plain, {}),
    ("step-without-grad", step_without_backward, plain, {}),
    ("scheduler-per-micro-batch", scheduler_per_micro_batch, scheduler_per_window,
     {"k": K, "scheduler": True}),
    ("clip-per-micro-batch", clip_per_micro_batch, clip_per_window, {"k": K}),
    ("unscale-after-clip", amp_clip_without_unscale, amp_loop, {"k": K, "scaler": True}),
    ("unscale-after-clip", amp_unscale_after_clip, amp_loop, {"k": K, "scaler": True}),
    ("graph-kept-alive", logs_loss_tensor, logs_loss_item, {}),
    ("leftover-gradients", accumulation_dropping_tail, accumulation_with_tail, {"k": K}),
    ("window-length", accumulation_off_by_one, accumulation_with_tail, {"k": K}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("code", "buggy", "fixed", "options"),
    PAIRS,
    ids=[f"{code}-{buggy.__name__}" for code, buggy, _, _ in PAIRS],
)
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler")
def test_each_code_fires_on_its_bug_and_not_on_the_fix(code, buggy, fixed, options):
    auditor, _ = run(buggy, **options)
    assert code in auditor.codes, str(auditor)
    finding = next(f for f in auditor.findings if f.code == code)
    assert finding.message and str(finding).startswith(code)
    fixed_auditor, _ = run(fixed, **options)
    assert fixed_auditor.findings == [], str(fixed_auditor)


def test_params_not_in_optimizer_fires_and_names_them():
    auditor, _ = run(sliced_optimizer_loop, optimizer_params=last_layer_only)
    assert auditor.codes == ["params-not-in-optimizer"]
    assert "0.weight" in auditor.findings[0].message and auditor.findings[0].step == 1
    fixed, _ = run(sliced_optimizer_loop)
    assert fixed.findings == []


def test_params_outside_the_optimizer_that_are_frozen_are_fine():
    model = make_model()
    model[0].requires_grad_(False)
    opt = torch.optim.SGD(model[2].parameters(), lr=0.05)
    with LoopAuditor(model, opt) as auditor:
        plain(model, opt, {})
    assert auditor.findings == []


def test_zero_grad_before_step_says_what_zeros_still_do():
    auditor, _ = run(lambda m, o, e: zero_between_backward_and_step(m, o, e, set_to_none=False))
    assert auditor.codes == ["zero-grad-before-step"]
    assert "momentum" in auditor.findings[0].message
    auditor, _ = run(zero_between_backward_and_step)
    assert "None" in auditor.findings[0].message


def test_findings_carry_step_and_count():
    auditor, _ = run(no_zero_grad)
    (finding,) = auditor.findings
    assert finding.step == 2, "step 1 is fine; step 2 reuses step 1's gradient"
    assert finding.count == N_MICRO - 1
    assert auditor.steps == N_MICRO and auditor.backward_passes == N_MICRO
    leftover, _ = run(accumulation_dropping_tail, k=K)
    assert leftover.findings[0].step is None and "2 backward pass" in leftover.findings[0].message


CLEAN = [
    (plain, {}),
    (plain_zeros, {}),
    (accumulation_with_tail, {"k": K}),
    (scheduler_per_window, {"k": K, "scheduler": True}),
    (clip_per_window, {"k": K}),
    (amp_loop, {"k": K, "scaler": True}),
    (multi_loss, {}),
    (logs_loss_item, {}),
]


@pytest.mark.parametrize(("loop", "options"), CLEAN, ids=[loop.__name__ for loop, _ in CLEAN])
def test_correct_loops_report_nothing_and_train_identically(loop, options):
    auditor, audited = run(loop, **options)
    assert auditor.findings == [], str(auditor)
    _, unaudited = run(loop, audit=False, **options)
    for a, b in zip(audited, unaudited, strict=True):
        assert torch.equal(a, b), "the auditor changed the trained weights"


@pytest.mark.parametrize("loop", [no_zero_grad, clip_per_micro_batch, logs_loss_tensor])
def test_auditor_does_not_change_results_of_buggy_loops_either(loop):
    _, audited = run(loop)
    _, unaudited = run(loop, audit=False)
    assert all(torch.equal(a, b) for a, b in zip(audited, unaudited, strict=True))


def gan_training(audit):
    torch.manual_seed(0)
    generator = nn.Linear(2, 3)
    discriminator = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    opt_g = torch.optim.Adam(generator.parameters(), lr=1e-2)
    opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-2)
    bce = nn.functional.binary_cross_entropy_with_logits
    with contextlib.ExitStack() as stack:
        auditors = []
        if audit:
            auditors = [
                stack.enter_context(LoopAuditor(generator, opt_g)),
                stack.enter_context(LoopAuditor(discriminator, opt_d)),
            ]
        for _ in range(6):
            real, fake = torch.randn(8, 3), generator(torch.randn(8, 2))
            opt_d.zero_grad()
            d_real, d_fake = discriminator(real), discriminator(fake.detach())
            loss_d = bce(d_real, torch.ones_like(d_real)) + bce(d_fake, torch.zeros_like(d_fake))
            loss_d.backward()
            opt_d.step()
            opt_g.zero_grad()
            d_on_fake = discriminator(fake)
            bce(d_on_fake, torch.ones_like(d_on_fake)).backward()
            opt_g.step()
    weights = [p.detach().clone() for p in [*generator.parameters(), *discriminator.parameters()]]
    return auditors, weights


def test_gan_with_two_audited_optimizers_reports_nothing_and_trains_identically():
    auditors, audited = gan_training(audit=True)
    assert [a.findings for a in auditors] == [[], []], [str(a) for a in auditors]
    assert all(a.steps == 6 for a in auditors)
    _, unaudited = gan_training(audit=False)
    assert all(torch.equal(a, b) for a, b in zip(audited, unaudited, strict=True))


def test_everything_is_restored_after_the_block_even_on_error():
    originals = (
        torch.autograd.backward,
        torch.nn.utils.clip_grad_norm_,
        torch.nn.utils.clip_grad_value_,
        torch.nn.utils.clip_grad.clip_grad_norm_,
    )
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, 1)
    scaler = torch.amp.GradScaler("cpu")
    with pytest.raises(KeyError), LoopAuditor(model, opt, scheduler=scheduler, scaler=scaler):
        raise KeyError("a bug in the user's loop")
    after = (
        torch.autograd.backward,
        torch.nn.utils.clip_grad_norm_,
        torch.nn.utils.clip_grad_value_,
        torch.nn.utils.clip_grad.clip_grad_norm_,
    )
    assert after == originals and patches.ACTIVE == []
    assert "step" not in vars(scheduler) and "step" not in vars(scaler)
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
    assert all(not p._backward_hooks and not p._post_accumulate_grad_hooks
               for p in model.parameters())  # fmt: skip


def test_an_auditor_cannot_be_entered_twice_at_once():
    model = make_model()
    auditor = LoopAuditor(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with auditor, pytest.raises(RuntimeError, match="already in use"), auditor:
        pass


def test_every_code_is_tested():
    # cross-network-leak needs two networks: test_audit_real_code.py::test_dcgan
    reported = {code for code, *_ in PAIRS} | {"params-not-in-optimizer", "cross-network-leak"}
    assert reported == set(CODES)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda m: (nn.ReLU(), torch.optim.SGD(m.parameters(), lr=0.1), 1), ValueError,
         "no parameters"),
        (lambda m: (m, torch.optim.SGD(make_model().parameters(), lr=0.1), 1), ValueError,
         "holds none of the model's parameters"),
        (lambda m: (m, torch.optim.SGD(m.parameters(), lr=0.1), 0), ValueError, "1 or more"),
        (lambda m: (m, torch.optim.SGD(m.parameters(), lr=0.1), -2), ValueError, "1 or more"),
        (lambda m: (m, torch.optim.SGD(m.parameters(), lr=0.1), 2.0), TypeError, "an int"),
        (lambda m: ("model", torch.optim.SGD(m.parameters(), lr=0.1), 1), TypeError, "Module"),
        (lambda m: (m, m.parameters(), 1), TypeError, "Optimizer"),
    ],
)  # fmt: skip
def test_misuse_is_refused_with_a_clear_error(make, error, match):
    model, opt, k = make(make_model())
    with pytest.raises(error, match=match):
        LoopAuditor(model, opt, accumulation_steps=k)


def test_scheduler_and_scaler_are_checked():
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    other = torch.optim.SGD(make_model().parameters(), lr=0.1)
    with pytest.raises(ValueError, match="another optimizer"):
        LoopAuditor(model, opt, scheduler=torch.optim.lr_scheduler.StepLR(other, 1))
    with pytest.raises(TypeError, match="GradScaler"):
        LoopAuditor(model, opt, scaler="scaler")


def test_the_readme_example_runs_and_finds_a_dropped_tail(capsys):
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "loop_auditor" / "README.md"
    section = readme.read_text(encoding="utf-8").split("## In Python: `LoopAuditor`", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def train_one_epoch(model, optimizer, loader):  # 10 micro-batches, k=4: the tail is dropped
        accumulation_dropping_tail(model, optimizer, {})

    namespace = {
        "model": model,
        "optimizer": optimizer,
        "scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1),
        "scaler": torch.amp.GradScaler("cpu", enabled=False),
        "epochs": 1,
        "loader": None,
        "train_one_epoch": train_one_epoch,
    }
    exec(compile(example, "README example", "exec"), namespace)
    assert capsys.readouterr().out.startswith("leftover-gradients (after the loop)")


# --------------------------------------------- cases found by review: bugs and correct loops
def zero_grad_every_micro_batch(model, opt, _):
    for i, batch in enumerate(batches(n=8)):
        opt.zero_grad()  # destroys the accumulation
        (loss_of(model, batch) / K).backward()
        if (i + 1) % K == 0:
            opt.step()


def forgot_backward_with_zeros(model, opt, _):
    for batch in batches():
        opt.zero_grad(set_to_none=False)
        loss_of(model, batch)
        opt.step()


def tails_zeroed_at_epoch_start(model, opt, _):
    for _epoch in range(2):
        opt.zero_grad()
        for i, batch in enumerate(batches()):
            (loss_of(model, batch) / K).backward()
            if (i + 1) % K == 0:
                opt.step()
                opt.zero_grad()
    opt.zero_grad()


def outputs_kept_under_scaler(model, opt, extras):
    outputs, scaler = [], extras["scaler"]
    for batch in batches():
        opt.zero_grad()
        out = model(batch[0])
        scaler.scale(nn.functional.mse_loss(out, batch[1]) / 2).backward()
        scaler.step(opt)
        scaler.update()
        outputs.append(out)  # keeps each graph


@pytest.mark.parametrize(
    ("code", "loop", "options"),
    [
        ("zero-grad-before-step", zero_grad_every_micro_batch, {"k": K}),
        ("step-without-grad", forgot_backward_with_zeros, {}),
        ("leftover-gradients", tails_zeroed_at_epoch_start, {"k": K}),
        ("graph-kept-alive", outputs_kept_under_scaler, {"scaler": True}),
    ],
)
def test_subtler_variants_of_the_bugs_are_caught(code, loop, options):
    auditor, _ = run(loop, **options)
    assert auditor.codes == [code], str(auditor)


def measure_norm_every_micro_batch(model, opt, _):
    opt.zero_grad()
    for i, batch in enumerate(batches(n=8)):
        (loss_of(model, batch) / K).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))  # only measures
        if (i + 1) % K == 0:
            opt.step()
            opt.zero_grad()


def loss_with_zero_gradient(model, opt, _):
    for i, (inputs, targets) in enumerate(batches()):
        opt.zero_grad()
        error = nn.functional.mse_loss(model(inputs), targets, reduction="none")
        mask = torch.zeros_like(error) if i == 3 else torch.ones_like(error)  # all padding
        ((error * mask).sum() / mask.sum().clamp(min=1)).backward()
        opt.step()


def per_task_gradients_then_backward(model, opt, _):
    for inputs, targets in batches():
        opt.zero_grad()
        out = model(inputs)
        loss_a, loss_b = nn.functional.mse_loss(out, targets), out.abs().mean()
        torch.autograd.grad(loss_a, list(model.parameters()), retain_graph=True)
        (loss_a + loss_b).backward()
        opt.step()


@pytest.mark.parametrize(
    "loop",
    [measure_norm_every_micro_batch, loss_with_zero_gradient, per_task_gradients_then_backward],
)
def test_correct_loops_that_look_odd_report_nothing(loop):
    auditor, _ = run(loop)  # accumulation_steps not declared
    assert auditor.findings == [], str(auditor)


def test_lbfgs_with_a_closure_reports_nothing():
    model = make_model()
    opt = torch.optim.LBFGS(model.parameters(), max_iter=4)
    with LoopAuditor(model, opt) as auditor:
        for batch in batches(n=3):

            def closure(batch=batch):
                opt.zero_grad()
                loss = loss_of(model, batch)
                loss.backward()
                return loss

            opt.step(closure)
    assert auditor.findings == [] and auditor.steps == 3


@pytest.mark.parametrize(
    "step", [lambda opt: opt.step(None), lambda opt: opt.step(closure=None)], ids=["None", "kw"]
)
def test_a_step_with_closure_none_is_checked_like_a_plain_step(step):
    """Accelerate's AcceleratedOptimizer.step() calls optimizer.step(None): not a closure."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with LoopAuditor(model, opt) as auditor:
        for batch in batches(n=3):
            loss_of(model, batch).backward()
            step(opt)  # no zero_grad(): every step after the first reuses old gradients
    assert auditor.codes == ["missing-zero-grad"]
    with LoopAuditor(model, opt) as clean:
        for batch in batches(n=3):
            opt.zero_grad()
            loss_of(model, batch).backward()
            step(opt)
    assert clean.findings == []


def test_one_model_split_between_two_audited_optimizers_reports_nothing():
    model = make_model()
    first = torch.optim.SGD(model[0].parameters(), lr=0.05)
    second = torch.optim.Adam(model[2].parameters(), lr=0.01)
    with LoopAuditor(model, first) as a, LoopAuditor(model, second) as b:
        for batch in batches():
            first.zero_grad()
            second.zero_grad()
            loss_of(model, batch).backward()
            first.step()
            second.step()
    assert a.findings == [] and b.findings == []


def test_scheduler_state_can_be_saved_inside_the_block():
    import io

    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, 1)
    with LoopAuditor(model, opt, scheduler=scheduler) as auditor:
        plain(model, opt, {})
        scheduler.step()
        torch.save({"scheduler": scheduler.state_dict(), "model": model}, io.BytesIO())
    assert auditor.findings == []


@pytest.mark.skipif(
    not hasattr(torch.nn.utils, "clip_grads_with_norm_"), reason="torch < 2.6 has no such API"
)
def test_clipping_with_a_precomputed_norm_is_watched_too():
    def clip_each(model, opt, _):
        opt.zero_grad()
        for batch in batches(n=4):
            (loss_of(model, batch) / K).backward()
            params = list(model.parameters())
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
            torch.nn.utils.clip_grads_with_norm_(params, 0.1, norm)
        opt.step()

    auditor, _ = run(clip_each, k=K)
    assert auditor.codes == ["clip-per-micro-batch"] and auditor.findings[0].count == 3
