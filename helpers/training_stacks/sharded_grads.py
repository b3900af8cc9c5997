"""Where the gradients live between micro-batches, on a real process group (run inside
``helpers.training_stacks.stacks_ranks``): FSDP2's reduce-scatters and held gradient bytes with and
without ``set_requires_gradient_sync(False)``, and DDP's ``gradient_as_bucket_view=True``."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.models import TokenModel
from helpers.training_stacks.stacks import max_difference, token_count, token_loss_sum
from helpers.training_stacks.token_ranks import (
    VOCAB,
    grads_of,
    single_process_grads,
    sync_unless_last,
    token_windows,
    worst_over_ranks,
)


class TwoBlocks(nn.Module):
    """Two blocks, each sharded as its own FSDP group; the root holds no parameters."""

    def __init__(self, width: int = 16, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.block1 = nn.Sequential(nn.Linear(8, width), nn.Tanh())
            self.block2 = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 4))

    def forward(self, x):
        return self.block2(self.block1(x))


class CollectiveCount(TorchDispatchMode):
    """Counts the c10d collectives that run inside it, by name (``"_reduce_scatter_base_"``,
    ``"allreduce_"``, ...), where every process-group call meets the dispatcher: whichever
    Python function (``reduce_scatter_tensor``, ``reduce_scatter_single``) FSDP calls them
    from."""

    def __init__(self):
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        namespace, _, name = func._schema.name.partition("::")
        if namespace == "c10d":
            self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))

    def reduce_scatters(self) -> int:
        return sum(n for name, n in self.counts.items() if "reduce_scatter" in name)


def held_grad_bytes(model: nn.Module) -> int:
    """Bytes of gradient this rank holds between micro-batches: the sharded ``.grad`` (its
    local shard) plus any unsharded gradient FSDP keeps for the next micro-batch. Memory is
    counted once however many names point to it (on torch 2.15 FSDP's
    ``unsharded_accumulated_grad`` is the unsharded parameter's ``.grad`` itself)."""
    held: dict[int, int] = {}  # data pointer -> bytes

    def hold(tensor) -> None:
        if tensor is not None:
            held[tensor.data_ptr()] = tensor.numel() * tensor.element_size()

    for p in model.parameters():
        if p.grad is not None:
            hold(p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad)
    for module in model.modules():
        state = getattr(module, "_get_fsdp_state", None)
        group = state()._fsdp_param_group if state is not None else None
        for fsdp_param in getattr(group, "fsdp_params", []) or []:
            hold(getattr(getattr(fsdp_param, "_unsharded_param", None), "grad", None))
            hold(getattr(fsdp_param, "unsharded_accumulated_grad", None))
    return sum(held.values())


def fsdp2_case(rank: int, world: int, k: int, micro_batch: int) -> dict:
    """One rank's window of ``k`` micro-batches on a model of two ``fully_shard`` groups,
    with the gradient sync on for every micro-batch, then on for the last only; counts the
    reduce-scatters and the gradient bytes held between micro-batches."""
    from torch.distributed.fsdp import fully_shard

    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(world * k * micro_batch, 8, generator=generator)
    labels = torch.randn(world * k * micro_batch, 4, generator=generator)
    reference_model = TwoBlocks()
    nn.functional.mse_loss(reference_model(inputs), labels).backward()  # one process, all data
    reference = grads_of(reference_model)
    parameters = sum(p.numel() for p in reference_model.parameters())
    mine = [  # this rank's k micro-batches
        (inputs[s : s + micro_batch], labels[s : s + micro_batch])
        for s in ((j * world + rank) * micro_batch for j in range(k))
    ]
    results = {"parameters": parameters}
    for mode in ("sync every micro-batch", "sync on the last only"):
        model = TwoBlocks()
        fully_shard(model.block1)  # a group: its parameters sharded over the ranks
        fully_shard(model.block2)
        fully_shard(model)  # the root: no parameters of its own
        counter = CollectiveCount()
        held = []
        with counter:
            for j, (x, y) in enumerate(mine):
                if mode == "sync on the last only":  # FSDP2's no_sync()
                    model.set_requires_gradient_sync(j == k - 1)
                (nn.functional.mse_loss(model(x), y) / k).backward()
                if j < k - 1:
                    held.append(held_grad_bytes(model))  # held until the next micro-batch
        grads = [p.grad.full_tensor() for p in model.parameters()]  # all-gathers the shards
        results[mode] = {
            "reduce_scatters_per_step": counter.reduce_scatters(),
            "collectives": dict(counter.counts),
            "grad_max_diff_vs_single_process": worst_over_ranks(max_difference(grads, reference)),
            "grad_bytes_held_between_micro_batches": max(held),
        }
    return results


# ---------------------------------------------------------------- 4. gradient_as_bucket_view


def bucket_view_case(rank: int, world: int, k: int, micro_batch: int, max_length: int) -> dict:
    """One rank's DDP model with ``gradient_as_bucket_view=True``: where its ``.grad`` lives,
    what ``detach_()`` and both kinds of ``zero_grad`` do to it, and two accumulation windows
    with ``no_sync()`` compared with one process."""
    everything, windows = token_windows(world, k, micro_batch, max_length, seed=4)
    mine = windows[rank]
    model = TokenModel(vocab=VOCAB, seed=0)
    buckets: list[tuple[int, int]] = []

    def recording_allreduce(_, bucket):  # a communication hook: DDP's all-reduce, recorded
        buffer = bucket.buffer()
        start = buffer.data_ptr()  # the address of the bucket's memory
        buckets.append((start, start + buffer.numel() * buffer.element_size()))  # its range
        return default_hooks.allreduce_hook(None, bucket)

    ddp = DDP(model, gradient_as_bucket_view=True)
    ddp.register_comm_hook(None, recording_allreduce)
    count = torch.tensor([sum(int(token_count(y)) for _, y in mine)])
    dist.all_reduce(count)  # the window's tokens over all ranks

    def window():
        for j, (x, y) in enumerate(mine):
            with sync_unless_last(ddp, j, k):
                (token_loss_sum(ddp, x, y) * world / int(count)).backward()

    window()
    grad = model.out.weight.grad
    inside = all(  # every .grad's address lies in a bucket's range
        any(lo <= p.grad.data_ptr() < hi for lo, hi in buckets) for p in model.parameters()
    )
    try:
        grad.detach_()  # what zero_grad(set_to_none=False) does to a grad with a grad_fn
        detach_error = ""
    except RuntimeError as error:
        detach_error = str(error).splitlines()[0]
    accumulated = max_difference(grads_of(model), single_process_grads(everything))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    pointers = [p.grad.data_ptr() for p in model.parameters()]  # where each .grad lives now
    optimizer.zero_grad(set_to_none=False)
    same_storage = pointers == [p.grad.data_ptr() for p in model.parameters()]
    zeroed = all(bool((p.grad == 0).all()) for p in model.parameters())
    window()  # a second window into the same, zeroed, bucket views
    second = max_difference(grads_of(model), single_process_grads(everything))
    optimizer.zero_grad(set_to_none=True)
    dropped = all(p.grad is None for p in model.parameters())
    return {
        "grad_is_view": grad._base is not None,  # a view keeps its base tensor in ._base
        "grad_grad_fn_is_none": grad.grad_fn is None,
        "grads_inside_bucket_buffers": inside,
        "detach_in_place_error": detach_error,
        "zero_grad_set_to_none_false_keeps_storage": same_storage,
        "zero_grad_set_to_none_false_zeroes": zeroed,
        "zero_grad_set_to_none_true_drops_grads": dropped,
        "no_sync_max_diff_vs_single_process": worst_over_ranks(max(accumulated, second)),
    }
