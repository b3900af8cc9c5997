"""Notebook 06, the loop auditor and repairs: the loops to repair, how a repair is run and
recorded, and the checkers."""
