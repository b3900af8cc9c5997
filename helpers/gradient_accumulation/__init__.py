"""Notebook 03, gradient accumulation: accumulation in everyday training (a schedule, the
article's run) and the exercises' checkers."""
