"""Small, seeded data sets that the notebooks make on the spot (nothing is downloaded)."""

from __future__ import annotations

import torch
from torch import nn

from helpers.arguments import positive_int
from helpers.translation import _

Batch = tuple[torch.Tensor, torch.Tensor]


def make_article_setup(
    seed: int = 42, n_samples: int = 100, n_features: int = 10
) -> tuple[torch.Tensor, torch.Tensor, nn.Linear]:
    """The source article's first experiment: ``torch.manual_seed(seed)``, then
    ``X = torch.randn(n_samples, n_features)``, ``y = torch.randn(n_samples, 1)``, then
    ``nn.Linear(n_features, 1, bias=False)``.

    The article built its model *before* seeding, so its starting weights changed on every
    run; here the model is made right after the data, from the same seeded stream. The
    global random state is left as it was.
    """
    positive_int(n_samples, "n_samples")
    positive_int(n_features, "n_features")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        inputs = torch.randn(n_samples, n_features)
        targets = torch.randn(n_samples, 1)
        model = nn.Linear(n_features, 1, bias=False)
    return inputs, targets, model


def split_batches(inputs: torch.Tensor, targets: torch.Tensor, batch_size: int) -> list[Batch]:
    """Cut ``inputs`` and ``targets`` into consecutive batches, in order, like the article's
    ``X[i*20:(i+1)*20]``; the last batch is shorter when ``batch_size`` does not divide."""
    if not isinstance(inputs, torch.Tensor) or not isinstance(targets, torch.Tensor):
        raise TypeError(_("inputs and targets must be tensors"))
    positive_int(batch_size, "batch_size")
    if len(inputs) == 0:
        raise ValueError(_("inputs is empty: give at least one sample"))
    if len(inputs) != len(targets):
        raise ValueError(
            _(
                "inputs has {n_inputs} samples but targets has {n_targets}: they must "
                "have the same length"
            ).format(n_inputs=len(inputs), n_targets=len(targets))
        )
    return [
        (inputs[start : start + batch_size], targets[start : start + batch_size])
        for start in range(0, len(inputs), batch_size)
    ]


def make_padded_tokens(
    n_sequences: int, max_length: int, vocab: int = 11, seed: int = 0, pad: int = -100
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Random token sequences of random lengths (1 to ``max_length``), padded: returns
    ``tokens`` and ``targets`` of shape (n_sequences, max_length), where targets past each
    sequence's end are ``pad`` (ignored by ``nn.CrossEntropyLoss``), and the lengths."""
    positive_int(n_sequences, "n_sequences")
    positive_int(max_length, "max_length")
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_length + 1, (n_sequences,), generator=generator).tolist()
    tokens = torch.randint(0, vocab, (n_sequences, max_length), generator=generator)
    targets = torch.randint(0, vocab, (n_sequences, max_length), generator=generator)
    for row, length in enumerate(lengths):
        targets[row, length:] = pad
    return tokens, targets, lengths


def make_teacher_batches(
    n_batches: int = 12, batch_size: int = 8, features: int = 8, seed: int = 0
) -> list[Batch]:
    """Regression batches with something to learn: ``y = x @ w + 0.1 * noise`` for a fixed
    random ``w`` (seeded, the global random state untouched)."""
    for value, name in (
        (n_batches, "n_batches"),
        (batch_size, "batch_size"),
        (features, "features"),
    ):
        positive_int(value, name)
    generator = torch.Generator().manual_seed(seed)
    teacher = torch.randn(features, 1, generator=generator)
    inputs = torch.randn(n_batches * batch_size, features, generator=generator)
    targets = inputs @ teacher + 0.1 * torch.randn(len(inputs), 1, generator=generator)
    return list(zip(inputs.split(batch_size), targets.split(batch_size), strict=True))
