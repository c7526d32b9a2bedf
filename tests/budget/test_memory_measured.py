"""The memory model against measurement: peak resident memory of two real training steps on CPU
(tests/budget/train_memory_probe.py in a fresh process) within 15% of `estimate_memory`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exoformer.train.config import LOSS_CHUNK_TOKENS
from exoformer.budget.memory import estimate_memory
from exoformer.model import variant_config

PROBE = Path(__file__).with_name("train_memory_probe.py")
REPO = Path(__file__).resolve().parents[2]

CASES = [  # variant, layers, width, heads, vocab, seq, micro-batch, precision
    ("gated", 4, 256, 4, 50304, 64, 2, "fp32"),  # weights, gradients and optimiser states dominate
    ("dynamic-e-exoformer", 4, 256, 4, 2048, 256, 8, "official-pure-bf16"),  # activations dominate
    ("e-nuresformer", 4, 256, 4, 2048, 256, 8, "bf16-autocast"),
    # weights and optimiser states in bf16, at a size where they dominate
    pytest.param("e-exoformer", 8, 512, 8, 50304, 64, 1, "official-pure-bf16", marks=pytest.mark.slow),
]


def measured_peak(tmp_path: Path, variant, layers, width, heads, vocab, seq, micro, precision) -> int:
    # glibc serves every allocation above 64 KiB from its own mapping and unmaps it on free, so the resident
    # high-water mark follows the live tensors instead of a fragmented heap
    # a clean environment: nothing another test left in os.environ (ranks, flags) changes what is measured
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"), "PYTHONPATH": str(REPO),
           "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    args = [variant, layers, width, heads, vocab, seq, micro, precision, tmp_path]
    done = subprocess.run([sys.executable, str(PROBE), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_above_start"]


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="the probe reads Linux's /proc/self/statm")
@pytest.mark.parametrize("variant, layers, width, heads, vocab, seq, micro, precision", CASES)
def test_peak_of_real_training_steps_is_within_15_percent_of_the_estimate(tmp_path, variant, layers, width, heads,
                                                                          vocab, seq, micro, precision):
    cfg = variant_config(variant, "tiny", n_layer=layers, d_model=width, n_head=heads, vocab_size=vocab,
                         seq_len=seq)
    estimate = estimate_memory(cfg, precision=precision, micro_batch=micro, seq_len=seq, device="cpu",
                               logits_chunk=LOSS_CHUNK_TOKENS)  # the training loop's chunked loss
    measured = measured_peak(tmp_path, variant, layers, width, heads, vocab, seq, micro, precision)
    assert measured == pytest.approx(estimate.peak_tensors, rel=0.15), (measured, estimate)
