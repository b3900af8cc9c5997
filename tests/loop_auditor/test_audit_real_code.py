"""The loop auditor on loops adapted line for line from well-known public training code: each
correct loop reports nothing, each classic bug in it is caught with its code, and correct
multi-pass patterns (GANs, WGAN-GP, MGDA, PCGrad, checkpointing, LBFGS) raise no false alarm.

Where each loop comes from is named in its docstring; the models are tiny and built here.
"""

import contextlib
import gc
import math

import pytest
import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from helpers.several_losses.multitask import pcgrad, task_gradients
from loop_auditor import LoopAuditor


def data(n=10, size=4, features=5, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, features, generator=generator),
             torch.randn(size, 1, generator=generator)) for _ in range(n)]  # fmt: skip


def mlp(seed=0, features=5):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, 8), nn.Tanh(), nn.Linear(8, 1))


# ------------------------------------------------------------------ nanoGPT
def nanogpt(model, optimizer, scaler, k=4, iters=3, clip_first=False, zero=True):
    """karpathy/nanoGPT train.py: loss / gradient_accumulation_steps, scaler.scale().backward()
    per micro-step, unscale_, clip, scaler.step, scaler.update, zero_grad(set_to_none=True);
    the learning rate set by hand in the param groups."""
    batches = iter(data(n=k * iters))
    for it in range(iters):
        for group in optimizer.param_groups:
            group["lr"] = 1e-3 * (1 + it) / iters
        for _ in range(k):
            x, y = next(batches)
            loss = F.mse_loss(model(x), y) / k
            scaler.scale(loss).backward()
        if clip_first:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.unscale_(optimizer)
        else:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        if zero:
            optimizer.zero_grad(set_to_none=True)


@pytest.mark.parametrize(
    ("options", "codes"),
    [
        ({}, []),
        ({"clip_first": True}, ["unscale-after-clip"]),
        ({"zero": False}, ["missing-zero-grad"]),
    ],
)
def test_nanogpt_loop(options, codes):
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    # The scaler is not passed: the auditor finds it through scaler.scale(loss).
    with LoopAuditor(model, optimizer, accumulation_steps=4) as audit:
        nanogpt(model, optimizer, scaler, **options)
    assert audit.codes == codes, str(audit)


# --------------------------------------------------------------------- timm
def timm_epoch(model, optimizer, loss_scaler, scheduler, batches, accum_steps, *, zero=True):
    """huggingface/pytorch-image-models train.py, train_one_epoch: need_update on the last
    batch or every accum_steps, the NativeScaler's __call__ (scale, backward, unscale_, clip,
    step, update) only when need_update, zero_grad after each update, the scheduler stepped
    per update (step_update)."""
    last_idx = len(batches) - 1
    num_updates = 0
    optimizer.zero_grad()
    for batch_idx, (x, y) in enumerate(batches):
        last_batch = batch_idx == last_idx
        need_update = last_batch or (batch_idx + 1) % accum_steps == 0
        loss = F.mse_loss(model(x), y) / accum_steps
        loss_scaler._scaler.scale(loss).backward()
        if need_update:
            loss_scaler._scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            loss_scaler._scaler.step(optimizer)
            loss_scaler._scaler.update()
        if not need_update:
            continue
        num_updates += 1
        if zero:
            optimizer.zero_grad()
        scheduler.step()


class NativeScaler:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cpu", init_scale=2.0**6)


def test_timm_epochs_with_a_short_last_window_report_nothing():
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    batches = data(n=10)
    with LoopAuditor(model, optimizer, accumulation_steps=4) as audit:
        for _ in range(2):  # windows of 4, 4, 2 each epoch
            timm_epoch(model, optimizer, NativeScaler(), scheduler, batches, accum_steps=4)
    assert audit.findings == [], str(audit)
    assert [n for _, n in audit._windows] == [4, 4, 2, 4, 4, 2]


def test_timm_without_zero_grad_is_caught():
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    with LoopAuditor(model, optimizer, accumulation_steps=4) as audit:
        timm_epoch(model, optimizer, NativeScaler(), scheduler, data(), 4, zero=False)
    assert audit.codes == ["missing-zero-grad"], str(audit)


# --------------------------------------------------------------- window length
def steps_after(model, optimizer, step_after, epochs=1, n=10, zero_at_epoch_start=False):
    """A loop that steps after the micro-batches ``step_after(i)`` says (i from 0)."""
    for _ in range(epochs):
        if zero_at_epoch_start:
            optimizer.zero_grad()
        for i, (x, y) in enumerate(data(n=n)):
            (F.mse_loss(model(x), y) / 4).backward()
            if step_after(i):
                optimizer.step()
                optimizer.zero_grad()


@pytest.mark.parametrize(
    ("step_after", "epochs", "sizes", "says"),
    [
        (lambda i: i % 4 == 0, 1, [1, 4, 4], "off-by-one"),  # the article's counter
        (lambda i: i in (1, 2, 3), 1, [2, 1, 1], "never a full window"),
        (lambda i: (i + 1) % 4 == 0, 2, [4, 4, 6, 4], "ran into the next one"),  # tail leaks
    ],
)
def test_window_length_reports_the_observed_windows(step_after, epochs, sizes, says):
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with LoopAuditor(model, optimizer, accumulation_steps=4) as audit:
        steps_after(model, optimizer, step_after, epochs=epochs)
    found = {f.code: f for f in audit.findings}
    assert "window-length" in found, str(audit)
    assert [n for _, n in audit._windows] == sizes
    message = found["window-length"].message
    assert says in message and ", ".join(map(str, sizes)) in message


def test_a_short_window_at_the_end_of_each_epoch_is_allowed():
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with LoopAuditor(model, optimizer, accumulation_steps=4) as audit:
        for _ in range(3):
            steps_after(model, optimizer, lambda i: (i + 1) % 4 == 0 or i == 9)
    assert audit.findings == [], str(audit)


def two_backward_calls_per_micro_batch(model, optimizer):
    """Two losses, one backward() each (notebook 04): windows of 8 passes for 4 micro-batches."""
    for start in range(0, 8, 4):
        for x, y in data(n=8)[start : start + 4]:
            out = model(x)
            (F.mse_loss(out, y) / 4).backward(retain_graph=True)
            (out.abs().mean() / 4).backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize(("declared", "codes"), [(None, []), (8, []), (4, ["window-length"])])
def test_accumulation_steps_counts_backward_passes(declared, codes):
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with LoopAuditor(model, optimizer, accumulation_steps=declared) as audit:
        two_backward_calls_per_micro_batch(model, optimizer)
    assert audit.codes == codes, str(audit)
    if codes:
        assert "declare the backward passes per window: accumulation_steps=8" in str(audit)


def test_stepping_every_two_windows_is_caught():
    """Declared 2, stepped every 4: a multiple of the declared window is no excuse."""
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with LoopAuditor(model, optimizer, accumulation_steps=2) as audit:
        steps_after(model, optimizer, lambda i: (i + 1) % 4 == 0, n=8)
    assert audit.codes == ["window-length"], str(audit)


# ------------------------------------------------------------ Accelerate
# Accelerate and Lightning are imported by the tests that use them, not by this module: only
# the pytest-xdist worker that runs those tests pays for the import (seconds), and a machine
# without them (the GPU suite's) still runs every other test here.


@pytest.fixture
def new_accelerator(tmp_path, monkeypatch):
    """Makes a real Accelerator(gradient_accumulation_steps=k) on the CPU, from a clean
    state (Accelerate keeps its state in singletons), and cleans up after the test."""
    accelerate = pytest.importorskip("accelerate")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    from accelerate.state import AcceleratorState, GradientState

    def reset():
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()

    def make(k):
        reset()
        return accelerate.Accelerator(gradient_accumulation_steps=k, cpu=True)

    yield make
    reset()


@pytest.fixture
def accelerator_parts(new_accelerator):
    """An Accelerator(gradient_accumulation_steps=4) and what prepare() returns."""
    accelerator = new_accelerator(4)
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 / (1 + s))
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(40, 5), torch.randn(40, 1)), batch_size=4
    )
    return accelerator, *accelerator.prepare(model, optimizer, loader, scheduler)


def accelerate_loop(accelerator, model, optimizer, loader, scheduler, bug=None, epochs=1):
    """accelerate examples/by_feature/gradient_accumulation.py and transformers
    run_clm_no_trainer.py: with accelerator.accumulate(model): forward, accelerator.backward,
    optimizer.step(), lr_scheduler.step(), optimizer.zero_grad()."""
    total = 0.0
    for _ in range(epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = F.mse_loss(model(x), y)
                if bug != "no backward":
                    accelerator.backward(loss)
                total += loss if bug == "total += loss" else loss.item()
                if bug == "clip every micro-batch":  # not under `if accelerator.sync_gradients`
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                elif accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                if bug == "zero_grad before step":
                    optimizer.zero_grad()
                optimizer.step()
                scheduler.step()
                if bug != "no zero_grad":
                    optimizer.zero_grad()


def test_accelerate_objects_are_accepted_as_they_are(accelerator_parts):
    _, model, optimizer, _, scheduler = accelerator_parts
    assert type(optimizer).__name__ == "AcceleratedOptimizer"
    assert type(scheduler).__name__ == "AcceleratedScheduler"
    audit = LoopAuditor(model, optimizer, scheduler=scheduler)
    assert audit.optimizer is optimizer.optimizer
    assert audit.accumulation_steps == 4  # read from the Accelerator


def test_accelerate_accumulate_loop_reports_nothing(accelerator_parts):
    accelerator, model, optimizer, loader, scheduler = accelerator_parts
    with LoopAuditor(model, optimizer, scheduler=scheduler) as audit:
        accelerate_loop(accelerator, model, optimizer, loader, scheduler, epochs=2)
    assert audit.findings == [], str(audit)
    assert audit.steps == 6 and [n for _, n in audit._windows] == [4, 4, 2] * 2


@pytest.mark.parametrize(
    ("bug", "code"),
    [
        ("no zero_grad", "missing-zero-grad"),
        ("zero_grad before step", "zero-grad-before-step"),
        ("clip every micro-batch", "clip-per-micro-batch"),
        ("no backward", "step-without-grad"),
        ("total += loss", "graph-kept-alive"),
    ],
)
def test_accelerate_accumulate_loop_bugs_are_caught(accelerator_parts, bug, code):
    accelerator, model, optimizer, loader, scheduler = accelerator_parts
    with LoopAuditor(model, optimizer) as audit:
        accelerate_loop(accelerator, model, optimizer, loader, scheduler, bug=bug, epochs=2)
    assert code in audit.codes, str(audit)


def test_accelerate_with_an_optimizer_over_part_of_the_model_is_caught(new_accelerator):
    accelerator = new_accelerator(2)
    model = mlp()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model[2].parameters(), lr=0.1))
    with LoopAuditor(model, optimizer) as audit:
        for x, y in data(n=4):
            with accelerator.accumulate(model):
                accelerator.backward(F.mse_loss(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
    assert audit.codes == ["params-not-in-optimizer"], str(audit)
    assert "0.weight, 0.bias" in audit.findings[0].message


def test_accelerate_without_accumulate_steps_every_micro_batch(accelerator_parts):
    """accelerator.backward divides by 4, but outside accumulate() every call steps."""
    accelerator, model, optimizer, loader, _ = accelerator_parts
    with LoopAuditor(model, optimizer) as audit:
        for x, y in loader:
            accelerator.backward(F.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
    assert audit.codes == ["window-length"], str(audit)
    assert "windows of 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 backward passes, never a full" in (
        audit.findings[0].message
    )


# ------------------------------------------------------------------ Lightning
def tiny_module(manual_without_zero_grad=False):
    """A LightningModule of mlp(); with ``manual_without_zero_grad``, a manual loop that
    forgot opt.zero_grad()."""
    lightning = pytest.importorskip("lightning")

    class TinyModule(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = mlp()
            self.manual = manual_without_zero_grad
            self.automatic_optimization = not manual_without_zero_grad

        def training_step(self, batch, _):
            x, y = batch
            loss = F.mse_loss(self.net(x), y)
            if self.manual:  # a manual loop that forgot opt.zero_grad()
                opt = self.optimizers()
                self.manual_backward(loss)
                opt.step()
                return None
            return loss

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2)
            return [optimizer], [{"scheduler": scheduler, "interval": "step"}]

    return TinyModule()


def fit(module, tmp_path, **trainer_options):
    import lightning

    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(40, 5), torch.randn(40, 1)), batch_size=4
    )
    trainer = lightning.Trainer(
        accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
        **trainer_options,
    )  # fmt: skip
    trainer.fit(module, loader)


@pytest.mark.filterwarnings("ignore")
def test_lightning_trainer_with_accumulation_reports_nothing(tmp_path):
    """Lightning builds the optimizer inside fit() and steps it with a closure: the
    AuditSession finds it; windows of 2 micro-batches (one of them inside the closure)."""
    from loop_auditor.session import AuditSession

    with AuditSession(accumulation_steps=2) as session:
        fit(tiny_module(), tmp_path, accumulate_grad_batches=2, gradient_clip_val=1.0)
    assert session.findings == [], str(session)
    (audit,) = session.auditors
    assert audit.steps == 10 and {n for _, n in audit._windows} == {2}


@pytest.mark.filterwarnings("ignore")
def test_lightning_manual_optimization_without_zero_grad_is_caught(tmp_path):
    from loop_auditor.session import AuditSession

    with AuditSession() as session:
        fit(tiny_module(manual_without_zero_grad=True), tmp_path)
    assert [f.code for f in session.findings] == ["missing-zero-grad"], str(session)


def test_a_lightning_optimizer_is_unwrapped():
    pytest.importorskip("lightning")
    from lightning.pytorch.core.optimizer import LightningOptimizer

    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert LoopAuditor(model, LightningOptimizer(optimizer)).optimizer is optimizer


# --------------------------------------------------------------------- GANs
def gan(seed=0):
    torch.manual_seed(seed)
    G = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 3))
    D = nn.Sequential(nn.Linear(3, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
    return G, D


def dcgan(
    G, D, opt_g, opt_d, detach=True, d_zero_after=False, g_zero_after=False, iters=6,
    g_zero=True, d_zero_between=False,
):  # fmt: skip
    """pytorch/examples dcgan/main.py: netD.zero_grad(); errD_real.backward();
    fake = netG(noise); errD_fake on netD(fake.detach()); optimizerD.step(); netG.zero_grad();
    errG on netD(fake); errG.backward(); optimizerG.step(). errG's backward also writes into
    D's .grad: D zeroes it at the next iteration, so it is no leak."""
    criterion = nn.BCEWithLogitsLoss()
    generator = torch.Generator().manual_seed(1)
    for _ in range(iters):
        real, noise = torch.randn(4, 3, generator=generator), torch.randn(4, 2, generator=generator)
        if not d_zero_after:
            D.zero_grad()
        criterion(D(real), torch.ones(4, 1)).backward()
        if d_zero_between:
            D.zero_grad()
        fake = G(noise)
        criterion(D(fake.detach() if detach else fake), torch.zeros(4, 1)).backward(
            retain_graph=not detach
        )
        opt_d.step()
        if d_zero_after:
            D.zero_grad()
        if g_zero and not g_zero_after:
            G.zero_grad()
        criterion(D(fake), torch.ones(4, 1)).backward()
        opt_g.step()
        if g_zero_after:
            G.zero_grad()


DETACH = "Detach this network's output where that loss uses it (D(fake.detach()))"
ZERO_FIRST = (
    "Zero this optimizer's gradients right before this network's own first backward(), not "
    "right after its step(): that loss's backward() comes in between. Or requires_grad_(False) "
    "on this network"
)


@pytest.mark.parametrize(
    ("options", "g_codes", "d_codes", "fix"),
    [
        ({}, [], [], None),
        ({"detach": False}, [], [], None),  # D's loss reaches G, and G zeroes it before its own
        # D's loss flows back into G through fake: detaching it is the fix
        ({"detach": False, "g_zero_after": True}, ["cross-network-leak"], [], DETACH),
        # netD.zero_grad() moved after optimizerD.step(), fake.detach() kept: G's loss, which
        # must go through D, stays in D's .grad; only zeroing before D's backward fixes it
        ({"d_zero_after": True}, [], ["cross-network-leak"], ZERO_FIRST),
    ],
)
def test_dcgan(options, g_codes, d_codes, fix):
    G, D = gan()
    opt_g, opt_d = (torch.optim.Adam(n.parameters(), lr=2e-4) for n in (G, D))
    with LoopAuditor(G, opt_g) as audit_g, LoopAuditor(D, opt_d) as audit_d:
        dcgan(G, D, opt_g, opt_d, **options)
    assert (audit_g.codes, audit_d.codes) == (g_codes, d_codes), f"{audit_g}\n{audit_d}"
    for finding in audit_g.findings + audit_d.findings:
        assert fix in finding.message
        # the fix that applies comes first, and a detach() the loop already has is not offered
        assert ("detach()" in finding.message) is (fix == DETACH), finding.message


@pytest.mark.parametrize(
    ("options", "label", "code", "says"),
    [
        ({"d_zero_after": True}, "optimizerD", "cross-network-leak", "optimizerG had already"),
        ({"g_zero": False}, "optimizerG", "missing-zero-grad", "after every step()"),
        ({"d_zero_between": True}, "optimizerD", "zero-grad-before-step", "between the losses"),
    ],
)
def test_dcgan_script_under_a_session_names_its_optimizers_and_no_accumulation(
    options, label, code, says
):
    """pytorch/examples dcgan/main.py run by the command: its optimizers are named as the
    script names them, and with no accumulation_steps given (D's windows have 2 backward
    passes), no finding quotes an accumulation count."""
    from loop_auditor.session import AuditSession

    netG, netD = gan()
    with AuditSession() as session:
        optimizerD = optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
        optimizerG = optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
        dcgan(netG, netD, optimizerG, optimizerD, **options)
    assert [a.label for a in session.auditors] == ["optimizerD", "optimizerG"]
    (finding,) = session.findings
    assert (finding.code, finding.optimizer) == (code, label), str(session)
    assert str(finding).startswith(f"{code} ({label}, step ") and says in finding.message
    assert "accumulation_steps" not in finding.message


def gradient_penalty(D, real, fake):
    """The WGAN-GP penalty (Gulrajani et al., igul222/improved_wgan_training, and its PyTorch
    ports): torch.autograd.grad of D at interpolates, create_graph=True."""
    alpha = torch.rand(real.size(0), 1)
    interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    out = D(interpolates)
    (grads,) = torch.autograd.grad(out, interpolates, torch.ones_like(out), create_graph=True)
    return 10 * ((grads.norm(2, dim=1) - 1) ** 2).mean()


def test_wgan_gp_with_n_critic_and_a_zero_gradient_bias_reports_nothing():
    """The critic's output bias gets exactly zero gradient every step (+1 from D_fake.mean(),
    -1 from D_real.mean()): a value-based auditor took that for a discarded micro-batch."""
    G, D = gan()
    opt_g = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.5, 0.9))
    opt_d = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.5, 0.9))
    one, mone = torch.tensor(1.0), torch.tensor(-1.0)
    generator = torch.Generator().manual_seed(2)
    bias_grads = []
    with LoopAuditor(G, opt_g) as audit_g, LoopAuditor(D, opt_d) as audit_d:
        for _ in range(3):
            for p in D.parameters():
                p.requires_grad = True
            for _ in range(5):  # n_critic
                real = torch.randn(8, 3, generator=generator)
                D.zero_grad()
                D(real).mean().backward(mone)
                with torch.no_grad():
                    fake = G(torch.randn(8, 2, generator=generator))
                D(fake).mean().backward(one)
                gradient_penalty(D, real, fake).backward()
                bias_grads.append(D[2].bias.grad.clone())
                opt_d.step()
            for p in D.parameters():
                p.requires_grad = False
            G.zero_grad()
            D(G(torch.randn(8, 2, generator=generator))).mean().backward(mone)
            opt_g.step()
    assert all(g.abs().max() < 1e-6 for g in bias_grads)
    assert audit_g.findings == [] and audit_d.findings == [], f"{audit_g}\n{audit_d}"
    assert {n for _, n in audit_d._windows} == {3} and audit_d.steps == 15


def test_a_parameter_with_exactly_zero_gradient_inside_a_window_is_fine():
    """set_to_none=False and one parameter that gets exactly 0 from the first micro-batch."""
    torch.manual_seed(0)
    a, b = nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(3))
    optimizer = torch.optim.SGD([a, b], lr=0.1)
    module = nn.Module()
    module.a, module.b = a, b
    with LoopAuditor(module, optimizer, accumulation_steps=4) as audit:
        for _ in range(3):
            for i in range(4):
                loss = (a * a).sum() + (b * b).sum() * (0.0 if i == 0 else 1.0)
                (loss / 4).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)
    assert audit.findings == [], str(audit)


# ------------------------------------------------- per-loss gradient inspection
def mgda_step(model, heads, optimizer, x, ys):
    """isl-org/MultiObjectiveOptimization train_multi_task.py: per task, zero_grad, backward,
    clone the shared representation's gradient; then zero_grad, the scaled sum, backward,
    step. The per-task backward passes are zeroed on purpose."""
    rep = model(x)
    rep_variable = rep.detach().requires_grad_(True)
    grads = []
    for head, y in zip(heads, ys, strict=True):
        optimizer.zero_grad()
        F.mse_loss(head(rep_variable), y).backward()
        grads.append(rep_variable.grad.clone())
        rep_variable.grad.zero_()
    scales = [0.5, 0.5]  # the min-norm solver's answer, here fixed
    optimizer.zero_grad()
    rep = model(x)
    sum(s * F.mse_loss(h(rep), y) for s, h, y in zip(scales, heads, ys, strict=True)).backward()
    optimizer.step()


def mgda_parts():
    torch.manual_seed(0)
    model, heads = nn.Linear(5, 4), nn.ModuleList([nn.Linear(4, 1), nn.Linear(4, 1)])
    params = [*model.parameters(), *heads.parameters()]
    return model, heads, nn.ModuleList([model, heads]), torch.optim.SGD(params, lr=0.05)


def mgda_batches():
    generator = torch.Generator().manual_seed(3)
    return [
        (torch.randn(4, 5, generator=generator), [torch.randn(4, 1, generator=generator)] * 2)
        for _ in range(4)
    ]


def test_mgda_unannounced_is_reported_with_the_way_to_declare_it():
    model, heads, whole, optimizer = mgda_parts()
    with LoopAuditor(whole, optimizer) as audit:
        for x, ys in mgda_batches():
            mgda_step(model, heads, optimizer, x, ys)
    assert audit.codes == ["zero-grad-before-step"], str(audit)
    assert "allow=['zero-grad-before-step']" in audit.findings[0].message
    assert "audit.allow('zero-grad-before-step')" in audit.findings[0].message


def test_mgda_declared_with_allow_reports_nothing():
    model, heads, whole, optimizer = mgda_parts()
    with LoopAuditor(whole, optimizer, allow=["zero-grad-before-step"]) as audit:
        for x, ys in mgda_batches():
            mgda_step(model, heads, optimizer, x, ys)
    assert audit.findings == [], str(audit)


def test_mgda_declared_around_the_inspection_only_reports_nothing_and_still_checks_the_rest():
    model, heads, whole, optimizer = mgda_parts()
    with LoopAuditor(whole, optimizer) as audit:
        for x, ys in mgda_batches():
            with audit.allow("zero-grad-before-step"):
                mgda_step(model, heads, optimizer, x, ys)
        for x, ys in mgda_batches():  # the same steps outside the scope are reported
            mgda_step(model, heads, optimizer, x, ys)
    assert audit.codes == ["zero-grad-before-step"], str(audit)
    assert audit.findings[0].step == 5


def test_the_course_pcgrad_reports_nothing():
    """helpers.several_losses.multitask: task_gradients by torch.autograd.grad, pcgrad, written into
    .grad."""
    model, heads, whole, optimizer = mgda_parts()
    shared = list(model.parameters())
    with LoopAuditor(whole, optimizer) as audit:
        for x, ys in mgda_batches():
            optimizer.zero_grad()
            rep = model(x)
            losses = [F.mse_loss(h(rep), y) for h, y in zip(heads, ys, strict=True)]
            combined = pcgrad(task_gradients(losses, shared))
            for p, g in zip(shared, combined, strict=True):
                p.grad = g
            sum(losses).backward(inputs=list(heads.parameters()))  # the heads as usual
            optimizer.step()
    assert audit.findings == [], str(audit)


# -------------------------------------------------------------- checkpointing
class Checkpointed(nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(5, 8), nn.Linear(8, 1)
        self.reentrant = reentrant

    def forward(self, x):
        h = checkpoint(lambda t: torch.tanh(self.a(t)), x, use_reentrant=self.reentrant)
        return self.b(h)


@pytest.mark.parametrize("reentrant", [True, False])
def test_activation_checkpointing_counts_one_pass_per_backward(reentrant):
    model = Checkpointed(reentrant)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with LoopAuditor(model, optimizer, accumulation_steps=4) as audit:
        for start in range(0, 8, 4):
            for x, y in data(n=8)[start : start + 4]:
                x.requires_grad_(reentrant)  # the reentrant variant needs an input that does
                (F.mse_loss(model(x), y) / 4).backward()
            optimizer.step()
            optimizer.zero_grad()
    assert audit.findings == [], str(audit)
    assert audit.backward_passes == 8 and [n for _, n in audit._windows] == [4, 4]


# ------------------------------------------------------------------------- DDP
@pytest.mark.parametrize("bucket_view", [False, True])
@pytest.mark.parametrize("set_to_none", [True, False])
def test_ddp_no_sync_accumulation_reports_nothing_and_reads_nothing(
    tmp_path, bucket_view, set_to_none
):
    """DDP writes the all-reduced gradient into .grad at the end of backward (or makes .grad
    a view of its bucket): that write belongs to the backward pass, not to the loop."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        ddp = DDP(mlp(), gradient_as_bucket_view=bucket_view)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
        with LoopAuditor(ddp, optimizer, accumulation_steps=4) as audit:
            for start in range(0, 8, 4):
                for i, (x, y) in enumerate(data(n=8)[start : start + 4]):
                    with ddp.no_sync() if i < 3 else contextlib.nullcontext():
                        (F.mse_loss(ddp(x), y) / 4).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=set_to_none)
        report = str(audit)
        findings, windows, host_reads = audit.findings, audit._windows, audit.host_reads
    finally:
        # DDP's reducer (held by the model, the optimizer and the auditor) is freed while its
        # process group is still registered, not at the function's end after the group is
        # destroyed: gloo's group then ends its threads in destroy_process_group. (Freed at the
        # end, it once hung in the group's destructor, joining a thread, in a pytest-xdist
        # worker.)
        ddp = optimizer = audit = None
        gc.collect()
        dist.destroy_process_group()
    assert findings == [], report
    assert [n for _, n in windows] == [4, 4]
    # With bucket views DDP re-points .grad into its rebuilt buckets once, at the second
    # window's first forward: the auditor reads those gradients once to see they were kept.
    assert host_reads == (1 if bucket_view and not set_to_none else 0)


# ------------------------------------------------------------------------ LBFGS
def lbfgs_loop(zero="first", backward=True):
    """pytorch/examples time_sequence_prediction/train.py: optimizer.step(closure) with a
    closure that zeroes, computes the loss and backpropagates; LBFGS calls it several times.
    ``zero``: where optimizer.zero_grad() is, "first" in the closure (the example's place),
    "after backward" in it, "before step" outside it, or None nowhere."""
    model = mlp()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
    x, y = data(n=1)[0]

    def closure():
        if zero == "first":
            optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        if backward:
            loss.backward()
        if zero == "after backward":
            optimizer.zero_grad()
        return loss

    with LoopAuditor(model, optimizer) as audit:
        for _ in range(3):
            if zero == "before step":
                optimizer.zero_grad()
            optimizer.step(closure)
    return audit


IN_CLOSURE = "call optimizer.zero_grad() inside the closure, before loss.backward()"


@pytest.mark.parametrize(
    ("options", "code", "says"),
    [
        ({}, None, None),
        # LBFGS calls the closure up to max_iter times in one step(): zeroing once per step()
        # is not enough, the fix is inside the closure
        ({"zero": None}, "missing-zero-grad", IN_CLOSURE),
        ({"zero": "before step"}, "missing-zero-grad", IN_CLOSURE),
        ({"zero": "after backward"}, "zero-grad-before-step", "at the start of the closure"),
        ({"backward": False}, "step-without-grad", "loss.backward() inside the closure"),
    ],
)
def test_lbfgs_closure_is_audited_on_what_each_call_produced(options, code, says):
    audit = lbfgs_loop(**options)
    assert audit.codes == ([code] if code else []), str(audit)
    if code:
        assert says in audit.findings[0].message
        assert "after every step()" not in audit.findings[0].message


# ------------------------------------------------------- scale after accumulating
def test_torchtune_scale_after_accumulating_reports_nothing_with_one_read_per_step():
    """pytorch/torchtune recipes/full_finetune_single_device.py: backward the summed token
    loss, count tokens, then training.scale_grads(model, 1 / num_tokens) (p.grad *= scaler)
    before clipping, step, zero_grad(set_to_none=True), lr_scheduler.step()."""
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    generator = torch.Generator().manual_seed(4)
    with LoopAuditor(model, optimizer, accumulation_steps=4) as audit:
        num_tokens = 0
        for idx, (x, y) in enumerate(data(n=12)):
            mask = torch.rand(4, 1, generator=generator) > 0.3
            num_tokens += int(mask.sum())
            (F.mse_loss(model(x), y, reduction="none") * mask).sum().backward()
            if (idx + 1) % 4 == 0:
                for p in model.parameters():
                    p.grad *= 1 / max(num_tokens, 1)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                scheduler.step()
                num_tokens = 0
    assert audit.findings == [], str(audit)
    assert audit.host_reads <= audit.steps == 3


# --------------------------------------------------------------------- cost
def count_host_reads(monkeypatch):
    """Count every Python-level read of a tensor's value (item, tolist, bool)."""
    calls = {"n": 0}
    for name in ("item", "tolist", "__bool__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *a, _original=original, **kw):
            calls["n"] += 1
            return _original(self, *a, **kw)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return calls


@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("manual_zero", [False, True])
def test_at_most_one_host_read_per_step(monkeypatch, set_to_none, manual_zero):
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(6, 6) for _ in range(10)])  # 20 parameter tensors
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = [torch.randn(3, 6) for _ in range(12)]
    calls = count_host_reads(monkeypatch)

    def loop():
        for i, x in enumerate(batches):
            (model(x).square().mean() / 4).backward()
            if (i + 1) % 4 == 0:
                optimizer.step()
                if manual_zero:  # p.grad.zero_() by hand: the auditor must look at the value
                    for p in model.parameters():
                        p.grad.zero_()
                else:
                    optimizer.zero_grad(set_to_none=set_to_none)

    loop()
    unaudited = calls["n"]  # what the loop and torch read by themselves
    optimizer.zero_grad(set_to_none=True)
    with LoopAuditor(model, optimizer, accumulation_steps=4) as audit:
        loop()
    assert audit.findings == [], str(audit)
    assert calls["n"] - 2 * unaudited == audit.host_reads <= audit.steps == 3
    if not manual_zero:
        assert audit.host_reads == 0


def test_a_manual_zero_between_backward_and_step_is_still_caught():
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with LoopAuditor(model, optimizer) as audit:
        for x, y in data(n=3):
            F.mse_loss(model(x), y).backward()
            for p in model.parameters():
                p.grad.zero_()
            optimizer.step()
    assert audit.codes == ["zero-grad-before-step"], str(audit)


def test_weights_are_bit_for_bit_the_same_under_the_auditor():
    results = []
    for audited in (False, True):
        model = mlp()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
        if audited:
            with LoopAuditor(model, optimizer, accumulation_steps=4):
                nanogpt(model, optimizer, scaler)
        else:
            nanogpt(model, optimizer, scaler)
        results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(*results)
    assert not math.isnan(results[0].sum().item())


# ------------------------------------------------- cases found by a practitioner's review
def test_dcgan_reports_nothing_whichever_auditor_is_entered_first():
    G, D = gan()
    opt_g, opt_d = (torch.optim.Adam(n.parameters(), lr=2e-4) for n in (G, D))
    with LoopAuditor(D, opt_d, name="D") as audit_d, LoopAuditor(G, opt_g, name="G") as audit_g:
        dcgan(G, D, opt_g, opt_d)
    assert audit_d.findings == [] and audit_g.findings == [], f"{audit_d}\n{audit_g}"


@pytest.mark.parametrize("audited", ["G", "D"])
def test_dcgan_with_one_network_audited_reports_nothing(audited):
    """The other optimizer steps unaudited: the passes it stepped after are its business."""
    G, D = gan()
    opt_g, opt_d = (torch.optim.Adam(n.parameters(), lr=2e-4) for n in (G, D))
    net, opt = (G, opt_g) if audited == "G" else (D, opt_d)
    with LoopAuditor(net, opt) as audit:
        dcgan(G, D, opt_g, opt_d)
    assert audit.findings == [], str(audit)


def test_an_optimizer_rebuilt_mid_run_under_the_session_reports_nothing():
    from loop_auditor.session import AuditSession

    model = mlp()
    with AuditSession() as session:
        head = torch.optim.SGD(model[2].parameters(), lr=0.05)
        for x, y in data(n=3):
            head.zero_grad()
            F.mse_loss(model(x), y).backward()
            head.step()
        whole = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for x, y in data(n=3):
            whole.zero_grad()
            F.mse_loss(model(x), y).backward()
            whole.step()
    assert session.findings == [], str(session)
    assert [a.steps for a in session.auditors] == [3, 3]


def test_a_session_can_be_reused_but_not_nested():
    from loop_auditor.session import AuditSession

    session = AuditSession()
    for _ in range(2):
        with session:
            model = mlp()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            F.mse_loss(model(data(n=1)[0][0]), data(n=1)[0][1]).backward()
            optimizer.step()
        assert len(session.auditors) == 1 and session.findings == []
    init = torch.optim.Optimizer.__init__
    with session, pytest.raises(RuntimeError, match="already in use"), session:
        pass
    assert torch.optim.Optimizer.__init__ is init


@pytest.mark.parametrize(
    ("make", "per_micro_batch", "codes"),
    [
        (lambda o: torch.optim.lr_scheduler.ChainedScheduler(
            [torch.optim.lr_scheduler.StepLR(o, 2), torch.optim.lr_scheduler.ExponentialLR(o, 0.9)]
        ), False, []),
        (lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 3), True,
         ["scheduler-per-micro-batch"]),
        (lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 3), False, []),
        (lambda o: torch.optim.lr_scheduler.SequentialLR(
            o, [torch.optim.lr_scheduler.ConstantLR(o), torch.optim.lr_scheduler.StepLR(o, 2)], [2]
        ), False, []),
    ],
)  # fmt: skip
def test_schedulers_with_a_step_of_their_own_are_counted_once(make, per_micro_batch, codes):
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = make(optimizer)
    with LoopAuditor(model, optimizer, accumulation_steps=2) as audit:
        for i, (x, y) in enumerate(data(n=8)):
            (F.mse_loss(model(x), y) / 2).backward()
            if per_micro_batch:
                scheduler.step()
            if i % 2:
                optimizer.step()
                optimizer.zero_grad()
                if not per_micro_batch:
                    scheduler.step()
    assert audit.codes == codes, str(audit)


def mnist_with_accumulation(model, optimizer, scheduler, k=4, epochs=2, per_epoch=True):
    """pytorch/examples mnist/main.py: scheduler = StepLR(optimizer, step_size=1,
    gamma=args.gamma), stepped once per epoch after train(); here train() accumulates k
    micro-batches per optimizer step. ``per_epoch`` False: scheduler.step() moved into the
    micro-batch loop."""
    for _ in range(epochs):
        for batch_idx, (x, y) in enumerate(data(n=12)):
            (F.mse_loss(model(x), y) / k).backward()
            if (batch_idx + 1) % k == 0:
                optimizer.step()
                optimizer.zero_grad()
            if not per_epoch:
                scheduler.step()
        if per_epoch:
            scheduler.step()


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler")
@pytest.mark.parametrize("per_epoch", [True, False])
def test_a_per_epoch_step_lr_moved_into_the_micro_batch_loop_is_told_both_places(per_epoch):
    """The learning rate decays 12 times per epoch instead of once: "once, right after
    optimizer.step()" alone would still decay it 3 times per epoch."""
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    with LoopAuditor(model, optimizer, accumulation_steps=4) as audit:
        mnist_with_accumulation(model, optimizer, scheduler, per_epoch=per_epoch)
    if per_epoch:
        assert audit.findings == [], str(audit)
        return
    (finding,) = audit.findings
    assert finding.code == "scheduler-per-micro-batch" and finding.step == 1
    assert finding.message.startswith("scheduler.step() (StepLR) ran 3 times"), finding.message
    assert "once per epoch, after the epoch's loop, if it is defined in epochs" in finding.message
    assert "right after each optimizer.step(), if it is defined in optimizer steps" in (
        finding.message
    )


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler")
def test_a_session_names_the_scheduler_and_the_optimizer_the_script_holds():
    """An optimizer built before the session is adopted at its first step, named by the
    variable that holds it; a scheduler by the variable whose step() the loop calls."""
    from loop_auditor.session import AuditSession

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lr_schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    with AuditSession(accumulation_steps=4) as session:
        mnist_with_accumulation(model, opt, lr_schedule, per_epoch=False)
    (finding,) = session.findings
    assert finding.optimizer == "optimizer" and finding.step == 2  # its first window unseen
    assert finding.message.startswith("scheduler.step() (StepLR) ran 4 times"), str(finding)


def make_sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)


class Trainer:
    def __init__(self, model):
        self.opt_d: torch.optim.Optimizer = torch.optim.Adam(model.parameters())


def test_a_session_names_optimizers_built_in_a_method_or_returned_by_a_function():
    from loop_auditor.session import AuditSession

    model = mlp()
    with AuditSession() as session:
        Trainer(model)
        opt_g = make_sgd(model)  # noqa: F841
    assert [a.label for a in session.auditors] == ["self.opt_d", "opt_g"]


def test_a_session_names_optimizers_it_cannot_name_by_order_and_class():
    """Optimizers built in a list comprehension have no variable of their own, nor has code
    without a source file; the same name given twice (rebuilt each epoch) gets its count."""
    from loop_auditor.session import AuditSession

    model = mlp()
    with AuditSession() as session:
        [torch.optim.SGD(layer.parameters(), lr=0.1) for layer in (model[0], model[2])]
        exec("unseen = torch.optim.SGD(model.parameters())", {"torch": torch, "model": model})
        for _ in range(2):
            optimizer = torch.optim.Adam(model.parameters())  # noqa: F841
    assert [a.label for a in session.auditors] == [
        "optimizer 1 (SGD)", "optimizer 2 (SGD)", "optimizer 3 (SGD)", "optimizer",
        "optimizer #2",
    ]  # fmt: skip


def test_a_scaled_loss_divided_afterwards_is_still_known_as_scaled():
    """(scaler.scale(loss) / k).backward(): clipping before unscale_ is caught, and the
    auditor was not told about the scaler."""
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    with LoopAuditor(model, optimizer, accumulation_steps=2) as audit:
        for i, (x, y) in enumerate(data(n=4)):
            (scaler.scale(F.mse_loss(model(x), y)) / 2).backward()
            if i % 2:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
    assert audit.codes == ["unscale-after-clip"], str(audit)


def test_gradients_assigned_by_the_loop_replace_the_old_ones():
    """torch.autograd.grad, then p.grad = g and step, with no zero_grad: nothing is stale."""
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with LoopAuditor(model, optimizer) as audit:
        for x, y in data(n=5):
            grads = torch.autograd.grad(F.mse_loss(model(x), y), list(model.parameters()))
            for p, g in zip(model.parameters(), grads, strict=True):
                p.grad = g
            optimizer.step()
    assert audit.findings == [], str(audit)


def test_a_double_step_is_a_step_without_a_backward():
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with LoopAuditor(model, optimizer) as audit:
        for x, y in data(n=3):
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.step()  # the bug
    assert audit.codes == ["step-without-grad"], str(audit)
    assert "a step() called twice" in audit.findings[0].message


def test_a_split_model_with_one_audited_optimizer_finds_no_outside_parameters():
    model = mlp()
    first = torch.optim.SGD(model[0].parameters(), lr=0.05)
    second = torch.optim.SGD(model[2].parameters(), lr=0.05)
    with LoopAuditor(model, first) as audit:
        for x, y in data(n=3):
            first.zero_grad()
            second.zero_grad()
            F.mse_loss(model(x), y).backward()
            first.step()
            second.step()
    assert audit.findings == [], str(audit)


def test_an_error_inside_the_block_is_not_reported_as_a_dropped_tail():
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    audit = LoopAuditor(model, optimizer, accumulation_steps=4)
    with pytest.raises(KeyError), audit:
        for x, y in data(n=6):
            (F.mse_loss(model(x), y) / 4).backward()
        raise KeyError("the loop failed")
    assert audit.findings == [], str(audit)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda a: a.allow(["zero-grad-before-step"]), TypeError, "code names"),
        (lambda a: LoopAuditor(a.model, a.optimizer, allow=[["x"]]), TypeError, "code names"),
    ],
)
def test_codes_given_as_lists_are_refused_with_the_right_form(make, error, match):
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with LoopAuditor(model, optimizer) as audit, pytest.raises(error, match=match):
        with make(audit):
            pass


def test_allow_outside_the_block_says_where_it_goes():
    model = mlp()
    audit = LoopAuditor(model, torch.optim.SGD(model.parameters(), lr=0.05))
    with (
        pytest.raises(RuntimeError, match="inside the auditor's block"),
        audit.allow("zero-grad-before-step"),
    ):
        pass


def test_two_optimizers_on_different_schedules_look_like_a_leak_until_declared():
    """The README's stated limit: one optimizer steps every micro-batch, the other every 4,
    over the same backward passes."""

    def train(allow):
        model = mlp()
        every, window = (torch.optim.SGD(m.parameters(), lr=0.05) for m in (model[0], model[2]))
        with LoopAuditor(model[2], window, accumulation_steps=4, allow=allow) as audit, \
                LoopAuditor(model[0], every):  # fmt: skip
            for i, (x, y) in enumerate(data(n=8)):
                (F.mse_loss(model(x), y) / 4).backward()
                every.step()
                every.zero_grad()
                if (i + 1) % 4 == 0:
                    window.step()
                    window.zero_grad()
        return audit.codes

    assert train(allow=()) == ["cross-network-leak"]
    assert train(allow=["cross-network-leak"]) == []
