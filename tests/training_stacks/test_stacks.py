"""Notebook 08's single-process helpers: scaling after accumulating equals scaling before and
one process; optimizer-in-backward steps per micro-batch; torch.compile's facts."""

from __future__ import annotations

import pytest
import torch

from helpers.models import flat_weights
from helpers.training_stacks import compile_accumulation, stacks
from helpers.versions import why_it_cannot_run

# Notebook 08's helpers: skipped on a torch too old for notebook 08 (helpers/versions.py).
NOT_ON_THIS_TORCH = why_it_cannot_run("08_training_stacks")
pytestmark = pytest.mark.skipif(NOT_ON_THIS_TORCH is not None, reason=str(NOT_ON_THIS_TORCH))


def test_scale_after_equals_scale_before_and_one_process():
    windows = stacks.make_rank_windows(world=2, k=3)
    model = stacks.make_token_model()
    reference = stacks.one_process_gradients(model, windows)
    tokens = stacks.scale_after_accumulating(model, windows)
    after = [p.grad.clone() for p in model.parameters()]
    stacks.scale_before_accumulating(model, windows)
    before = [p.grad.clone() for p in model.parameters()]
    assert int(tokens) == sum(int(stacks.token_count(t)) for w in windows for _, t in w)
    assert stacks.max_difference(after, reference) < 1e-6
    assert stacks.max_difference(before, reference) < 1e-6


def test_the_ranks_count_different_tokens():
    windows = stacks.make_rank_windows(world=2, k=3)
    counts = [sum(int(stacks.token_count(t)) for _, t in w) for w in windows]
    assert counts[0] != counts[1]


def test_forgetting_the_world_size_halves_the_gradient():
    windows = stacks.make_rank_windows(world=2, k=3)
    model = stacks.make_token_model()
    reference = stacks.one_process_gradients(model, windows)
    stacks.scale_after_accumulating(model, windows)
    for p, r in zip(model.parameters(), reference, strict=True):
        assert torch.allclose(p.grad / 2, r / 2)  # the helper's factor is world / count
    assert stacks.max_difference([p.grad / 2 for p in model.parameters()], reference) > 1e-3


def test_scale_after_draws_one_micro_batch_at_a_time_scale_before_all_first():
    windows = stacks.make_rank_windows(world=1, k=3)
    model = stacks.make_token_model()
    after = stacks.draw_order(stacks.scale_after_accumulating, model, windows[0])
    before = stacks.draw_order(stacks.scale_before_accumulating, model, windows[0])
    assert after == [("draw", 0), "backward", ("draw", 1), "backward", ("draw", 2), "backward"]
    assert before == [("draw", 0), ("draw", 1), ("draw", 2), "backward", "backward", "backward"]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        stacks.make_rank_windows(world=0)
    with pytest.raises(TypeError, match="one list of micro-batches per rank"):
        stacks.scale_after_accumulating(stacks.make_token_model(), [])
    with pytest.raises(ValueError, match="no micro-batch"):
        stacks.one_process_gradients(stacks.make_token_model(), [[]])
    with pytest.raises(ValueError, match="tensors against"):
        stacks.max_difference([torch.ones(1)], [])


def test_optimizer_in_backward_steps_every_micro_batch_and_leaves_no_gradient():
    window = stacks.make_rank_windows(world=1, k=3)[0]
    model = stacks.make_token_model()
    tried = stacks.accumulate_in_backward(model, window, lr=0.5)
    ordinary = stacks.make_token_model()
    assert stacks.accumulate_then_step(ordinary, window, lr=0.5) == 1
    assert tried["steps"] == 3 and all(p.grad is None for p in model.parameters())
    assert tried["clip_norm"] == 0.0
    assert not torch.allclose(flat_weights(model), flat_weights(ordinary))


def test_a_compiled_model_accumulates_the_same_gradients():
    same = compile_accumulation.compiled_model_gradients(k=2, backend="eager")
    assert same["max_difference"] < 1e-6 and same["graphs"] == 1


def test_backward_and_zero_grad_break_the_graph():
    assert compile_accumulation.backward_in_compiled_step()["graph_breaks"] == 1
    skipped = compile_accumulation.zero_grad_in_compiled_function()
    assert skipped["graph_breaks"] == 1 and "zero_grad" in skipped["explanations"][0]
    assert compile_accumulation.decorators_of(torch.optim.Optimizer.zero_grad) == [
        "@torch._disable_dynamo"
    ]


def test_a_float_learning_rate_recompiles_a_tensor_one_does_not():
    floats = compile_accumulation.compiled_step_recompiles(0.1, steps=3)
    tensors = compile_accumulation.compiled_step_recompiles(torch.tensor(0.1), steps=3)
    assert floats["graphs"] == 2 and floats["failed_guards"]
    assert tensors["graphs"] == 1 and tensors["failed_guards"] == []
    assert floats["lrs"] == [0.1, 0.05, 0.025]
