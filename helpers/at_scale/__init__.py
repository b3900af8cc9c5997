"""Notebook 07, accumulation at scale: AMP, clipping and a scheduler per optimizer step; DDP's
no_sync on real processes; the frameworks' accumulation mirrored; the checkers."""
