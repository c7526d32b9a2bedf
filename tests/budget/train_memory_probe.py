"""Run in a fresh process: two steps of the real training loop (exoformer.train.loop.train) and print, as JSON,
the peak resident memory above what the process held just before training.

A first run of a toy model pays what `train` loads once (lazy imports, the tokenizer, thread pools), so the
difference is the training step's own tensors.

Why resident memory: it counts every byte torch's CPU allocator hands out, whatever op asks. The caller sets
MALLOC_MMAP_THRESHOLD_ so that glibc serves each large tensor from its own mapping and returns it on free;
then the high-water mark is the peak of live tensors plus the process's small fixed costs, not the leftovers
of a fragmented heap. The mark is reset just before training (writing 5 to /proc/self/clear_refs resets
VmHWM, Linux's peak resident set, to the current resident set), so a higher peak earlier in the process (an
import, a first tokenizer build, the warm-up) is never read as the training step's.

    python train_memory_probe.py VARIANT N_LAYER D_MODEL N_HEAD VOCAB SEQ MICRO_BATCH PRECISION WORKDIR
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import torch

from exoformer.model import variant_config
from exoformer.train.config import TrainConfig
from exoformer.train.loop import train

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
from train_tiny import write_tiny_data  # noqa: E402


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_bytes() -> int:
    """VmHWM of /proc/self/status: the peak resident set since the last reset_peak."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM line in /proc/self/status")


def main(argv: list[str]) -> None:
    variant, n_layer, d_model, n_head, vocab, seq, micro, precision, workdir = argv
    seq, micro = int(seq), int(micro)
    work = Path(workdir)
    data = write_tiny_data(work / "data", train_tokens=(4000, 4000), val_tokens=2000)
    model = variant_config(variant, "tiny", n_layer=int(n_layer), d_model=int(d_model), n_head=int(n_head),
                           vocab_size=int(vocab), seq_len=seq)
    recipe = TrainConfig(steps=2, batch_tokens=micro * seq, micro_batch_seqs=micro, seq_len=seq, data=str(data),
                         warmup_steps=1, muon_momentum_steps=1, val_every=0, val_batches=1, checkpoint_every=1000,
                         final_val_tokens=seq, precision=precision)
    torch.set_num_threads(1)
    # a first run of a toy model pays what train() loads once (lazy imports, tokenizer, thread pools)
    warm = variant_config(variant, "tiny", n_layer=2, seq_len=seq)
    train(warm, TrainConfig(**{**recipe.to_dict(), "steps": 1}), work / "warm", device="cpu")
    reset_peak()
    before = resident_bytes()
    result = train(model, recipe, work / "run", device="cpu")
    peak = peak_bytes()
    print(json.dumps({"peak_above_start": peak - before, "steps": result.step, "loss": result.final_train_loss}))


if __name__ == "__main__":
    main(sys.argv[1:])
