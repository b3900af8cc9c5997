"""Notebook 04, several losses and one backward: per-task gradients, weighting, PCGrad, and the
exercises' checkers."""
