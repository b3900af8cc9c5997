"""Small, tested helpers for the notebook course *Gradient Mechanics in PyTorch*.

The layout (README, "For contributors"): each notebook's own code is in a folder named after
it (``helpers/gradient_accumulation/`` for ``03_gradient_accumulation.ipynb``, its exercise
checkers in ``checkers_03.py``); what two or more notebooks use is a module here, in the core
(``helpers.data``, ``helpers.training``, ``helpers.checks``, ...); starting processes and what a
rank needs to end cleanly is ``helpers.processes``. A notebook's code imports the core, the
processes and its own folder, and an earlier notebook's folder only to run that notebook's code
again; never a later notebook's (tests/core/test_layout.py). Each function checks its
arguments and says what to change when they are wrong."""
