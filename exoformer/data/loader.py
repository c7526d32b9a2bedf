"""Packed training and validation batches from token shards (docs/official_code.md 4.1).

A shard of n tokens holds floor((n-1)/T) non-overlapping chunks; chunk i is x = tok[i*T : i*T+T] and
y = tok[i*T+1 : i*T+T+1]. `doc_starts[b, t]` is True where x is EOT (each document is *preceded* by EOT,
which belongs to the document it opens) and at t = 0.

Training order: one permutation of all chunks of all train shards per epoch, drawn from seed + epoch, so
the order depends on nothing but the seed. An optimiser step consumes the next `step_seqs` chunks of the
permutation (the global batch); rank r of W takes the r-th contiguous W-th of them and splits it into
micro-batches. The global batch is therefore the same for any world size, and the position
(epoch, index) is all the state a checkpoint needs. An epoch's tail shorter than a global batch is
dropped (official: drop_last) and the next epoch starts.

Validation: chunks of the val shards in order, unshuffled; batch k is always the same chunks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from exoformer.data.shards import find_shards, read_shard
from exoformer.data.tokenizer import GPT2_EOT
from exoformer.errors import UserError


@dataclass(kw_only=True, slots=True)
class Batch:
    x: torch.Tensor  # (B, T) int64 inputs
    y: torch.Tensor  # (B, T) int64 targets, x shifted by one
    doc_starts: torch.Tensor  # (B, T) bool, True at t=0 and where x == EOT


class ChunkedShards:
    """The chunks of a list of shards, addressed by one global index (shards in sorted order)."""

    def __init__(self, paths: list[Path], seq_len: int, *, vocab_size: int | None = None, eot: int = GPT2_EOT) -> None:
        self.paths, self.seq_len, self.vocab_size, self.eot = paths, seq_len, vocab_size, eot
        self.tokens = [read_shard(p) for p in paths]
        counts = np.array([max(0, (t.size - 1) // seq_len) for t in self.tokens], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(counts)])
        if self.num_chunks == 0:
            raise UserError(f"shards hold no complete {seq_len}-token sequence", where=str(paths[0].parent),
                            fix="use a smaller seq_len or more data")

    @property
    def num_chunks(self) -> int:
        return int(self.offsets[-1])

    def chunk(self, index: int) -> tuple[np.ndarray, int]:
        """(T+1 tokens of one chunk: the inputs and the one extra target token, index of its shard)."""
        shard = int(np.searchsorted(self.offsets, index, side="right")) - 1
        start = (index - int(self.offsets[shard])) * self.seq_len
        return self.tokens[shard][start : start + self.seq_len + 1], shard

    def batch(self, indices) -> Batch:
        rows = []
        for i in indices:
            tokens, shard = self.chunk(int(i))
            rows.append(tokens)
            if self.vocab_size is not None and int(tokens.max()) >= self.vocab_size:
                raise UserError(f"token id {int(tokens.max())} >= model vocab_size {self.vocab_size}",
                                where=str(self.paths[shard]), fix="use a model with a larger vocab_size")
        data = torch.from_numpy(np.stack(rows).astype(np.int64))
        x, y = data[:, :-1], data[:, 1:]
        doc_starts = x == self.eot
        doc_starts[:, 0] = True
        return Batch(x=x, y=y, doc_starts=doc_starts)

    def check_vocab(self, limit_tokens: int = 1 << 28) -> None:
        """Fail early, naming the shard, if a token id does not fit the model (scans up to `limit_tokens`)."""
        if self.vocab_size is None:
            return
        scanned = 0
        for path, tokens in zip(self.paths, self.tokens):
            if scanned >= limit_tokens:
                break
            if tokens.size and int(tokens.max()) >= self.vocab_size:
                raise UserError(f"token id {int(tokens.max())} >= model vocab_size {self.vocab_size}",
                                where=str(path), fix="use a model with a larger vocab_size")
            scanned += tokens.size


class TrainBatches:
    """Deterministic shuffled global batches; this rank's micro-batches of each optimiser step."""

    def __init__(self, data_dir: str | os.PathLike, *, seq_len: int, step_seqs: int, micro_batch_seqs: int,
                 seed: int, rank: int = 0, world_size: int = 1, vocab_size: int | None = None,
                 eot: int = GPT2_EOT) -> None:
        if step_seqs % (world_size * micro_batch_seqs):
            raise UserError(f"a global batch of {step_seqs} sequences does not split into {world_size} ranks x "
                            f"micro-batches of {micro_batch_seqs}", where="train.micro_batch_seqs",
                            fix="choose micro_batch_seqs and the rank count to divide the batch")
        self.shards = ChunkedShards(find_shards(data_dir, "train"), seq_len, vocab_size=vocab_size, eot=eot)
        if self.shards.num_chunks < step_seqs:
            raise UserError(f"train shards hold {self.shards.num_chunks} sequences, fewer than one global batch "
                            f"({step_seqs})", where=str(data_dir), fix="use a smaller batch_tokens or more data")
        self.step_seqs, self.micro_batch_seqs = step_seqs, micro_batch_seqs
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.epoch, self.index = 0, 0
        self._order_epoch, self._order = -1, np.empty(0, dtype=np.int64)

    def _permutation(self) -> np.ndarray:
        if self._order_epoch != self.epoch:
            rng = np.random.Generator(np.random.PCG64(self.seed + self.epoch))
            self._order, self._order_epoch = rng.permutation(self.shards.num_chunks), self.epoch
        return self._order

    def next_step(self) -> list[Batch]:
        """This rank's micro-batches for the next optimiser step; advances the position."""
        if self.index + self.step_seqs > self.shards.num_chunks:
            self.epoch, self.index = self.epoch + 1, 0
        global_batch = self._permutation()[self.index : self.index + self.step_seqs]
        self.index += self.step_seqs
        per_rank = self.step_seqs // self.world_size
        mine = global_batch[self.rank * per_rank : (self.rank + 1) * per_rank]
        return [self.shards.batch(mine[i : i + self.micro_batch_seqs])
                for i in range(0, per_rank, self.micro_batch_seqs)]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed, "step_seqs": self.step_seqs,
                "num_chunks": self.shards.num_chunks}

    def load_state_dict(self, state: dict) -> None:
        current = {"seed": self.seed, "step_seqs": self.step_seqs, "num_chunks": self.shards.num_chunks}
        for key, value in current.items():
            if state[key] != value:
                raise UserError(f"the checkpoint's data position was saved with {key}={state[key]}, this run has "
                                f"{value}", where="train.data", fix="resume with the same data, seed and batch size")
        self.epoch, self.index = int(state["epoch"]), int(state["index"])


def validation_batches(data_dir: str | os.PathLike, *, seq_len: int, batch_seqs: int, max_seqs: int | None = None,
                       vocab_size: int | None = None, eot: int = GPT2_EOT, rank: int = 0,
                       world_size: int = 1) -> Iterator[Batch]:
    """Validation chunks in order, in batches of `batch_seqs` (the last may be shorter).

    With several ranks, rank r yields batches r, r+W, r+2W, ...; summing over ranks covers each once.
    """
    shards = ChunkedShards(find_shards(data_dir, "val"), seq_len, vocab_size=vocab_size, eot=eot)
    total = shards.num_chunks if max_seqs is None else min(max_seqs, shards.num_chunks)
    for k, start in enumerate(range(0, total, batch_seqs)):
        if k % world_size == rank:
            yield shards.batch(range(start, min(start + batch_seqs, total)))
