"""Why forgetting ``zero_grad`` blows up at one learning rate and not at another.

Without ``zero_grad`` the SGD update uses the running sum of every gradient so far,
``w <- w - lr * (g_1 + ... + g_t)``: heavy-ball momentum with beta = 1 and no damping.
For the article's model (a linear layer without bias, MSE loss) each step is linear in the
weights, so one pass over the batches is a fixed matrix acting on (weights, summed
gradient). The largest modulus of that matrix's eigenvalues says what happens epoch after
epoch: 1 means an oscillation that never grows and never settles, above 1 it grows
geometrically by that factor each epoch.
"""

from __future__ import annotations

import torch

from helpers.arguments import positive_int
from helpers.translation import _


def no_zero_grad_growth_factor(inputs: torch.Tensor, batch_size: int, lr: float) -> float:
    """Largest eigenvalue modulus of one epoch's map for SGD without ``zero_grad``.

    ``inputs`` are the samples of a least-squares problem ``mean((inputs @ w - y) ** 2)``
    split into consecutive batches of ``batch_size`` (the targets do not affect stability).
    """
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2:
        raise TypeError(_("inputs must be a 2-D tensor of shape (samples, features)"))
    if len(inputs) == 0:
        raise ValueError(_("inputs is empty: give at least one sample"))
    positive_int(batch_size, "batch_size")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or lr <= 0:
        raise ValueError(_("lr must be a positive number, got {lr!r}").format(lr=lr))
    data = inputs.detach().to("cpu", torch.float64)
    dim = data.shape[1]
    eye = torch.eye(dim, dtype=torch.float64)
    epoch_map = torch.eye(2 * dim, dtype=torch.float64)
    for start in range(0, len(data), batch_size):
        batch = data[start : start + batch_size]
        hessian = 2.0 * batch.T @ batch / len(batch)
        # state (w, s): s <- s + H w (backward adds into .grad), then w <- w - lr * s (step)
        step_map = torch.cat(
            [
                torch.cat([eye - lr * hessian, -lr * eye], dim=1),
                torch.cat([hessian, eye], dim=1),
            ]
        )
        epoch_map = step_map @ epoch_map
    return torch.linalg.eigvals(epoch_map).abs().max().item()
