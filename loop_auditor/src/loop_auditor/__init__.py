"""The loop auditor: watches a PyTorch training loop you do not change and reports the classic
gradient bugs (a missing ``zero_grad()``, a dropped tail window, clipping per micro-batch, a
GAN loss leaking into the other network, ...), each with what happened and the fix.

Its own import name, so that it never clashes with a project's ``helpers`` module:

```python
from loop_auditor import LoopAuditor
```

or, for a script you do not want to touch, ``python -m loop_auditor train.py``.
"""

import re as _re

import torch as _torch

# The oldest torch the auditor runs on: its whole test suite passes on torch 2.3.0 (the course's
# floor, helpers/versions.py's TORCH_FLOOR; tests/core/test_versions.py keeps them equal).
TORCH_MINIMUM = (2, 3)


def torch_too_old(version: str) -> str | None:
    """Why the loop auditor cannot run on torch ``version`` (with the fix), or None."""
    found = tuple(int(part) for part in _re.findall(r"\d+", version.split("+")[0])[:2])
    if found >= TORCH_MINIMUM:
        return None
    needed = ".".join(map(str, TORCH_MINIMUM))
    return (
        f"the loop auditor needs torch {needed} or newer, and this is torch {version}: "
        "run `python -m pip install -U torch`"
    )


if _reason := torch_too_old(str(_torch.__version__)):
    raise ImportError(_reason)

from loop_auditor.auditor import LoopAuditor  # noqa: E402
from loop_auditor.findings import CODES, Finding  # noqa: E402

__all__ = ["CODES", "TORCH_MINIMUM", "Finding", "LoopAuditor", "torch_too_old"]
