"""Notebook 01, autograd accumulates: why forgetting zero_grad blows up (dynamics) and the
exercises' checkers."""
