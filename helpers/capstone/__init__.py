"""Notebook 09, the capstone: the setting, the reference run, the rank program that runs a
learner's function on 2 processes, and the checkers."""
