"""The smoke run's recipe: the one place its numbers live (experiments/presets.yaml `smoke` mirrors them).

Shape `smoke` (4 layers, d 128, 4 heads, seq 256, compact vocab 2048) on the bundled corpus: 150 updates of
8 x 256 = 2,048 tokens (307k tokens), sized for well under a minute of training on 2 CPU cores. The paper's
warm-ups are 2.6% (LR, 1000 of 38,147) and 0.26% (momentum, 100) of the run; at 150 steps that would be 4
and <1 updates, so they are rounded up to 10% and ~7% (15 and 10 steps) [inference: a short run needs a
visible warm-up to stay stable]. Everything else is the paper's recipe. The corpus's unigram entropy is
5.06 nats; the val loss passes it within ~25 updates.
"""

from __future__ import annotations

SMOKE_TRAIN: dict = {
    "data": "smoke",
    "steps": 150,
    "batch_tokens": 2048,
    "micro_batch_seqs": 8,
    "seq_len": 256,
    "warmup_steps": 15,
    "muon_momentum_steps": 10,
    "val_every": 50,
    "val_batches": 4,
    "final_val_tokens": 65536,
    "checkpoint_every": 100,
}
"""TrainConfig fields of the smoke run that differ from the paper's defaults."""
