"""``params-not-in-optimizer`` without the model: the command and :class:`AuditSession` report
every ``nn.Parameter`` that received a gradient in ``backward()`` and that no optimizer holds
at the end, named as its model names it. Frozen parameters, parameters added later with
``add_param_group()``, a second optimizer's parameters and tensors that are not parameters stay
silent. The command runs in this process, as its own tests run it (test_audit_command.py); the
other cases run a session in this process."""

import contextlib
import gc
import inspect
from pathlib import Path

import pytest
import torch
from test_audit_command import audit_in_process
from torch import nn
from torch.nn import functional as F
from torch.nn.modules import module as torch_module

from loop_auditor import patches
from loop_auditor.session import AuditSession

ROOT = Path(__file__).resolve().parents[2]


class Net(nn.Module):
    """pytorch/examples mnist/main.py (its ``super(Net, self)`` as ``super()``)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def train_mnist(model, optimizer, steps=2):
    """mnist/main.py's train(), on two random images a step."""
    generator = torch.Generator().manual_seed(1)
    model.train()
    for _ in range(steps):
        data = torch.randn(2, 1, 28, 28, generator=generator)
        target = torch.randint(0, 10, (2,), generator=generator)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()


MNIST_SCRIPT = f"""
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

{inspect.getsource(Net)}

{inspect.getsource(train_mnist)}

torch.manual_seed(0)
model = Net()
# the optimizer over the first three layers only: fc2 is left out
params = [*model.conv1.parameters(), *model.conv2.parameters(), *model.fc1.parameters()]
optimizer = optim.Adadelta(params, lr=1.0)
train_mnist(model, optimizer)
"""

LEFT_OUT_FC2 = (
    "params-not-in-optimizer (optimizer, step 1): 2 parameter(s) of the model received "
    "gradients but belong to no param group of the optimizer, so step() never updates them: "
    "fc2.weight, fc2.bias."
)


def test_the_command_names_the_layer_the_optimizer_left_out(tmp_path):
    """``python -m loop_auditor train.py``, in this process (the command's own tests start it
    as a real process, once each way)."""
    (tmp_path / "train.py").write_text(MNIST_SCRIPT)
    done = audit_in_process("train.py", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "loop auditor: 1 finding(s) in train.py (1 optimizer, 2 steps):" in done.stderr
    assert LEFT_OUT_FC2 in done.stderr
    assert "conv1" not in done.stderr and "fc1" not in done.stderr


def session_run(train, **options):
    """``train()`` inside an :class:`AuditSession`; checks that the session leaves nothing
    behind: ``nn.Parameter``'s constructor, torch's registration hooks, no watcher, and no
    hook on the parameters it returns."""
    new = nn.Parameter.__dict__["__new__"]
    registration = dict(torch_module._global_parameter_registration_hooks)
    with AuditSession(**options) as session:
        params = train()
    assert nn.Parameter.__dict__["__new__"] is new
    assert dict(torch_module._global_parameter_registration_hooks) == registration
    assert patches.WATCHERS == [] and patches.ACTIVE == []
    assert not any(p._post_accumulate_grad_hooks for p in params or ())
    return session


def test_the_whole_mnist_model_in_the_optimizer_is_silent():
    def train():
        model = Net()
        train_mnist(model, torch.optim.Adadelta(model.parameters(), lr=1.0), steps=1)
        return list(model.parameters())

    session = session_run(train)
    assert session.findings == [], str(session)


# ------------------------------------------------------------------- fine-tuning
class FineTuned(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh())
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.backbone(x))


def data(n=3, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 5, generator=generator), torch.randn(4, 1, generator=generator))
            for _ in range(n)]  # fmt: skip


def fine_tune(add_param_group, unfreeze_at=1, epochs=3):
    """The head alone first, the backbone frozen; from epoch ``unfreeze_at`` on the backbone
    is unfrozen and (``add_param_group``) given to the optimizer with a smaller rate."""
    model = FineTuned()
    model.backbone.requires_grad_(False)
    optimizer = torch.optim.AdamW(model.head.parameters(), lr=1e-3)
    for epoch in range(epochs):
        if epoch == unfreeze_at:
            model.backbone.requires_grad_(True)
            if add_param_group:
                optimizer.add_param_group({"params": model.backbone.parameters(), "lr": 1e-4})
        for x, y in data():
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
    return list(model.parameters())


def test_a_backbone_unfrozen_and_added_as_a_param_group_is_silent():
    session = session_run(lambda: fine_tune(add_param_group=True))
    assert session.findings == [], str(session)


def test_a_backbone_unfrozen_without_add_param_group_is_reported_from_that_epoch():
    session = session_run(lambda: fine_tune(add_param_group=False))
    assert [f.code for f in session.findings] == ["params-not-in-optimizer"], str(session)
    finding = session.findings[0]
    assert (finding.optimizer, finding.step) == ("optimizer", 4)  # epoch 1's first step
    assert "4 parameter(s) of the model" in finding.message
    assert "backbone.0.weight, backbone.0.bias, backbone.2.weight, backbone.2.bias." in (
        finding.message
    )


def test_a_backbone_frozen_throughout_is_silent():
    session = session_run(lambda: fine_tune(add_param_group=False, unfreeze_at=None))
    assert session.findings == [], str(session)


def test_an_optimizer_that_holds_every_trainable_parameter_leaves_no_hook_on_them():
    """The cheap path: parameters an optimizer holds are let go when it is built."""
    seen = []

    def train():
        model = FineTuned()
        model.backbone.requires_grad_(False)
        optimizer = torch.optim.SGD(model.head.parameters(), lr=0.1)
        for x, y in data(n=2):
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            seen.append([len(p._post_accumulate_grad_hooks or ()) for p in model.parameters()])
            optimizer.step()
        return list(model.parameters())

    session = session_run(train)
    assert session.findings == []
    # the auditor's own post-accumulate hook on the head; none on the frozen backbone
    assert seen == [[0] * 4 + [1] * 2] * 2


def test_a_layer_added_to_the_optimizer_later_counts_as_held():
    """The head trained alone at first, then the whole model in a second optimizer."""

    def train():
        model = FineTuned()
        head = torch.optim.SGD(model.head.parameters(), lr=0.05)
        for x, y in data():
            head.zero_grad()
            F.mse_loss(model(x), y).backward()
            head.step()
        whole = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for x, y in data():
            whole.zero_grad()
            F.mse_loss(model(x), y).backward()
            whole.step()

    assert session_run(train).findings == []


def test_parameters_an_optimizer_was_built_over_stay_held_when_it_gets_master_copies():
    """fp32 master weights (apex's O2, DeepSpeed): the optimizer is built over the model, then
    its param group holds fp32 copies; the model's bf16 parameters still receive the
    gradients, copied to the masters before each step."""

    def train():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1)).to(torch.bfloat16)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        masters = [p.detach().float().requires_grad_(True) for p in model.parameters()]
        optimizer.param_groups[0]["params"] = masters
        for x, y in data():
            model.zero_grad()
            F.mse_loss(model(x.bfloat16()).float(), y).backward()
            for master, p in zip(masters, model.parameters(), strict=True):
                master.grad = p.grad.float()
            optimizer.step()
            with torch.no_grad():
                for master, p in zip(masters, model.parameters(), strict=True):
                    p.copy_(master)
        return list(model.parameters())

    session = session_run(train)
    assert session.findings == [], str(session)


# --------------------------------------------------------------- two optimizers
def gan_step(G, D, optimizerG, optimizerD, criterion, generator):
    """pytorch/examples dcgan/main.py, one iteration."""
    real, noise = torch.randn(4, 3, generator=generator), torch.randn(4, 2, generator=generator)
    D.zero_grad()
    criterion(D(real), torch.ones(4, 1)).backward()
    fake = G(noise)
    criterion(D(fake.detach()), torch.zeros(4, 1)).backward()
    optimizerD.step()
    G.zero_grad()
    criterion(D(fake), torch.ones(4, 1)).backward()  # also writes into D's .grad
    optimizerG.step()


@pytest.mark.parametrize("d_left_out", [False, True])
def test_a_gan_with_an_optimizer_per_network(d_left_out):
    """G's loss gives D's parameters gradients too: D's optimizer holds them. A layer of D
    left out of optimizerD is reported to optimizerD, named as D names it."""

    def train():
        torch.manual_seed(0)
        netG = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 3))
        netD = nn.Sequential(nn.Linear(3, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
        optimizerD = torch.optim.Adam(
            netD[0].parameters() if d_left_out else netD.parameters(), lr=2e-4
        )
        optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4)
        generator = torch.Generator().manual_seed(1)
        for _ in range(3):
            gan_step(netG, netD, optimizerG, optimizerD, nn.BCEWithLogitsLoss(), generator)

    session = session_run(train)
    if not d_left_out:
        assert session.findings == [], str(session)
        return
    assert [(f.code, f.optimizer, f.step) for f in session.findings] == [
        ("params-not-in-optimizer", "optimizerD", 1)
    ], str(session)
    assert "so step() never updates them: 2.weight, 2.bias." in session.findings[0].message


# ------------------------------------------------------------ not left out
def test_tensors_that_are_not_parameters_and_gradients_not_in_grad_are_silent():
    """An input with requires_grad, an adversarial perturbation (leaves, not parameters), and
    a parameter outside the optimizer whose gradient torch.autograd.grad returns (no .grad)."""

    def train():
        torch.manual_seed(0)
        model = nn.Linear(5, 1)
        scale = nn.Parameter(torch.ones(1))  # in no optimizer: only autograd.grad reads it
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in data():
            x = x.clone().requires_grad_(True)
            delta = torch.zeros_like(x, requires_grad=True)
            optimizer.zero_grad()
            F.mse_loss(model(x + delta), y).backward()
            sensitivities.append(torch.autograd.grad(F.mse_loss(model(x) * scale, y), scale))
            optimizer.step()
        return [*model.parameters(), scale]

    sensitivities = []
    session = session_run(train)
    assert session.findings == [], str(session)
    assert len(sensitivities) == 3


def test_a_loop_without_an_optimizer_reports_no_left_out_parameters():
    """Plain SGD by hand: nothing was left out of an optimizer."""

    def train():
        model = nn.Linear(5, 1)
        for x, y in data():
            model.zero_grad()
            F.mse_loss(model(x), y).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad

    session = session_run(train)
    assert session.findings == [] and session.auditors == []


@pytest.mark.parametrize("kind", ["scaler", "lbfgs"])
def test_a_grad_scaler_and_lbfgs_closures_are_silent(kind):
    def train():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
        if kind == "scaler":
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
            scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
            for x, y in data():
                optimizer.zero_grad()
                scaler.scale(F.mse_loss(model(x), y)).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
        else:
            optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
            x, y = data(n=1)[0]

            def closure():
                optimizer.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                return loss

            for _ in range(2):
                optimizer.step(closure)
        return list(model.parameters())

    session = session_run(train)
    assert session.findings == [], str(session)


def test_a_ddp_model_is_named_without_its_wrapper(tmp_path):
    """DDP(model) is the outermost module: the names are the model's own (no ``module.``)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    sessions = []
    try:
        for whole in (True, False):

            def train(whole=whole):
                torch.manual_seed(0)
                model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
                ddp = DDP(model)
                optimizer = torch.optim.SGD(
                    ddp.parameters() if whole else model[2].parameters(), lr=0.05
                )
                for x, y in data():
                    optimizer.zero_grad()
                    F.mse_loss(ddp(x), y).backward()
                    optimizer.step()

            sessions.append(session_run(train))
            gc.collect()  # DDP's reducer goes while its process group is there (see below)
    finally:
        dist.destroy_process_group()
    assert sessions[0].findings == [], str(sessions[0])
    assert [f.code for f in sessions[1].findings] == ["params-not-in-optimizer"]
    assert "never updates them: 0.weight, 0.bias." in sessions[1].findings[0].message


# ------------------------------------------------------------- built before
@pytest.mark.parametrize("optimizer_before", [False, True])
def test_a_model_built_before_the_session_is_looked_up_once_an_optimizer_holds_it(
    optimizer_before,
):
    """``with AuditSession(): trainer.fit(model)``: the model, and maybe its optimizer, come
    from before the block. An optimizer built before is audited from its first step, so the
    left-out layer is seen from its second window."""
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
    made = [torch.optim.SGD(model[2].parameters(), lr=0.05)] if optimizer_before else []
    with AuditSession() as session:
        optimizer = made[0] if made else torch.optim.SGD(model[2].parameters(), lr=0.05)
        for x, y in data():
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
    assert [(f.code, f.step) for f in session.findings] == [
        ("params-not-in-optimizer", 2 if optimizer_before else 1)
    ], str(session)
    assert "never updates them: 0.weight, 0.bias." in session.findings[0].message


# --------------------------------------------------------- no optimizer's model
def test_parameters_of_no_optimizers_model_name_the_model_or_their_shape():
    """A teacher that is not frozen, and a parameter that no module holds: no optimizer trains
    them, so the finding names no optimizer, the model by the script's variable, and a
    parameter without a module by its dtype and shape."""

    def train():
        torch.manual_seed(0)
        student, teacher = nn.Linear(5, 1), nn.Linear(5, 1)
        offset = nn.Parameter(torch.zeros(1, dtype=torch.float64))
        optimizer = torch.optim.SGD(student.parameters(), lr=0.05)
        for x, _ in data():
            optimizer.zero_grad()
            target = teacher(x) + offset.float()
            F.mse_loss(student(x), target).backward()
            optimizer.step()

    session = session_run(train)
    assert [(f.code, f.optimizer, f.step) for f in session.findings] == [
        ("params-not-in-optimizer", "", None)
    ], str(session)
    message = session.findings[0].message
    assert message.startswith(
        "3 parameter(s) received gradients in backward() but belong to no param group of any "
        "optimizer, so no step() updates them: teacher.weight, teacher.bias, a float64 "
        "parameter of shape (1,)."
    )
    assert "requires_grad_(False)" in message
    assert str(session.findings[0]).startswith("params-not-in-optimizer (after the loop): 3 ")


def test_a_lazy_layer_left_out_is_reported_once_it_is_built():
    def train():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.LazyLinear(1))
        optimizer = torch.optim.SGD(model[0].parameters(), lr=0.05)
        for x, y in data():
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()

    session = session_run(train)
    assert [(f.code, f.step) for f in session.findings] == [("params-not-in-optimizer", 1)]
    assert "never updates them: 2.weight, 2.bias." in session.findings[0].message


@pytest.mark.parametrize("whose", ["optimizer's model", "no optimizer's model"])
def test_allow_silences_left_out_parameters(whose):
    def train():
        torch.manual_seed(0)
        model, other = nn.Linear(5, 1), nn.Linear(5, 1)
        if whose == "optimizer's model":  # its bias left out
            optimizer, extra = torch.optim.SGD([model.weight], lr=0.05), None
        else:  # all of it held, and another model that no optimizer trains
            optimizer, extra = torch.optim.SGD(model.parameters(), lr=0.05), other
        for x, y in data():
            optimizer.zero_grad()
            output = model(x) if extra is None else model(x) + extra(x)
            F.mse_loss(output, y).backward()
            optimizer.step()

    findings = session_run(train).findings
    assert [(f.code, bool(f.optimizer)) for f in findings] == [
        ("params-not-in-optimizer", whose == "optimizer's model")
    ]
    assert session_run(train, allow=["params-not-in-optimizer"]).findings == []


def test_an_error_in_the_block_still_puts_everything_back():
    new = nn.Parameter.__dict__["__new__"]
    with contextlib.suppress(ZeroDivisionError), AuditSession():
        model = nn.Linear(5, 1)
        torch.optim.SGD([model.weight], lr=0.1)
        F.mse_loss(model(data()[0][0]), data()[0][1]).backward()
        1 / 0  # noqa: B018
    assert nn.Parameter.__dict__["__new__"] is new and patches.WATCHERS == []
    assert not model.bias._post_accumulate_grad_hooks
