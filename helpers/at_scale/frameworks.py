"""How PyTorch Lightning, Hugging Face Accelerate and the Hugging Face Trainer accumulate,
mirrored in a few lines each (no framework installed), to compare with the course's exact
step, :func:`helpers.accumulation.accumulate_gradients`.

The sources they mirror (listed in notebook 07's Sources, from the versions
``constraints.txt`` pins; ``tests/at_scale/test_frameworks_real.py`` runs each library on the same
inputs as its mirror):

- Lightning 2.6.6, ``lightning/pytorch/loops/optimization/automatic.py``: ``closure_loss =
  closure_loss / normalize`` with ``trainer.accumulate_grad_batches`` passed as ``normalize``;
  ``loops/training_epoch_loop.py`` ``_should_accumulate``: step when ``ready %
  accumulate_grad_batches == 0`` or on the epoch's last batch.
- Accelerate 1.15.0, ``accelerator.py``: ``backward`` does ``loss = loss /
  self.gradient_accumulation_steps``; ``_do_sync`` syncs (and ``AcceleratedOptimizer`` steps
  and zeroes) when ``step % num_steps == 0`` or at ``end_of_dataloader`` (known only for a
  dataloader that went through ``prepare``: with any other, an epoch's short tail stays in
  ``.grad`` and joins the next epoch's first window, and the run's final tail is never
  stepped).
- Transformers 5.24.0, ``trainer.py``: when the model's ``forward`` takes ``**kwargs``
  (``model_accepts_loss_kwargs``) or a ``compute_loss_func`` is set, ``_get_num_items_in_batch``
  counts ``num_items_in_batch = sum(labels.ne(-100).sum() for labels in labels_for_count)``
  over the window, and ``fixed_cross_entropy`` (``loss/loss_utils.py``) sums the token losses
  and divides by it; otherwise ``training_step`` divides each micro-batch's loss by
  ``current_gradient_accumulation_steps``, the number of micro-batches in the window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from helpers.accumulation import current_gradients
from helpers.arguments import check_batches, positive_int
from helpers.data import Batch
from helpers.training import trainable_parameters
from helpers.translation import _


def steps_after(n_batches: int, accumulation_steps: int) -> list[int]:
    """The micro-batches (1-based) after which Lightning, Accelerate (its dataloader through
    ``prepare``) and the Hugging Face Trainer step: every ``accumulation_steps``-th one, and
    the epoch's last one (a short window is stepped)."""
    positive_int(n_batches, "n_batches")
    positive_int(accumulation_steps, "accumulation_steps")
    return [i for i in range(1, n_batches + 1) if i % accumulation_steps == 0 or i == n_batches]


def _window(window: Sequence[Batch]) -> list[Batch]:
    return check_batches(
        window, argument="window", item=_("micro-batch"), empty=_("the window is empty")
    )


def divide_by_k_gradients(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    window: Sequence[Batch],
    accumulation_steps: int,
) -> list[torch.Tensor]:
    """The gradient Lightning's ``accumulate_grad_batches`` and Accelerate's
    ``accumulate()`` leave for one window: each micro-batch's loss divided by
    ``accumulation_steps``, in a short last window too. ``.grad`` is zeroed first."""
    trainable_parameters(model)
    positive_int(accumulation_steps, "accumulation_steps")
    model.zero_grad()
    for inputs, targets in _window(window):
        (loss_fn(model(inputs), targets) / accumulation_steps).backward()
    return current_gradients(model)


def num_items_gradients(
    model: nn.Module, window: Sequence[Batch], ignore_index: int = -100
) -> list[torch.Tensor]:
    """The gradient the Hugging Face Trainer leaves for one window of token batches: count
    the targets that are not ``ignore_index`` over the whole window (``num_items_in_batch``),
    then each micro-batch's loss is its summed token cross-entropy divided by that count."""
    trainable_parameters(model)
    window = _window(window)
    num_items = sum(int((targets != ignore_index).sum()) for _, targets in window)
    if num_items == 0:
        raise ValueError(_("the window has no targets that are not ignore_index"))
    model.zero_grad()
    for inputs, targets in window:
        token_sum = F.cross_entropy(
            model(inputs), targets, ignore_index=ignore_index, reduction="sum"
        )
        (token_sum / num_items).backward()
    return current_gradients(model)


def trainer_fallback_gradients(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    window: Sequence[Batch],
) -> list[torch.Tensor]:
    """The gradient the Hugging Face Trainer leaves for one window when it does not count
    items (the model's ``forward`` takes no ``**kwargs`` and no ``compute_loss_func`` is
    set): each micro-batch's loss divided by the number of micro-batches in the window, the
    window's own (a short last window is divided by its size, not by
    ``gradient_accumulation_steps``). ``.grad`` is zeroed first."""
    trainable_parameters(model)
    window = _window(window)
    model.zero_grad()
    for inputs, targets in window:
        (loss_fn(model(inputs), targets) / len(window)).backward()
    return current_gradients(model)


def mean_of_means_gradients(
    model: nn.Module, window: Sequence[Batch], ignore_index: int = -100
) -> list[torch.Tensor]:
    """The gradient of token batches before the Trainer's 2024 fix, and in its fallback
    today (:func:`trainer_fallback_gradients`): each micro-batch's mean token loss, divided
    by the number of micro-batches in the window."""

    def mean_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets, ignore_index=ignore_index)

    return trainer_fallback_gradients(model, mean_token_loss, window)
