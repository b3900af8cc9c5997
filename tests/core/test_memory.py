import pytest
import torch

from helpers.memory import StepMemory, compare_step_memory, measure_step_memory
from helpers.models import make_mlp


def test_make_mlp_is_seeded_and_shaped():
    a, b = make_mlp((6, 4, 3)), make_mlp((6, 4, 3))
    assert [type(m).__name__ for m in a] == ["Linear", "ReLU", "Linear"]
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    with pytest.raises(ValueError, match="at least two positive whole numbers"):
        make_mlp((6,))
    with pytest.raises(ValueError, match="at least two positive whole numbers"):
        make_mlp((6, 0, 2))


def test_cpu_peak_grows_with_the_batch_while_gradients_stay_the_same():
    widths = (256, 1024, 1024, 10)
    small, large = measure_step_memory(widths, [16, 512])
    params = sum(p.numel() * 4 for p in make_mlp(widths).parameters())
    assert small.grad_bytes == large.grad_bytes == params
    # one forward and backward needs at least the gradient buffers, and more for more samples
    assert small.step_bytes >= 0.9 * params
    assert large.step_bytes - small.step_bytes > 496 * 1024 * 4  # at least one 1024-wide layer


def test_other_bytes_is_what_is_not_gradient():
    assert StepMemory(8, 100, 60).other_bytes == 40


def test_bad_input():
    with pytest.raises(ValueError, match="batch_sizes is empty"):
        measure_step_memory((4, 2), [])
    with pytest.raises(ValueError, match="at least 1"):
        measure_step_memory((4, 2), [0])
    with pytest.raises(ValueError, match="'cpu' or 'cuda', not 'meta'"):
        measure_step_memory((4, 2), [2], device="meta")


def test_two_backwards_with_retain_graph_need_more_than_one_summed_backward():
    # one probe compares the two workloads side by side; measure_step_memory passes its
    # workload on to a probe of its own (the retained one, which must again exceed the summed)
    widths = (256, 1024, 1024, 10)
    workloads = ["two losses, retain_graph", "two losses, summed"]
    memory = compare_step_memory(widths, 256, workloads)
    assert list(memory) == workloads
    retained, summed = memory.values()
    assert retained.batch_size == summed.batch_size == 256
    assert retained.grad_bytes == summed.grad_bytes
    assert retained.step_bytes > summed.step_bytes + 2**20
    [alone] = measure_step_memory(widths, [256], workload="two losses, retain_graph")
    assert alone.grad_bytes == retained.grad_bytes
    assert alone.step_bytes > summed.step_bytes + 2**20


@pytest.mark.parametrize(
    ("workloads", "batch_size", "error", "match"),
    [
        ([], 8, ValueError, "non-empty list"),
        ("two losses, summed", 8, ValueError, "non-empty list"),
        (["one loss", "two losses, summed"], 8, ValueError, "build different models"),
        (["two losses, summed"], 0, ValueError, "batch_size must be at least 1"),
        (["three losses"], 8, ValueError, "unknown workload 'three losses'"),
        (["two losses, summed"] * 2, 8, ValueError, "names one twice"),
    ],
)
def test_compare_refuses_bad_input(workloads, batch_size, error, match):
    with pytest.raises(error, match=match):
        compare_step_memory((4, 3, 2), batch_size, workloads)


def test_two_heads_share_a_trunk():
    from helpers.models import TwoHeads

    model = TwoHeads((6, 5, 4, 3))
    out_a, out_b = model(torch.randn(2, 6))
    assert out_a.shape == out_b.shape == (2, 3)
    assert model.trunk[-1].out_features == 4


def test_unknown_workload():
    with pytest.raises(ValueError, match="unknown workload 'three losses'"):
        measure_step_memory((4, 2), [2], workload="three losses")
