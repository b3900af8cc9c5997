"""The paths the course takes only on an NVIDIA GPU, checked on one (skipped without CUDA):
float16 autocast with a GradScaler (notebook 06), CUDA allocator statistics for a step's
memory (notebook 03) and DDP over nccl (notebook 06, with two GPUs or more).
tools/gpu_suite.sh runs them with the rest of the suite on the CUDA machine."""

from __future__ import annotations

import math
import os

import pytest
import torch
from torch.nn import functional as F

from helpers.at_scale.amp_and_clipping import train_accumulating
from helpers.at_scale.ddp_runs import run_ddp_accumulation
from helpers.audit import LoopAuditor
from helpers.data import make_teacher_batches
from helpers.device import describe_device, pick_device
from helpers.memory import measure_step_memory
from helpers.models import make_mlp

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs an NVIDIA GPU (torch.cuda)")
needs_two_gpus = pytest.mark.skipif(
    not (
        CUDA
        and torch.cuda.device_count() >= 2
        and torch.distributed.is_available()
        and torch.distributed.is_nccl_available()
    ),
    reason="nccl needs two CUDA GPUs (one per process) and a torch build with nccl",
)
GPU = torch.device("cuda")
SCALE = 2.0**10  # a GradScaler's first scale that this model's float16 gradients never overflow


def flat(model) -> torch.Tensor:
    return torch.cat([p.detach().float().flatten() for p in model.parameters()]).cpu()


def teacher_run(**options):
    """Notebook 06's AMP comparison: 10 regression micro-batches, windows of 4, on the GPU."""
    model = make_mlp((8, 64, 64, 1)).to(GPU)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = make_teacher_batches(n_batches=10, batch_size=16, features=8)
    log = train_accumulating(model, optimizer, batches, 4, loss_fn=F.mse_loss, **options)
    return model, log


# ------------------------------------------------------------------ the device
@needs_cuda
@pytest.mark.skipif(os.environ.get("GM_GPU_SUITE") != "1", reason="only under gpu_suite.sh")
def test_the_gpu_suite_computes_on_the_gpu():
    assert os.environ["GM_DEVICE"] == "cuda"
    assert pick_device() == GPU
    assert describe_device(pick_device()) == f"cuda ({torch.cuda.get_device_name(0)})"


# ------------------------------------------------------------------ float16 and GradScaler
@needs_cuda
def test_autocast_float16_runs_the_layers_in_half_and_keeps_float32_gradients():
    model = make_mlp((8, 64, 64, 1)).to(GPU)
    inputs = torch.randn(16, 8, device=GPU)
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(inputs)
    assert out.dtype == torch.float16
    F.mse_loss(out.float(), torch.zeros_like(out, dtype=torch.float32)).backward()
    for p in model.parameters():
        assert p.dtype == p.grad.dtype == torch.float32
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


@needs_cuda
def test_float16_with_a_grad_scaler_stays_close_to_full_precision_but_is_not_it():
    start = flat(make_mlp((8, 64, 64, 1)))
    full_model, _ = teacher_run()
    scaler = torch.amp.GradScaler("cuda", init_scale=SCALE)
    amp_model, log = teacher_run(amp_dtype=torch.float16, scaler=scaler)
    assert scaler.get_scale() == SCALE, "a step overflowed and was skipped"
    assert len(log.grad_norms) == 3 and all(math.isfinite(n) for n in log.grad_norms)
    full, amp = flat(full_model), flat(amp_model)
    difference = ((amp - full).norm() / (full - start).norm()).item()
    assert 0 < difference < 0.05  # float16 rounding changed the weights, a little


@needs_cuda
def test_a_window_with_an_inf_gradient_is_skipped_and_the_scale_halves():
    model = make_mlp((8, 64, 64, 1)).to(GPU)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cuda", init_scale=SCALE)
    batches = make_teacher_batches(n_batches=8, batch_size=16, features=8)

    def window(micro_batches, overflow_at=None):
        optimizer.zero_grad()
        for j, (inputs, targets) in enumerate(micro_batches):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = F.mse_loss(model(inputs.to(GPU)), targets.to(GPU)) / len(micro_batches)
            if j == overflow_at:
                loss = loss * float("inf")
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        finite = all(torch.isfinite(p.grad).all() for p in model.parameters())
        scaler.step(optimizer)
        scaler.update()
        return finite

    before, scale = flat(model), scaler.get_scale()
    assert not window(batches[:4], overflow_at=2)
    assert torch.equal(flat(model), before), "the step with inf gradients was not skipped"
    assert scaler.get_scale() == scale / 2
    assert window(batches[4:]), "a clean window gives finite gradients"
    assert not torch.equal(flat(model), before), "the clean window's step was applied"
    assert scaler.get_scale() == scale / 2  # no growth before growth_interval clean steps


@needs_cuda
def test_updating_the_scaler_per_micro_batch_fails_loudly_on_cuda():
    with pytest.raises(AssertionError, match="No inf checks were recorded"):
        teacher_run(
            amp_dtype=torch.float16,
            scaler=torch.amp.GradScaler("cuda"),
            mistake="update per micro-batch",
        )


@needs_cuda
def test_the_auditor_sees_clipping_before_unscale_on_cuda():
    def audited(mistake):
        model = make_mlp((8, 64, 64, 1)).to(GPU)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        scaler = torch.amp.GradScaler("cuda", init_scale=SCALE)
        batches = make_teacher_batches(n_batches=8, batch_size=16, features=8)
        with LoopAuditor(model, optimizer, accumulation_steps=4, scaler=scaler) as audit:
            log = train_accumulating(
                model, optimizer, batches, 4, loss_fn=F.mse_loss, amp_dtype=torch.float16,
                scaler=scaler, max_norm=1.0, mistake=mistake,
            )  # fmt: skip
        return audit.codes, log

    right_codes, right_log = audited(None)
    assert right_codes == []
    assert 2 / SCALE < max(right_log.grad_norms) <= 1.0 + 1e-4  # unscaled, then clipped to 1
    codes, log = audited("clip before unscale")
    assert codes == ["unscale-after-clip"]
    # clipped while still scaled, to norm 1: once unscaled, the step's gradient is 1 / SCALE
    assert all(n <= (1.0 + 1e-4) / SCALE for n in log.grad_norms)


@needs_cuda
@pytest.mark.parametrize("zeroing", ["set_to_none", "zeros", "by hand"])
def test_the_auditor_synchronizes_at_most_once_per_step_on_cuda(zeroing):
    """torch.cuda.set_sync_debug_mode("warn") warns at every host-device synchronization:
    the audited loop may warn at most once per optimizer step more than the same loop bare."""
    import warnings

    def loop(model, optimizer, batches):
        for i, x in enumerate(batches):
            (model(x).square().mean() / 4).backward()
            if (i + 1) % 4 == 0:
                optimizer.step()
                if zeroing == "by hand":
                    for p in model.parameters():
                        p.grad.zero_()
                else:
                    optimizer.zero_grad(set_to_none=zeroing == "set_to_none")

    def syncs(audited: bool) -> tuple[int, int]:
        torch.manual_seed(0)
        model = make_mlp((8, 64, 64, 64, 1)).to(GPU)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        batches = [torch.randn(16, 8, device=GPU) for _ in range(12)]
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                if audited:
                    with LoopAuditor(model, optimizer, accumulation_steps=4) as audit:
                        loop(model, optimizer, batches)
                else:
                    loop(model, optimizer, batches)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        found = len([w for w in caught if "synchroniz" in str(w.message)])
        return found, (audit.steps if audited else 0)

    bare, _ = syncs(audited=False)
    audited, steps = syncs(audited=True)
    assert steps == 3 and audited - bare <= steps
    if zeroing != "by hand":
        assert audited == bare


# ------------------------------------------------------------------ CUDA memory
@needs_cuda
def test_after_a_step_the_gpu_holds_exactly_the_gradient_buffers():
    widths = (256, 1024, 1024, 10)
    inputs = torch.randn(64, 256, device=GPU)
    targets = torch.randint(0, 10, (64,), device=GPU)
    F.cross_entropy(make_mlp(widths).to(GPU)(inputs), targets).backward()  # cuBLAS warm-up
    model = make_mlp(widths).to(GPU)
    params = list(model.parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    F.cross_entropy(model(inputs), targets).backward()
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before  # what the step left: activations are freed
    # the allocator rounds each block up to 512 bytes: one per gradient at most
    assert param_bytes <= held < param_bytes + 512 * len(params)
    [memory] = measure_step_memory(widths, [64], device=GPU)
    assert memory.grad_bytes == param_bytes


@needs_cuda
def test_cuda_step_memory_holds_the_gradients_and_grows_with_the_batch():
    widths = (1024, 4096, 4096, 10)
    sizes = [1, 256, 1024]
    points = measure_step_memory(widths, sizes, device=GPU)
    param_bytes = sum(p.numel() * 4 for p in make_mlp(widths).parameters())
    assert [p.batch_size for p in points] == sizes
    assert all(p.grad_bytes == param_bytes for p in points)
    assert all(p.step_bytes >= p.grad_bytes for p in points)  # the peak holds every gradient
    small, medium, large = points
    assert small.step_bytes < medium.step_bytes < large.step_bytes
    # at every moment of the step the input and one 4096-wide activation (or its gradient)
    # are alive for each sample: the peak grows by at least that much per extra sample
    per_sample = (1024 + 4096) * 4
    assert large.step_bytes - medium.step_bytes >= (1024 - 256) * per_sample
    assert medium.step_bytes - small.step_bytes >= (256 - 1) * per_sample


# ------------------------------------------------------------------ nccl
@needs_two_gpus
def test_ddp_over_nccl_counts_the_same_allreduces_as_gloo(monkeypatch):
    results = {}
    for backend in ("gloo", "nccl"):
        monkeypatch.setenv("GM_DDP_BACKEND", backend)
        results[backend] = run_ddp_accumulation(nproc=2, k=4, micro_batch=16, repeats=3)
    gloo, nccl = results["gloo"], results["nccl"]
    assert gloo["backend"] == "gloo" and nccl["backend"] == "nccl"
    buckets = nccl["buckets"]
    assert buckets >= 2 and buckets == gloo["buckets"]
    expected = {
        "no_sync": buckets,
        "sync every micro-batch": 4 * buckets,
        "forward outside no_sync": 4 * buckets,
    }
    assert nccl["allreduces_per_step"] == expected
    assert gloo["allreduces_per_step"] == expected
    assert nccl["weights_max_diff_across_ranks"] == 0.0
    assert nccl["grad_max_diff_vs_single_process"] < 1e-5
    assert nccl["weights_max_diff_vs_single_process"] < 1e-5
    codes = {"correct": [], "no zero_grad after step": ["missing-zero-grad"]}
    assert nccl["auditor_codes"] == codes and gloo["auditor_codes"] == codes
