"""A tiny run (model, recipe, token shards) shared by the training tests and their subprocesses."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from exoformer.data.shards import write_shard
from exoformer.data.tokenizer import CompactTokenizer, gpt2
from exoformer.model.config import ModelConfig
from exoformer.train.config import TrainConfig

VOCAB = 64
EOT = 0  # compact vocabularies put EOT at id 0


def write_tiny_data(directory: Path, *, train_tokens=(3000, 2500), val_tokens=1200, seed=0) -> Path:
    """Random documents (each preceded by EOT) in the modded-nanogpt shard format, with a compact vocab.json."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    def documents(n: int) -> np.ndarray:
        out: list[int] = []
        while len(out) < n:
            length = int(rng.integers(5, 40))
            start = int(rng.integers(2, VOCAB - 8))
            out += [EOT] + [(start + i) % (VOCAB - 2) + 2 for i in range(length)]  # learnable runs
        return np.array(out[:n], dtype=np.int64)

    for i, n in enumerate(train_tokens):
        write_shard(directory / f"tiny_train_{i:06d}.bin", documents(n))
    write_shard(directory / "tiny_val_000000.bin", documents(val_tokens))
    CompactTokenizer(gpt2(), range(VOCAB - 2)).save(directory / "vocab.json")
    return directory


def tiny_model(**overrides) -> ModelConfig:
    fields = dict(n_layer=2, n_head=2, d_model=32, vocab_size=VOCAB, seq_len=32, gated=True,
                  mix_paths=("q", "k", "v", "g"), anchor="h0", anchor_norm_paths=("q", "k", "v", "g"), dynamic=True)
    return ModelConfig(**(fields | overrides))


def tiny_train(data: Path, **overrides) -> TrainConfig:
    fields = dict(steps=12, batch_tokens=4 * 32, micro_batch_seqs=2, seq_len=32, data=str(data), warmup_steps=3,
                  muon_momentum_steps=3, val_every=4, val_batches=2, checkpoint_every=5, keep_checkpoints=2,
                  final_val_tokens=256, precision="fp32")
    return TrainConfig(**(fields | overrides))
