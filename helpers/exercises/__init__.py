"""Checkers for the exercises, one module per notebook."""
