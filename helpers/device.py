"""Choosing the device a notebook computes on: CUDA, then Apple's MPS, then the CPU."""

from __future__ import annotations

import os

import torch

from helpers.translation import _

DEVICE_ENV_VAR = "GM_DEVICE"
"""Set this environment variable to ``cpu``, ``cuda`` or ``mps`` to override the choice."""

_KNOWN = ("cpu", "cuda", "mps")


def _available(kind: str) -> bool:
    if kind == "cuda":
        return torch.cuda.is_available()
    if kind == "mps":
        backend = getattr(torch.backends, "mps", None)
        return bool(backend is not None and backend.is_available())
    return True


def pick_device(preferred: str | None = None) -> torch.device:
    """Return the best available device, or ``preferred`` (or ``$GM_DEVICE``) when given.

    >>> pick_device("cpu")
    device(type='cpu')
    """
    if preferred is None:
        preferred = os.environ.get(DEVICE_ENV_VAR) or None
    if preferred is not None:
        if not isinstance(preferred, str):
            raise TypeError(
                _("preferred must be a string such as 'cpu', not {kind}").format(
                    kind=type(preferred).__name__
                )
            )
        kind = preferred.strip().lower()
        if kind not in _KNOWN:
            raise ValueError(
                _("unknown device {preferred!r}: use one of {known}").format(
                    preferred=preferred, known=", ".join(_KNOWN)
                )
            )
        if not _available(kind):
            raise ValueError(
                _(
                    "device {kind!r} was asked for but is not available on this machine; "
                    "use 'cpu' or unset {variable}"
                ).format(kind=kind, variable=DEVICE_ENV_VAR)
            )
        return torch.device(kind)
    for kind in ("cuda", "mps"):
        if _available(kind):
            return torch.device(kind)
    return torch.device("cpu")


def describe_device(device: torch.device) -> str:
    """One line naming the device, with the GPU's model when there is one."""
    if not isinstance(device, torch.device):
        raise TypeError(_("expected a torch.device, got {kind}").format(kind=type(device).__name__))
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "mps":
        return "mps (Apple GPU)"
    return "cpu"
