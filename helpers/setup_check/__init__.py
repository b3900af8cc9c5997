"""Notebook 00, setup check: the environment report (versions, device, what to do) and the
exercise's checker."""
