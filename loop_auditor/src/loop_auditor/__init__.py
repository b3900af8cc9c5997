"""The loop auditor: watches a PyTorch training loop you do not change and reports the classic
gradient bugs (a missing ``zero_grad()``, a dropped tail window, clipping per micro-batch, a
GAN loss leaking into the other network, ...), each with what happened and the fix.

Its own import name, so that it never clashes with a project's ``helpers`` module:

```python
from loop_auditor import LoopAuditor
```

or, for a script you do not want to touch, ``python -m loop_auditor train.py``.

Importing the package imports no torch: its names load on first use (PEP 562), since pytest
imports ``loop_auditor.pytest_plugin``, and so this package, at the start of every run once the
package is installed. The torch version is checked here all the same, from torch's installed
metadata when torch is not imported yet.
"""

import importlib as _importlib
import re as _re
import sys as _sys

# The oldest torch the auditor runs on: its whole test suite passes on torch 2.3.0 (the course's
# floor, helpers/versions.py's TORCH_FLOOR; tests/core/test_versions.py keeps them equal).
TORCH_MINIMUM = (2, 3)


def torch_too_old(version: str) -> str | None:
    """Why the loop auditor cannot run on torch ``version`` (with the fix), or None."""
    found = tuple(int(part) for part in _re.findall(r"\d+", version.split("+")[0])[:2])
    if found >= TORCH_MINIMUM:
        return None
    from loop_auditor.language import _

    needed = ".".join(map(str, TORCH_MINIMUM))
    return _(
        "the loop auditor needs torch {needed} or newer, and this is torch {version}: "
        "run `python -m pip install -U torch`"
    ).format(needed=needed, version=version)


def _torch_version() -> str | None:
    """The torch this process runs: the imported one's version, else the installed one's
    (from its metadata, without importing it); None when neither is known."""
    torch = _sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:  # no torch, or one without metadata: its import says
        return None


def _refuse_an_old_torch() -> None:
    version = _torch_version()
    if version is not None and (reason := torch_too_old(version)):
        raise ImportError(reason)


_refuse_an_old_torch()

# name -> the module that defines it, imported on first use
_LAZY = {"LoopAuditor": "auditor", "CODES": "findings", "Finding": "findings"}

__all__ = ["CODES", "TORCH_MINIMUM", "Finding", "LoopAuditor", "torch_too_old"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
