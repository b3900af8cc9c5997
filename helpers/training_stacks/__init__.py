"""Notebook 08, today's training stacks: token losses over ranks, unequal micro-batches, FSDP2,
compile, optimizer-in-backward; their rank programs and runs; the checkers."""
