"""Training cost of a spec: FLOPs, and GPU-hours (or CPU-minutes) on a profile.

FLOPs = 6 * N * tokens + attention (a decay branch of a WSD ladder: the tokens of its own steps, run_flops), with
- N = every parameter of the built model (exoformer/budget/module_figures.py) except the input embedding (the
  lm_head matmul is real compute, the embedding lookup is not: Kaplan et al.'s "non-embedding" count leaves the
  head out, which would undercount by ~20% at 450M with a 50k vocabulary). Mixing coefficients, anchor
  projection and dynamic MLPs are in N.
- attention = 12 * n_layer * d_model * seq_len FLOPs per token (QK^T and AV: 2 * 2 * L * T * d forward,
  x3 for forward + backward), halved because causal attention needs only the lower triangle.
Evaluation, validation and analysis are not counted in GPU-hours (they are a few % of training at 10B tokens);
CPU-minutes count every stage of the job, calibrated against a measurement (section "CPU time" below).
GPU-hours = FLOPs / (peak_bf16_tflops * 1e12 * mfu * 3600), summed over GPUs (not wall-clock).

MFU: the profile's assumed value (40%), unless `benchmarks/gpu_check.py` has written a measurement
(results/gpu_check.json, or the file named by $EXOFORMER_GPU_CHECK) on a GPU of the profile's bf16 peak:
then the measured MFU of the spec's variant (or, for a variant it did not train, the lowest it measured).
An explicit `--set profile.gpu.mfu=...` (or a profile file whose mfu is not the assumed value) wins over
the measurement. The returned Cost names where its MFU came from (`mfu_source`).

Memory per GPU: exoformer/budget/memory.py for the spec's precision, micro-batch, sequence and the profile's
ranks, as the training code keeps its tensors (`LOSS_CHUNK_TOKENS` of exoformer/train/config.py and
`MUON_SHARDED` say how the loss and Muon run today). Once benchmarks/gpu_check.py has measured
`torch.cuda.max_memory_allocated` against the estimate on a GPU (`memory_ratio` in the same JSON), the tensor
peak is scaled by that ratio (the spec's variant, else the largest measured) and `memory_source` says so.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from exoformer.budget import module_figures
from exoformer.budget.memory import MemoryEstimate, estimate_memory
from exoformer.errors import UserError
from exoformer.registry.profiles import Profile, load_profile, profiles_dir
from exoformer.registry.registry import REPO_ROOT
from exoformer.registry.spec import Spec
from exoformer.model.config import ModelConfig
from exoformer.train.config import LOSS_CHUNK_TOKENS, resolve_precision

ASSUMED_MFU = 0.40
"""The profiles' `gpu.mfu` when nothing was measured."""
MEASURED_FILE = REPO_ROOT / "results" / "gpu_check.json"
MEASURED_TOOL = "benchmarks/gpu_check.py"
MUON_SHARDED = True
"""The ranks share Muon's orthogonalisations (exoformer/train/optim.py); states stay on every rank."""
GB = 1e9


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
    memory_gb: float | None = None
    """Estimated peak memory per GPU (or per CPU rank) in GB (1e9 bytes), margin included."""
    memory_source: str | None = None
    """'derived' or 'derived x <ratio> measured by benchmarks/gpu_check.py on <device> <date>'."""


def model_compute_params(model: ModelConfig) -> int:
    """N of the cost model: all parameters of the built model minus the input embedding table."""
    return sum(p.numel for p in module_figures.parameters(model) if p.name != "embed.weight")


def compute_params(spec: Spec) -> int:
    return model_compute_params(spec.model)


def flops_per_token(model: ModelConfig, seq_len: int) -> float:
    """Training FLOPs (forward + backward) per token: 6N plus causal attention (module docstring)."""
    return 6.0 * model_compute_params(model) + 12.0 * model.n_layer * model.d_model * seq_len / 2.0


def training_flops(spec: Spec) -> float:
    """The FLOPs the trained model has had: all its steps, a decay branch's parent's share included."""
    return flops_per_token(spec.model, spec.train.seq_len) * spec.train.tokens


def own_steps(spec: Spec) -> int:
    """The steps a run trains itself: a decay branch starts at its parent's checkpoint (train.branch_step)."""
    return spec.train.steps - (spec.train.branch_step or 0)


def run_flops(spec: Spec) -> float:
    """The training FLOPs a run spends: training_flops less a decay branch's shared prefix."""
    return flops_per_token(spec.model, spec.train.seq_len) * own_steps(spec) * spec.train.batch_tokens


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


def _gpu_check_json(path: str | os.PathLike | None) -> tuple[dict | None, str | None]:
    """(the GPU check's JSON, None), or (None, why it is ignored); a missing file is (None, None)."""
    path = Path(path) if path is not None else measurement_path()
    if not path.is_file():
        return None, None
    stat = path.stat()
    return _load_gpu_check(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=8)
def _load_gpu_check(path: str, mtime_ns: int, size: int) -> tuple[dict | None, str | None]:
    """Cached by the file's modification time and size, so an edited file is read again."""
    shown = _display(Path(path))
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return None, f"ignored {shown}: not readable JSON ({err.__class__.__name__})"
    if not isinstance(data, dict) or data.get("tool") != MEASURED_TOOL:
        return None, f"ignored {shown}: not written by {MEASURED_TOOL}"
    if data.get("cpu_mode") is not False:
        return None, f"ignored {shown}: a --cpu run measures no MFU"
    return data, None


def read_measurement(path: str | os.PathLike | None = None) -> tuple[Measurement | None, str | None]:
    """(measurement, None), or (None, why it is not used); a missing file is (None, None)."""
    data, why = _gpu_check_json(path)
    if data is None:
        return None, why
    shown = _display(Path(path) if path is not None else measurement_path())
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


def estimate(spec: Spec, profile: Profile, *, memory: SpecMemory | None = None, after: Spec | None = None) -> Cost:
    """The spec's cost on the profile (a decay branch: its own steps); `memory`: its spec_memory when the caller
    has it already; `after`: the run it follows in the same job (cpu_stage_seconds; CPU-minutes only)."""
    flops = run_flops(spec)
    try:
        memory = memory or spec_memory(spec, profile)
        mem_gb, mem_source = memory.total / GB, memory.source
    except UserError:  # ranks that do not divide the batch: `preflight` names it; plan still prices the FLOPs
        mem_gb, mem_source = None, None
    if profile.gpu is not None:
        measurement, note = read_measurement()
        mfu, source = choose_mfu(spec, profile, measurement, note)
        if training_precision(spec, "cuda") == "fp32":
            source += "; train.precision fp32 priced at the bf16 peak: GPU-hours are a lower bound"
        rate = profile.gpu.peak_bf16_tflops * 1e12 * mfu
        return Cost(flops=flops, gpu_hours=flops / rate / 3600.0, cpu_minutes=None, mfu=mfu, mfu_source=source,
                    memory_gb=mem_gb, memory_source=mem_source)
    if profile.cpu is not None:
        seconds = cpu_stage_seconds(spec, profile, after=after)
        return Cost(flops=flops, gpu_hours=None, cpu_minutes=sum(seconds.values()) / 60.0, memory_gb=mem_gb,
                    memory_source=mem_source)
    return Cost(flops=flops, gpu_hours=None, cpu_minutes=None, memory_gb=mem_gb, memory_source=mem_source)


# ---------------------------------------------------------------------------------------------- CPU time
# A job's CPU seconds on a CPU profile, stage by stage, at one torch thread per job as the local backend runs it:
# training FLOPs at the profile's `cpu.gflops`, forward-only passes faster per FLOP (fp32 validation
# CPU_FORWARD_SPEEDUP, bf16 scoring CPU_BF16_SCORING_SPEEDUP), plus the fixed and per-request work that is not
# arithmetic. The constants are fitted to benchmarks/bench_main_job.py on an idle machine: results/bench_main_job.json
# holds its measurement, and tests/budget/test_cost_calibration.py holds these constants to it. CPU time rises when
# other work shares the machine, so there they are a lower bound.

CPU_STARTUP_S = 3.0
"""Per job: the interpreter, imports (torch, the pipeline), the registry and the plan, before the first stage."""
CPU_TRAIN_SETUP_S = 2.5
"""Per training run: torch._dynamo (imported by torch's optimisers when they are built), the GPT-2 BPE under the
compact vocabulary, the model, the data checksums and the final checkpoint."""
CPU_TRAIN_SETUP_IN_JOB_S = 0.5
"""Per training run in a job that has trained before (a decay branch after its parent): what is left once torch._dynamo
and the BPE are loaded: the model, the data checksums, the checkpoints read and written, the run's records."""
CPU_FORWARD_SPEEDUP = 1.2
"""fp32 forward-only passes (validation) per FLOP against a training step (no backward, no optimiser)."""
CPU_BF16_SCORING_SPEEDUP = 2.0
"""Scoring at eval.precision bf16 (the default) per FLOP against a training step: bf16 matmuls, no backward (the
model's forward is only part of the evaluate stage: lm-eval's prompts and tokenizing are priced per request)."""
CPU_EVAL_SETUP_S = 0.8
"""Per evaluation: lm-eval's and datasets' imports, the task configs, the tokenizer and the task files."""
CPU_EVAL_S_PER_REQUEST = 0.0006
"""Per loglikelihood request: lm-eval builds its few-shot prompt (templates compiled once, exoformer/eval/templates.py)
and it is tokenized (fitted at the smoke preset's 2 shots)."""
CPU_ANALYSE_S = 0.5
"""The probes and spike scores of the analyse stage (a few sequences: fixed work at the smoke scale)."""
SMOKE_TOKENS_ZERO_SHOT, SMOKE_TOKENS_PER_SHOT = 15.4, 17.7
"""Mean tokens per smoke request (context + continuation) = 15.4 + 17.7 per shot, fitted to what
exoformer/eval/request_stats.py counts on the smoke suite."""


def forward_flops_per_token(model: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs per token: a third of the training FLOPs (2N plus the forward half of attention)."""
    return flops_per_token(model, seq_len) / 3.0


def scored_documents(spec: Spec) -> dict[str, tuple[int, int]]:
    """Task (the table's name for it) -> (documents scored, choices each) of the spec's evaluation suite, with its
    `eval.limit`: the scored split's documents, or the limit where it is smaller."""
    limit = spec.eval.limit
    if spec.eval.suite == "smoke":
        from exoformer.data.smoke.tasks import N_CHOICES, SPLITS

        counts = {task.removeprefix("smoke_"): (list(SPLITS[task].values())[-1], n) for task, n in N_CHOICES.items()}
    else:
        from exoformer.eval.task_facts import TASK_FACTS

        counts = {name: (f.documents, f.choices) for name, f in TASK_FACTS.items()}
    return {task: (docs if limit is None else min(limit, docs), choices) for task, (docs, choices) in counts.items()}


def eval_requests(spec: Spec) -> tuple[int, float]:
    """(loglikelihood requests, tokens per request) of the spec's evaluation suite, with its `eval.limit`."""
    requests = sum(docs * choices for docs, choices in scored_documents(spec).values())
    if spec.eval.suite == "smoke":
        per_request = SMOKE_TOKENS_ZERO_SHOT + SMOKE_TOKENS_PER_SHOT * spec.eval.num_fewshot
        return requests, float(min(per_request, spec.model.seq_len))
    from exoformer.eval.task_facts import TASK_FACTS

    per_task = {name: f.tokens_per_request for name, f in TASK_FACTS.items()}
    tokens = sum(docs * choices * per_task[task] for task, (docs, choices) in scored_documents(spec).items())
    return requests, tokens / max(1, requests)


def cpu_stage_seconds(spec: Spec, profile: Profile, *, train: bool = True,
                      after: Spec | None = None) -> dict[str, float]:
    """CPU seconds of each stage of one job at one torch thread (section comment above); `train=False` for a
    checkpoint run, which imports weights instead of training. `after`: the run this one follows in the same job
    process (a decay branch in its parent's local job): no start-up, the lighter CPU_TRAIN_SETUP_IN_JOB_S, and no
    evaluation setup when that run evaluated."""
    assert profile.cpu is not None
    rate = profile.cpu.gflops * 1e9
    t, forward = spec.train, forward_flops_per_token(spec.model, spec.train.seq_len)
    start = t.branch_step or 0  # a decay branch validates only after its start
    points = (t.steps // t.val_every + (1 if t.steps % t.val_every else 0) - start // t.val_every) if t.val_every else 0
    in_run_val = points * t.val_batches * t.micro_batch_seqs * t.seq_len * forward
    requests, per_request = eval_requests(spec)
    eval_forward = (requests * min(per_request, spec.model.seq_len)
                    * forward_flops_per_token(spec.model, spec.model.seq_len))
    setup = CPU_TRAIN_SETUP_S if after is None else CPU_TRAIN_SETUP_IN_JOB_S
    eval_setup = 0.0 if after is not None and after.eval.enabled else CPU_EVAL_SETUP_S
    return {"startup": CPU_STARTUP_S if after is None else 0.0,
              "train": setup + run_flops(spec) / rate + in_run_val / (rate * CPU_FORWARD_SPEEDUP)
              if train else 0.0,
              "validate": t.final_val_tokens * forward / (rate * CPU_FORWARD_SPEEDUP),
              "evaluate": eval_setup + requests * CPU_EVAL_S_PER_REQUEST
              + eval_forward / (rate * (CPU_BF16_SCORING_SPEEDUP if spec.eval.precision == "bf16"
                                        else CPU_FORWARD_SPEEDUP)) if spec.eval.enabled else 0.0,
              "analyse": CPU_ANALYSE_S if spec.analysis.enabled else 0.0}


CPU_SHARING_SLOWDOWN = 1.1
"""CPU time of a one-thread job while more jobs than cores share the cores, over its CPU time at one job per core:
jobs that take turns on a core evict each other's caches (benchmarks/bench_main_job.py measures it)."""


def local_slots(queued: int, running: int, cores: int, *, slowdown: float = CPU_SHARING_SLOWDOWN) -> int:
    """How many jobs the local backend lets run now: one per core, except at the end of a launch. When more jobs are
    left (`queued` + `running`) than cores but fewer than two rounds of them, they all run together and share the
    cores, so that no core idles while the last ones finish. Only that last round pays the `slowdown` of sharing,
    and only where it is cheaper than the second round it saves (left x slowdown < 2 x cores)."""
    cores, left = max(1, cores), queued + running
    return left if cores < left and left * slowdown < 2 * cores else cores


# ---------------------------------------------------------------------------------------------- memory


def training_precision(spec: Spec, device: str) -> str:
    """The spec's step precision on a device type ('cuda' / 'cpu'): `auto` resolved (train/config.py)."""
    return resolve_precision(spec.train.precision, device)


@dataclass(kw_only=True, slots=True, frozen=True)
class SpecMemory:
    """A spec's memory per rank on a profile: the derived estimate, the measured ratio applied, the limit."""

    estimate: MemoryEstimate
    ratio: float
    source: str
    total: float
    """Bytes per rank: peak tensors x ratio + allocator margin + CUDA context."""
    limit: float | None
    """Bytes per rank the profile offers (gpu.memory_gb, or slurm.mem_gb / tasks on a CPU profile); None: unknown."""
    micro_batch: int
    accumulation: int

    @property
    def fits(self) -> bool | None:
        return None if self.limit is None else self.total <= self.limit


def spec_memory(spec: Spec, profile: Profile, *, micro_batch: int | None = None) -> SpecMemory:
    """Memory per rank of `spec` on `profile` (at `micro_batch`, default the spec's). Raises UserError when the
    ranks and micro-batch do not divide the global batch (TrainConfig.accumulation_steps)."""
    device = "cuda" if profile.gpu is not None else "cpu"
    ranks = profile.slurm.ranks
    train = spec.train if micro_batch is None else replace(spec.train, micro_batch_seqs=micro_batch)
    accumulation = train.accumulation_steps(ranks)
    est = estimate_memory(spec.model, precision=training_precision(spec, device), micro_batch=train.micro_batch_seqs,
                          seq_len=train.seq_len, ranks=ranks, accumulation=accumulation,
                          doc_masking=train.doc_masking, compiled=train.compile and device == "cuda",
                          logits_chunk=LOSS_CHUNK_TOKENS, muon_sharded=MUON_SHARDED, device=device)
    ratio, source = 1.0, "derived"
    if device == "cuda":
        measured = read_memory_ratio()
        if measured:
            variant = spec.variant if spec.variant in measured[0] else max(measured[0], key=measured[0].get)
            ratio = measured[0][variant]
            how = "" if variant == spec.variant else f", largest measured: {variant}"
            source = f"derived x {ratio:.3g} measured by {MEASURED_TOOL} on {measured[1]}{how}"
    tensors = est.peak_tensors * ratio
    total = tensors + est.margin * ratio + est.context  # margin and context are zero on CPU
    if profile.gpu is not None:
        limit = None if profile.gpu.memory_gb is None else profile.gpu.memory_gb * GB
    else:
        limit = profile.slurm.mem_gb * GB / max(1, profile.slurm.tasks) if profile.slurm.mem_gb else None
    return SpecMemory(estimate=est, ratio=ratio, source=source, total=total, limit=limit,
                      micro_batch=train.micro_batch_seqs, accumulation=accumulation)


def read_memory_ratio(path: str | os.PathLike | None = None) -> tuple[dict[str, float], str] | None:
    """({variant: measured / estimated peak}, '<device> <date>') from a GPU run of gpu_check, else None."""
    data, _ = _gpu_check_json(path)
    if data is None:
        return None
    ratios = data.get("memory_ratio")
    if not isinstance(ratios, dict) or not ratios:
        return None
    if not all(isinstance(k, str) and _is_positive(v) and v < 10 for k, v in ratios.items()):
        return None
    return {k: float(v) for k, v in ratios.items()}, f"{data.get('device', '?')} {str(data.get('date', ''))[:10]}"

