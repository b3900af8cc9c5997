"""Small models the notebooks train: MLPs, a shared trunk with two heads, a per-token
language-model head, and networks that differ only in their normalization layer."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from helpers.translation import _

NORMS = ("BatchNorm", "GroupNorm", "LayerNorm", "none")


class TokenModel(nn.Module):
    """Predicts a token at every position: (batch, time) token ids -> (batch, vocab, time)
    logits, the layout ``nn.CrossEntropyLoss`` expects."""

    def __init__(self, vocab: int = 11, width: int = 8, seed: int = 0):
        super().__init__()
        if vocab < 2 or width < 1:
            raise ValueError(_("vocab must be at least 2 and width at least 1"))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embed = nn.Embedding(vocab, width)
            self.mix = nn.Linear(width, width)
            self.out = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2:
            raise ValueError(
                _("tokens must have shape (batch, time), got {shape}").format(
                    shape=tuple(tokens.shape)
                )
            )
        return self.out(torch.tanh(self.mix(self.embed(tokens)))).transpose(1, 2)


def make_norm_model(norm: str, features: int = 8, width: int = 16, seed: int = 0) -> nn.Sequential:
    """Linear -> ``norm`` -> ReLU -> Linear, seeded; ``norm`` is one of ``NORMS``."""
    layers = {
        "BatchNorm": lambda: nn.BatchNorm1d(width),
        "GroupNorm": lambda: nn.GroupNorm(4, width),
        "LayerNorm": lambda: nn.LayerNorm(width),
        "none": nn.Identity,
    }
    if norm not in layers:
        raise ValueError(
            _("norm must be one of {names}, got {norm!r}").format(names=", ".join(NORMS), norm=norm)
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Linear(features, width), layers[norm](), nn.ReLU(), nn.Linear(width, 1)
        )


def make_mlp(widths: tuple[int, ...], seed: int = 0) -> nn.Sequential:
    """Linear layers of the given widths with ReLU between them (seeded)."""
    if len(widths) < 2 or not all(isinstance(w, int) and w > 0 for w in widths):
        raise ValueError(
            _("widths must be at least two positive whole numbers, e.g. (256, 64, 10)")
        )
    layers: list[nn.Module] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for index, (width_in, width_out) in enumerate(itertools.pairwise(widths)):
            if index:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(width_in, width_out))
    return nn.Sequential(*layers)


class TwoHeads(nn.Module):
    """A shared trunk (``make_mlp(widths)``) and two classification heads on it."""

    def __init__(self, widths: tuple[int, ...], seed: int = 0):
        super().__init__()
        self.trunk = make_mlp(widths[:-1], seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            self.head_a = nn.Linear(widths[-2], widths[-1])
            self.head_b = nn.Linear(widths[-2], widths[-1])

    def forward(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = torch.relu(self.trunk(inputs))
        return self.head_a(features), self.head_b(features)


def flat_weights(model: nn.Module) -> torch.Tensor:
    """Every parameter of ``model``, detached, as one float32 vector (a copy): weights to
    compare after training."""
    return torch.cat([p.detach().float().flatten() for p in model.parameters()])
