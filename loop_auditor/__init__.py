"""The loop auditor: watches a PyTorch training loop you do not change and reports the classic
gradient bugs (a missing ``zero_grad()``, a dropped tail window, clipping per micro-batch, a
GAN loss leaking into the other network, ...), each with what happened and the fix.

Its own import name, so that it never clashes with a project's ``helpers`` module:

```python
from loop_auditor import LoopAuditor
```

or, for a script you do not want to touch, ``python -m loop_auditor train.py``.
"""

from loop_auditor.auditor import LoopAuditor
from loop_auditor.findings import CODES, Finding

__all__ = ["CODES", "Finding", "LoopAuditor"]
