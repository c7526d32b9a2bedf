"""Training-step throughput per variant relative to `gated`, and shard-reader throughput vs numpy.

1. A full training step (forward with document masks, CE + z-loss, backward, grad clip, Muon + AdamW step)
   at the CPU proxy shape (8 layers, d 256, 4 heads, 512 tokens, batch 4), every variant in the same
   process, repetitions interleaved round-robin after a warm-up; tokens/s medians divided by gated's.
2. Shard reading: tokens/s of `read_shard` (validated header, memory-mapped, copied to RAM) against a plain
   `np.fromfile` of the same file, and of the loader's packed-batch assembly (`TrainBatches.next_step`).

    python benchmarks/bench_train.py [--reps 5] [--variants gated e-exoformer ...] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from exoformer.data.loader import TrainBatches
from exoformer.data.shards import HEADER_BYTES, read_shard, write_shard
from exoformer.model import ExoTransformer, list_variants, variant_config
from exoformer.train.config import TrainConfig
from exoformer.train.loss import lm_loss
from exoformer.train.optim import build_optimizers

REFERENCE = "gated"
DEFAULT_VARIANTS = ("base", "gated", "gated-resformer", "e-nuresformer", "e-exoformer", "dynamic-e-exoformer")


class StepRunner:
    """One variant's model, optimisers and a fixed batch; `step()` returns seconds for one full update."""

    def __init__(self, variant: str, batch: int, recipe: TrainConfig) -> None:
        torch.manual_seed(0)
        self.config = variant_config(variant, "proxy")
        self.model = ExoTransformer(self.config)
        self.optimizers = build_optimizers(self.model, recipe)
        T = self.config.seq_len
        self.x = torch.randint(1, self.config.vocab_size, (batch, T))
        self.y = torch.randint(1, self.config.vocab_size, (batch, T))
        self.doc_starts = torch.zeros(batch, T, dtype=torch.bool)
        self.doc_starts[:, [0, T // 3, T // 2]] = True
        self.z_loss, self.clip = recipe.z_loss, recipe.grad_clip

    def step(self) -> float:
        start = time.perf_counter()
        loss, _, _ = lm_loss(self.model(self.x, self.doc_starts), self.y, self.z_loss)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        for opt in self.optimizers:
            opt.step()
            opt.zero_grad(set_to_none=True)
        return time.perf_counter() - start


def bench_steps(variants: list[str], reps: int, warmup: int, batch: int) -> None:
    runners = {v: StepRunner(v, batch, TrainConfig()) for v in variants}
    for _ in range(warmup):
        for runner in runners.values():
            runner.step()
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(reps):
        for v, runner in runners.items():
            times[v].append(runner.step())
    tokens = batch * runners[variants[0]].config.seq_len
    reference = statistics.median(times[REFERENCE]) if REFERENCE in times else None
    print(f"training step, proxy shape, batch {batch} x {runners[variants[0]].config.seq_len} tokens, "
          f"{torch.get_num_threads()} threads, median of {reps}:")
    print(f"{'variant':<24}{'ms/step':>10}{'tokens/s':>11}{'vs gated':>10}")
    for v in variants:
        median = statistics.median(times[v])
        ratio = f"{reference / median:.3f}x" if reference else "n/a"
        print(f"{v:<24}{1000 * median:>10.1f}{tokens / median:>11.0f}{ratio:>10}")
    print("(vs gated = tokens/s relative to gated's; below 1 is slower)")


def bench_reader(tokens: int, reps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        path = directory / "bench_train_000000.bin"
        rng = np.random.default_rng(0)
        write_shard(path, rng.integers(0, 50257, tokens, dtype=np.int64))
        write_shard(directory / "bench_val_000000.bin", rng.integers(0, 50257, 4096, dtype=np.int64))

        def timed(fn) -> float:
            best = []
            for _ in range(reps):
                start = time.perf_counter()
                fn()
                best.append(time.perf_counter() - start)
            return statistics.median(best)

        ours = timed(lambda: np.array(read_shard(path)).sum())
        plain = timed(lambda: np.fromfile(path, dtype=np.uint16, offset=HEADER_BYTES).sum())
        loader = TrainBatches(directory, seq_len=2048, step_seqs=128, micro_batch_seqs=16, seed=0)
        steps = 20
        packed = timed(lambda: [loader.next_step() for _ in range(steps)])
        print(f"shard reading, {tokens:,} tokens (file in page cache), median of {reps}:")
        print(f"  read_shard (mmap, validated)  {tokens / ours / 1e6:8.1f} M tokens/s")
        print(f"  np.fromfile                   {tokens / plain / 1e6:8.1f} M tokens/s")
        print(f"  read_shard / np.fromfile speed: {plain / ours:.2f}x")
        print(f"  packed batches (16x2048, doc starts, shuffled)  {steps * 128 * 2048 / packed / 1e6:8.1f} "
              f"M tokens/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--variants", nargs="*", default=list(DEFAULT_VARIANTS), help="'all' for every variant")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--shard-tokens", type=int, default=20_000_000)
    parser.add_argument("--skip-steps", action="store_true", help="only the shard reader")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    variants = list_variants() if args.variants == ["all"] else args.variants
    if not args.skip_steps:
        bench_steps(variants, args.reps, args.warmup, args.batch)
    bench_reader(args.shard_tokens, args.reps)


if __name__ == "__main__":
    main()
