"""Small, tested helpers for the notebook course *Gradient Mechanics in PyTorch*.

Notebooks import from the submodules (``helpers.device``, ``helpers.training``, ...);
each function checks its arguments and says what to change when they are wrong.
"""

__version__ = "0.1.0"
