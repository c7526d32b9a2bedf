"""Training cost of a spec: FLOPs, and GPU-hours (or CPU-minutes) on a profile.

FLOPs = 6 * N * tokens + attention, with
- N = every parameter except the input embedding (the lm_head matmul is real compute, the embedding lookup
  is not: Kaplan et al.'s "non-embedding" count leaves the head out, which would undercount by ~20% at 450M
  with a 50k vocabulary). Mixing coefficients, anchor projection and dynamic MLPs are in N.
- attention = 12 * n_layer * d_model * seq_len FLOPs per token (QK^T and AV: 2 * 2 * L * T * d forward,
  x3 for forward + backward), halved because causal attention needs only the lower triangle.
Evaluation, validation and analysis are not counted (they are a few % of training at 10B tokens).
GPU-hours = FLOPs / (peak_bf16_tflops * 1e12 * mfu * 3600), summed over GPUs (not wall-clock).

MFU: the profile's assumed value (40%), unless `benchmarks/gpu_check.py` has written a measurement
(results/gpu_check.json, or the file named by $EXOFORMER_GPU_CHECK) on a GPU of the profile's bf16 peak:
then the measured MFU of the spec's variant (or, for a variant it did not train, the lowest it measured).
An explicit `--set profile.gpu.mfu=...` (or a profile file whose mfu is not the assumed value) wins over
the measurement. The returned Cost names where its MFU came from (`mfu_source`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from exoformer.harness.profiles import Profile, load_profile, profiles_dir
from exoformer.harness.registry import REPO_ROOT
from exoformer.harness.spec import Spec
from exoformer.model.config import ModelConfig

ASSUMED_MFU = 0.40
"""The profiles' `gpu.mfu` when nothing was measured."""
MEASURED_FILE = REPO_ROOT / "results" / "gpu_check.json"
MEASURED_TOOL = "benchmarks/gpu_check.py"


@dataclass(kw_only=True, slots=True, frozen=True)
class Cost:
    flops: float
    gpu_hours: float | None
    """None on a CPU profile."""
    cpu_minutes: float | None
    """None on a GPU profile (or a CPU profile without a cpu: section)."""
    mfu: float | None = None
    """The MFU the GPU-hours assume; None on a CPU profile."""
    mfu_source: str | None = None
    """'assumed 40%', 'measured by benchmarks/gpu_check.py on <device> <date>', ... (None on a CPU profile)."""


def model_compute_params(model: ModelConfig) -> int:
    """N of the cost model: all parameters minus the input embedding table."""
    return model.num_parameters() - model.vocab_size * model.d_model


def compute_params(spec: Spec) -> int:
    return model_compute_params(spec.model)


def flops_per_token(model: ModelConfig, seq_len: int) -> float:
    """Training FLOPs (forward + backward) per token: 6N plus causal attention (module docstring)."""
    return 6.0 * model_compute_params(model) + 12.0 * model.n_layer * model.d_model * seq_len / 2.0


def training_flops(spec: Spec) -> float:
    return flops_per_token(spec.model, spec.train.seq_len) * spec.train.tokens


@dataclass(kw_only=True, slots=True, frozen=True)
class Measurement:
    """The MFU section of a GPU check's JSON."""

    device: str
    date: str
    peak_bf16_tflops: float
    mfu: dict[str, float]
    """variant -> measured MFU (the train step at the 450M shape)."""


def measurement_path() -> Path:
    chosen = os.environ.get("EXOFORMER_GPU_CHECK")
    return Path(chosen) if chosen else MEASURED_FILE


def read_measurement(path: str | os.PathLike | None = None) -> tuple[Measurement | None, str | None]:
    """(measurement, None), or (None, why it is not used); a missing file is (None, None)."""
    path = Path(path) if path is not None else measurement_path()
    if not path.is_file():
        return None, None
    stat = path.stat()
    return _read_measurement(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=8)
def _read_measurement(path: str, mtime_ns: int, size: int) -> tuple[Measurement | None, str | None]:
    shown = _display(Path(path))
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return None, f"ignored {shown}: not readable JSON ({err.__class__.__name__})"
    if not isinstance(data, dict) or data.get("tool") != MEASURED_TOOL:
        return None, f"ignored {shown}: not written by {MEASURED_TOOL}"
    if data.get("cpu_mode") is not False:
        return None, f"ignored {shown}: a --cpu run measures no MFU"
    device, date, peak, mfu = data.get("device"), data.get("date"), data.get("peak_bf16_tflops"), data.get("mfu")
    if not isinstance(device, str) or not device or not isinstance(date, str) or not date:
        return None, f"ignored {shown}: no device or date"
    if not _is_positive(peak):
        return None, f"ignored {shown}: {device} has no known bf16 peak, so its MFU is unknown"
    if not isinstance(mfu, dict) or not mfu:
        return None, f"ignored {shown}: no measured MFU"
    for variant, value in mfu.items():
        if not isinstance(variant, str) or not _is_positive(value) or value > 1:
            return None, f"ignored {shown}: MFU {variant}={value!r} is not a fraction in (0, 1]"
    return Measurement(device=device, date=date[:10], peak_bf16_tflops=float(peak),
                       mfu={k: float(v) for k, v in mfu.items()}), None


def _is_positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _display(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


@lru_cache(maxsize=32)
def _file_mfu(profile_name: str, profiles_dir: str) -> float | None:
    """The mfu written in the profile's file, to tell a --set override from the file's own value."""
    try:
        profile = load_profile(profile_name)
    except Exception:  # noqa: BLE001 - a profile not from a file: nothing to compare with
        return None
    return None if profile.gpu is None else profile.gpu.mfu


def choose_mfu(spec: Spec, profile: Profile, measurement: Measurement | None = None,
               note: str | None = None) -> tuple[float, str]:
    """(MFU, where it came from) for a GPU profile; see the module docstring for the order."""
    gpu = profile.gpu
    assert gpu is not None
    in_file = _file_mfu(profile.name, str(profiles_dir()))
    if in_file is not None and gpu.mfu != in_file:
        return gpu.mfu, "set by --set profile.gpu.mfu"
    if gpu.mfu != ASSUMED_MFU:
        return gpu.mfu, f"profile {profile.name}"
    assumed = f"assumed {ASSUMED_MFU:.0%}"
    if measurement is None:
        return gpu.mfu, assumed + (f" ({note})" if note else "")
    if not math.isclose(measurement.peak_bf16_tflops, gpu.peak_bf16_tflops, rel_tol=0.01):
        return gpu.mfu, (f"{assumed} (the measured MFU is for {measurement.device}, {measurement.peak_bf16_tflops:g}"
                         f" TFLOP/s peak, not {gpu.name}'s {gpu.peak_bf16_tflops:g})")
    variant = spec.variant if spec.variant in measurement.mfu else min(measurement.mfu, key=measurement.mfu.get)
    how = "" if variant == spec.variant else f", lowest measured: {variant}"
    return (measurement.mfu[variant],
            f"measured by {MEASURED_TOOL} on {measurement.device} {measurement.date}{how}")


def estimate(spec: Spec, profile: Profile) -> Cost:
    flops = training_flops(spec)
    if profile.gpu is not None:
        measurement, note = read_measurement()
        mfu, source = choose_mfu(spec, profile, measurement, note)
        rate = profile.gpu.peak_bf16_tflops * 1e12 * mfu
        return Cost(flops=flops, gpu_hours=flops / rate / 3600.0, cpu_minutes=None, mfu=mfu, mfu_source=source)
    if profile.cpu is not None:
        return Cost(flops=flops, gpu_hours=None, cpu_minutes=flops / (profile.cpu.gflops * 1e9) / 60.0)
    return Cost(flops=flops, gpu_hours=None, cpu_minutes=None)
