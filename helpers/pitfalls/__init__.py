"""Notebook 05, pitfalls: the buggy loops (notebook 06 audits them again) and the exercise's
checker."""
