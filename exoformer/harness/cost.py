"""Training cost of a spec: FLOPs, and GPU-hours (or CPU-minutes) on a profile.

FLOPs = 6 * N * tokens + attention, with
- N = every parameter except the input embedding (the lm_head matmul is real compute, the embedding lookup
  is not: Kaplan et al.'s "non-embedding" count leaves the head out, which would undercount by ~20% at 450M
  with a 50k vocabulary). Mixing coefficients, anchor projection and dynamic MLPs are in N.
- attention = 12 * n_layer * d_model * seq_len FLOPs per token (QK^T and AV: 2 * 2 * L * T * d forward,
  x3 for forward + backward), halved because causal attention needs only the lower triangle.
Evaluation, validation and analysis are not counted (they are a few % of training at 10B tokens).
GPU-hours = FLOPs / (peak_bf16_tflops * 1e12 * mfu * 3600), summed over GPUs (not wall-clock).
"""

from __future__ import annotations

from dataclasses import dataclass

from exoformer.harness.profiles import Profile
from exoformer.harness.spec import Spec


@dataclass(kw_only=True, slots=True, frozen=True)
class Cost:
    flops: float
    gpu_hours: float | None
    """None on a CPU profile."""
    cpu_minutes: float | None
    """None on a GPU profile (or a CPU profile without a cpu: section)."""


def compute_params(spec: Spec) -> int:
    """N of the cost model: all parameters minus the input embedding table."""
    return spec.model.num_parameters() - spec.model.vocab_size * spec.model.d_model


def training_flops(spec: Spec) -> float:
    tokens = spec.train.tokens
    dense = 6.0 * compute_params(spec) * tokens
    attention = 12.0 * spec.model.n_layer * spec.model.d_model * spec.train.seq_len * tokens / 2.0
    return dense + attention


def estimate(spec: Spec, profile: Profile) -> Cost:
    flops = training_flops(spec)
    if profile.gpu is not None:
        rate = profile.gpu.peak_bf16_tflops * 1e12 * profile.gpu.mfu
        return Cost(flops=flops, gpu_hours=flops / rate / 3600.0, cpu_minutes=None)
    if profile.cpu is not None:
        return Cost(flops=flops, gpu_hours=None, cpu_minutes=flops / (profile.cpu.gflops * 1e9) / 60.0)
    return Cost(flops=flops, gpu_hours=None, cpu_minutes=None)
