"""The loop auditor, under the name the notebooks use: ``from helpers.audit import LoopAuditor``
(and ``AuditSession``, which audits every optimizer a piece of code builds).

It lives in its own package, :mod:`loop_auditor`, so that practitioners import it without
clashing with a ``helpers`` module of their own. ``python -m helpers.audit script.py`` runs the
same command as ``python -m loop_auditor script.py``.
"""

from loop_auditor import CODES, Finding, LoopAuditor
from loop_auditor.session import AuditSession

__all__ = ["CODES", "AuditSession", "Finding", "LoopAuditor"]

if __name__ == "__main__":
    import sys

    from loop_auditor.cli import main

    sys.exit(main())
