"""Starting a small multi-process program from a notebook the way torchrun does (launcher,
run_ranks; launch_server forks the launchers of a test session's many runs), and what every
rank needs to end cleanly (rank_runtime)."""
