"""``python -m loop_auditor [--accumulation-steps K] script.py [args...]``"""

import sys

from loop_auditor.cli import main

sys.exit(main())
