"""Starting a small multi-process program from a notebook the way torchrun does (launcher,
run_ranks), and what every rank needs to end cleanly (rank_runtime)."""
