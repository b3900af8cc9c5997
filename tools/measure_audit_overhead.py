"""How much the loop auditor slows a training step, on a small GPT-like model on the CPU.

    python tools/measure_audit_overhead.py [--rounds 7] [--steps 5]

The model: token and position embeddings, 8 pre-norm transformer blocks of width 64 (4 heads),
a final LayerNorm and a head: 102 parameter tensors, 0.4 M parameters. Each optimizer step
accumulates 4 micro-batches of 8 sequences of 32 tokens (AdamW, clip_grad_norm_, a scheduler).
Rounds alternate bare and audited runs of ``--steps`` steps each, for both ``set_to_none``
modes, so that a busy machine slows both alike; it prints the median time per step of each and
the median of the per-round ratios, and how often the auditor read a value from the device (a
host-device synchronization on a GPU; here only once per audited run, for the zeros the warm-up
step left in .grad with set_to_none=False).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from loop_auditor import LoopAuditor

VOCAB, WIDTH, HEADS, LAYERS, CONTEXT = 256, 64, 4, 8, 32
K, MICRO_BATCH = 4, 8


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Embedding(CONTEXT, WIDTH)
        layer = nn.TransformerEncoderLayer(
            WIDTH, HEADS, 4 * WIDTH, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(CONTEXT))

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1]))
        return self.head(self.norm(self.blocks(x, mask=self.mask, is_causal=True)))


def make_run(seed: int = 0):
    torch.manual_seed(seed)
    model = TinyGPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    generator = torch.Generator().manual_seed(seed + 1)
    data = torch.randint(0, VOCAB, (64, MICRO_BATCH, CONTEXT + 1), generator=generator)
    return model, optimizer, scheduler, data


def train(model, optimizer, scheduler, data, steps: int, set_to_none: bool) -> None:
    for step in range(steps):
        for micro in range(K):
            batch = data[(step * K + micro) % len(data)]
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
            (loss / K).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=set_to_none)


def seconds_per_step(steps: int, set_to_none: bool, audited: bool) -> tuple[float, int]:
    model, optimizer, scheduler, data = make_run()
    train(model, optimizer, scheduler, data, 1, set_to_none)  # warm up
    start = time.perf_counter()
    reads = 0
    if audited:
        with LoopAuditor(model, optimizer, accumulation_steps=K) as audit:
            train(model, optimizer, scheduler, data, steps, set_to_none)
        if audit.findings:
            raise RuntimeError(f"the benchmark loop should be correct:\n{audit}")
        reads = audit.host_reads
    else:
        train(model, optimizer, scheduler, data, steps, set_to_none)
    return (time.perf_counter() - start) / steps, reads


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    options = parser.parse_args(argv)
    tensors = sum(1 for _ in TinyGPT().parameters())
    parameters = sum(p.numel() for p in TinyGPT().parameters())
    print(
        f"TinyGPT: {tensors} parameter tensors, {parameters / 1e6:.2f} M parameters; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    for set_to_none in (True, False):
        bare, audited, ratios, reads = [], [], [], 0
        for _ in range(options.rounds):
            b, _ = seconds_per_step(options.steps, set_to_none, audited=False)
            a, r = seconds_per_step(options.steps, set_to_none, audited=True)
            bare.append(b)
            audited.append(a)
            ratios.append(a / b)
            reads += r
        print(
            f"set_to_none={set_to_none}: {statistics.median(bare) * 1e3:.1f} ms per step bare, "
            f"{statistics.median(audited) * 1e3:.1f} ms audited; overhead "
            f"{statistics.median(ratios) - 1:+.1%} (median of {options.rounds} rounds); "
            f"device reads by the auditor: {reads} in {options.rounds * options.steps} steps"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
