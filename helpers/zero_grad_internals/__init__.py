"""Notebook 02, inside zero_grad: what zero_grad does, observed on the installed torch; None
versus zeros in an optimizer step; the exercises' checkers."""
