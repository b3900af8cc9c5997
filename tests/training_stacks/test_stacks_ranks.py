"""helpers.training_stacks.stacks_ranks through its wrappers in helpers.processes.run_ranks:
notebook 08's multi-process measurements (exactness, counts), the uneven-ranks stop (its message,
how fast, no rank left behind) and bad input, refused before any process starts."""

import os

import pytest
import torch

from helpers.training_stacks.stack_runs import (
    run_static_graph_no_sync,
    run_training_stacks,
    run_uneven_ranks,
)
from helpers.versions import why_it_cannot_run

# Notebook 08's helpers: skipped on a torch too old for notebook 08 (helpers/versions.py).
NOT_ON_THIS_TORCH = why_it_cannot_run("08_training_stacks")
pytestmark = [
    pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed"),
    pytest.mark.skipif(NOT_ON_THIS_TORCH is not None, reason=str(NOT_ON_THIS_TORCH)),
]


@pytest.fixture(scope="module")
def stacks():
    """Every case in one launch, as notebook 08 runs it."""
    return run_training_stacks(with_static_graph=True, with_uneven_stop=True)


def test_token_loss_scaled_before_or_after_matches_one_process_and_the_naive_mean_does_not(
    stacks,
):
    tokens = stacks["token_loss"]
    assert len(set(tokens["tokens_per_rank"])) == 2  # the ranks count different tokens
    assert [sum(rank) for rank in tokens["tokens_per_micro_batch"]] == tokens["tokens_per_rank"]
    assert tokens["global_tokens"] == tokens["scale_after_count"] == sum(tokens["tokens_per_rank"])
    assert tokens["naive_rel_error"] > 0.05
    assert tokens["scale_before_max_diff"] < 1e-6
    assert tokens["scale_after_clipped_max_diff"] < 1e-6  # against one process, clipped alike


def test_clipping_after_the_scaling_sees_the_true_gradient_norm(stacks):
    tokens = stacks["token_loss"]
    assert tokens["max_norm"] < tokens["true_grad_norm"]  # clipping acts
    assert tokens["norm_clipping_sees"] == pytest.approx(tokens["true_grad_norm"], rel=1e-5)
    # before the scaling: count / world times the true norm (measured, not derived)
    factor = tokens["global_tokens"] / stacks["world_size"]
    assert tokens["norm_before_scaling"] == pytest.approx(
        factor * tokens["true_grad_norm"], rel=1e-5
    )


def test_no_sync_until_each_ranks_own_last_micro_batch_is_exact_on_every_rank(stacks):
    fix = stacks["unequal_micro_batches"]
    assert fix["micro_batches_per_rank"] == [3, 2]
    per_rank = fix["grad_max_diff_vs_one_process_per_rank"]
    assert len(per_rank) == 2 and max(per_rank) < 1e-6


def test_join_is_exact_only_when_each_all_reduce_carries_one_micro_batch(stacks):
    join = stacks["join"]
    assert join["micro_batches_per_rank"] == [3, 2] and join["last_joiner"] == 0
    exact = ("join, each micro-batch all-reduced on its own",)
    off = (
        "join, accumulating in .grad",
        "join, each micro-batch all-reduced on its own, divide by ranks still running",
    )
    for way in exact:
        assert join[way]["grad_max_diff_vs_single_process_last_joiner"] < 1e-6, way
        assert join[way]["weights_max_diff_vs_single_process"] < 1e-6, way
    for way in off:
        assert join[way]["grad_rel_error_vs_single_process_last_joiner"] > 0.1, way
        assert join[way]["weights_max_diff_vs_single_process"] > 1e-3, way


def test_distributed_sampler_evens_the_micro_batches_by_repeating_or_dropping(stacks):
    padding, drop = (
        stacks["distributed_sampler"]["padding"],
        stacks["distributed_sampler"]["drop_last"],
    )
    assert padding["sequences"] == drop["sequences"] == 25
    assert padding["sequences_per_rank"] == [13, 13] and drop["sequences_per_rank"] == [12, 12]
    assert padding["micro_batches_per_rank"] == [4, 4] and drop["micro_batches_per_rank"] == [3, 3]
    assert (padding["repeated_sequences"], padding["dropped_sequences"]) == (1, 0)
    assert (drop["repeated_sequences"], drop["dropped_sequences"]) == (0, 1)
    for case in (padding, drop):
        assert case["rel_error_vs_single_process"] > 0.01
        assert case["max_diff_vs_one_process_on_what_ranks_saw"] < 1e-6


def test_fsdp2_reduce_scatters_once_per_group_per_synchronized_micro_batch(stacks):
    fsdp = stacks["fsdp2"]
    every, last = fsdp["sync every micro-batch"], fsdp["sync on the last only"]
    assert every["reduce_scatters_per_step"] == 2 * 3
    assert last["reduce_scatters_per_step"] == 2
    assert every["collectives"]["_allgather_base_"] == last["collectives"]["_allgather_base_"]
    for case in (every, last):
        assert case["grad_max_diff_vs_single_process"] < 1e-6
    # skipping the sync keeps the unsharded gradient: world size (2) times the shard
    assert every["grad_bytes_held_between_micro_batches"] == 4 * fsdp["parameters"] // 2
    assert last["grad_bytes_held_between_micro_batches"] == 4 * fsdp["parameters"]


def test_gradient_as_bucket_view_grads_are_views_zeroed_in_place(stacks):
    view = stacks["bucket_view"]
    for key in (
        "grad_is_view",
        "grad_grad_fn_is_none",
        "grads_inside_bucket_buffers",
        "zero_grad_set_to_none_false_keeps_storage",
        "zero_grad_set_to_none_false_zeroes",
        "zero_grad_set_to_none_true_drops_grads",
    ):
        assert view[key] is True, key
    assert view["detach_in_place_error"].startswith("Can't detach views in-place")
    assert view["no_sync_max_diff_vs_single_process"] < 1e-6


def test_static_graph_with_no_sync_is_classified(stacks):
    graph = stacks["static_graph"]
    assert graph["verdict"] in ("crash", "wrong gradients", "fixed")
    assert graph["torch"] == torch.__version__
    if graph["verdict"] == "crash":
        assert graph["error"]
    if graph["verdict"] == "fixed":
        assert graph["grad_max_diff_vs_single_process"] < 1e-5
    warmed = graph["after a synced first window"]
    assert warmed["verdict"] in ("crash", "wrong gradients", "fixed")
    # Notebook 08 says it crashes on every torch it runs on (2.9 and newer; CI runs the oldest,
    # the pinned and the newest): a release with pytorch PR 187732 (open) must update it.
    assert graph["verdict"] == "crash", graph
    assert "expect_autograd_hooks_ INTERNAL ASSERT FAILED" in graph["error"]
    assert graph["iterations_completed_rank0"] == 0
    # A first window that syncs every micro-batch avoids it (pytorch issue 143580).
    assert warmed["verdict"] == "fixed", warmed
    assert warmed["iterations_completed_rank0"] == graph["iterations"]
    assert warmed["grad_max_diff_vs_single_process"] < 1e-6


def check_uneven_stop(uneven: dict) -> None:
    message = uneven["message"]
    assert "waited 1.5 s in" in message and "no other rank joined" in message
    assert "unequal numbers of micro-batches (rank 0: 3, rank 1: 2)" in message
    assert "no_sync()" in message and "the same number of micro-batches" in message
    assert "DistributedSampler" not in message and "Join" not in message  # not on the main path
    # which collective it waited in: rank 0's third all-reduce, or rank 1 at the barrier
    assert (
        "in the gradient all-reduce of its micro-batch 3 of 3" in message
        or "in the barrier after its 2 micro-batches" in message
    ), message
    assert "Traceback" not in message  # plain words, not the gloo internals
    # the why and the fix on their own, what notebook 08 prints: the end of the rank's words
    explanation = uneven["explanation"]
    assert explanation.startswith("The ranks ran unequal numbers of micro-batches (rank 0: 3, ")
    assert explanation in message and message.rstrip().endswith(explanation)
    error_line = next(line for line in message.splitlines() if "RuntimeError:" in line)
    assert error_line.count("RuntimeError:") == 1 and error_line.endswith("windows."), (
        "one rank's words on a line of their own (two ranks can time out at once)"
    )
    assert uneven["seconds_to_stop"] < 10
    assert len(uneven["rank_pids"]) == 2 and uneven["ranks_left_running"] == []
    for pid in uneven["rank_pids"]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_uneven_stop_in_the_shared_launch(stacks):
    check_uneven_stop(stacks["uneven"])


def test_the_uneven_stop_on_its_own_is_fast_and_leaves_no_rank():
    uneven = run_uneven_ranks()
    check_uneven_stop(uneven)
    assert uneven["micro_batches_per_rank"] == [3, 2] and uneven["collective_timeout"] == 1.5
    assert uneven["seconds"] < 20


def test_ranks_with_unequal_numbers_of_windows_hang_despite_no_sync():
    """no_sync() until each rank's own last micro-batch fixes unequal micro-batches only while
    every rank makes the same number of windows: 10 against 8 at k = 4 makes windows 4, 4, 2
    against 4, 4, and rank 0's third all-reduce has no partner (notebook 08's key point)."""
    uneven = run_uneven_ranks((10, 8), accumulation_steps=4)
    message = uneven["message"]
    assert "waited 1.5 s in" in message and "no other rank joined" in message
    assert "unequal numbers of windows of 4 micro-batches (rank 0: 3, rank 1: 2;" in message
    assert (
        "in the gradient all-reduce of its micro-batch 10 of 10" in message
        or "in the barrier after its 8 micro-batches" in message
    ), message
    assert uneven["ranks_left_running"] == [] and uneven["seconds_to_stop"] < 10


@pytest.mark.parametrize(
    "call, error, fragment",
    [
        (lambda: run_training_stacks(k=1), ValueError, "k must be at least 2"),
        (lambda: run_training_stacks(k=2.5), TypeError, "k must be a whole number"),
        (lambda: run_training_stacks(micro_batch=0), ValueError, "micro_batch must be at least 1"),
        (lambda: run_training_stacks(nproc=1), ValueError, "nproc must be at least 2"),
        (lambda: run_training_stacks(with_uneven_stop="yes"), TypeError, "True or False"),
        (lambda: run_uneven_ranks((3, 0)), ValueError, "rank 1 has 0 micro-batches"),
        (lambda: run_uneven_ranks((3,)), ValueError, "at least 2 ranks"),
        (lambda: run_uneven_ranks((2, 2)), ValueError, "make them differ"),
        (lambda: run_uneven_ranks("3,2"), TypeError, "a list of counts"),
        (lambda: run_uneven_ranks((3, 2.0)), TypeError, "micro_batches[1] must be a whole"),
        (lambda: run_uneven_ranks(collective_timeout=0), ValueError, "collective_timeout"),
        (lambda: run_uneven_ranks((10, 9), accumulation_steps=4), ValueError, "same number of"),
        (lambda: run_uneven_ranks((10, 8), accumulation_steps=0), ValueError, "at least 1"),
        (lambda: run_uneven_ranks(collective_timeout=30), ValueError, "a quarter of timeout"),
        (
            lambda: run_static_graph_no_sync(iterations=0),
            ValueError,
            "iterations must be at least 1",
        ),
        (lambda: run_static_graph_no_sync(k=1), ValueError, "k must be at least 2"),
        (lambda: run_static_graph_no_sync(nproc=1), ValueError, "nproc must be at least 2"),
    ],
)
def test_bad_input_is_refused_with_what_to_change(call, error, fragment):
    with pytest.raises(error) as raised:
        call()
    assert fragment in str(raised.value)
