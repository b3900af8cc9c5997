"""The loop auditor, under the name the notebooks use: ``from helpers.audit import LoopAuditor``.

It lives in its own package, :mod:`loop_auditor`, so that practitioners import it without
clashing with a ``helpers`` module of their own. ``python -m helpers.audit script.py`` runs the
same command as ``python -m loop_auditor script.py``.
"""

from loop_auditor import CODES, Finding, LoopAuditor

__all__ = ["CODES", "Finding", "LoopAuditor"]

if __name__ == "__main__":
    import sys

    from loop_auditor.cli import main

    sys.exit(main())
