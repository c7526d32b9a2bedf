"""Cluster profiles (slurm/profiles/<name>.yaml, docs/architecture.md "Cluster profiles"), read strictly.

`gpu` feeds the cost model; `slurm` feeds the Slurm backend. A CPU-only profile has `gpu: null` and may
carry a `cpu:` section (sustained GFLOP/s) so that `plan` can print CPU-minutes. No field enters a hash.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exoformer.environ import env_directory
from exoformer.errors import UserError, did_you_mean
from exoformer.registry.profile_bounds import check_profile_bounds
from exoformer.registry.registry import REPO_ROOT
from exoformer.limits import MAX_NAME_LEN, NAME_RE
from exoformer.records import load
from exoformer.yaml_lines import load_yaml_with_lines

PROFILES_DIR = REPO_ROOT / "slurm" / "profiles"
DIST_TIMEOUT_DEFAULT_S = 1800
"""torch's default for gloo; NCCL's own (600 s) is too short for a slow first compile on one rank."""


@dataclass(kw_only=True, slots=True, frozen=True)
class GpuProfile:
    name: str
    """Marketing name, e.g. H100-SXM."""
    peak_bf16_tflops: float
    """Dense bf16 peak per GPU (vendor datasheet, no sparsity)."""
    mfu: float = 0.40
    """Assumed model-FLOPs utilisation; `--set profile.gpu.mfu=...` overrides."""
    memory_gb: float | None = None
    """Memory per GPU in GB as the vendor counts it (80 on an H100 SXM); `preflight` needs it."""


@dataclass(kw_only=True, slots=True, frozen=True)
class CpuProfile:
    gflops: float
    """Sustained fp32 GFLOP/s of the whole job on this CPU (measured-ish; see the profile's comment)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class SlurmProfile:
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    nodes: int = 1
    gpus_per_node: int = 8
    tasks_per_node: int | None = None
    """Ranks per node; None means one per GPU (max(1, gpus_per_node)). CPU profiles set it for gloo ranks."""
    cpus_per_task: int = 8
    mem_gb: int = 200
    time_min: int = 2880
    array_parallelism: int = 16
    signal_delay_s: int = 120
    max_requeues: int = 20
    sbatch_extra: tuple[str, ...] = ()
    dist_timeout_s: int = DIST_TIMEOUT_DEFAULT_S
    """How long a rank waits for the others in one collective or at a meeting point before the job fails (the
    process group's timeout, exported to the job as EXOFORMER_DIST_TIMEOUT_S). Phases where one rank works alone
    (checkpoint save, analysis) never count against it (exoformer/train/distributed.py)."""
    max_array_size: int | None = None
    """Array indices stay below this; None reads the cluster's MaxArraySize (`scontrol show config`)."""
    max_submit_jobs: int | None = None
    """Jobs one user may have queued or running; None reads the association's and QOS's MaxSubmit (sacctmgr)."""
    poll_interval_s: int = 30
    """How often `status --watch` and `run --wait` ask Slurm about these jobs (local files refresh faster)."""
    eval_as_job: bool = False
    """Validation, evaluation and analysis run as their own job after training (afterok), on the eval_* resources,
    so that the training allocation is released when training ends (docs/cluster.md)."""
    eval_gpus_per_node: int = 1
    eval_time_min: int | None = None
    """The evaluation job's time limit; None: time_min."""
    eval_mem_gb: int | None = None
    """The evaluation job's memory; None: mem_gb."""

    @property
    def tasks(self) -> int:
        """Ranks per node that the Slurm backend starts."""
        return self.tasks_per_node if self.tasks_per_node is not None else max(1, self.gpus_per_node)

    @property
    def ranks(self) -> int:
        """Ranks of one job: nodes x ranks per node."""
        return self.nodes * self.tasks


@dataclass(kw_only=True, slots=True, frozen=True)
class Profile:
    name: str
    description: str
    gpu: GpuProfile | None
    slurm: SlurmProfile = field(default_factory=SlurmProfile)
    cpu: CpuProfile | None = None
    source: str = ""
    """The file it was read from, as errors name it (repo-relative where possible)."""


def profiles_dir() -> Path:
    chosen = os.environ.get("EXOFORMER_PROFILES")
    if chosen is not None and not chosen.strip():  # never a silent fallback to slurm/profiles/
        raise UserError("empty profiles directory", where="$EXOFORMER_PROFILES", fix="unset it, or name a directory")
    return env_directory("EXOFORMER_PROFILES", fix="unset it (slurm/profiles/ is the default) or point it at a "
                                                   "directory of profile YAML files") or PROFILES_DIR


def list_profiles() -> list[str]:
    return sorted(p.stem for p in profiles_dir().glob("*.yaml"))


def _section(cls: type, data: Any, where: str, what: str, overrides: dict[str, Any]) -> Any:
    """The section as the file writes it, then with its `--set` values, so that an error names where it was made."""
    section = load(cls, data, where=where, what=what, yaml=True)
    if not overrides:
        return section
    return load(cls, {**data, **overrides}, where=f"--set profile.{what}", what=what, yaml=True)


def load_profile(name: str, overrides: dict[str, Any] | None = None) -> Profile:
    """Profile `name`; `overrides` maps dotted keys like 'gpu.mfu' to values (from --set profile.gpu.mfu=...)."""
    overrides = overrides or {}
    if not isinstance(name, str) or not NAME_RE.match(name) or len(name) > MAX_NAME_LEN:
        # a profile is a name, never a path: `--profile ../../x` must not read files outside the profiles folder
        raise UserError(f"invalid profile name {name[:40] if isinstance(name, str) else name!r}", where="--profile",
                        fix=did_you_mean(str(name), list_profiles()))
    path = profiles_dir() / f"{name}.yaml"
    if not path.is_file():
        raise UserError(f"unknown profile {name!r}", where="--profile", fix=did_you_mean(name, list_profiles()))
    file = str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)
    data = load_yaml_with_lines(path, display=file)
    if not isinstance(data, dict):
        raise UserError("a profile must be a mapping", where=f"{file}:1", fix="see docs/architecture.md")
    for key in data:
        if key not in ("description", "gpu", "slurm", "cpu"):
            raise UserError(f"unknown section {key!r}", where=f"{file}:{data.line_of(key)}",
                            fix=did_you_mean(str(key), ("description", "gpu", "slurm", "cpu")))
    for key in overrides:
        if key.split(".")[0] not in ("gpu", "slurm", "cpu") or "." not in key:
            raise UserError(f"unknown profile override {key!r}", where="--set profile.",
                            fix="e.g. --set profile.gpu.mfu=0.35")

    def sub(section: str) -> dict:
        return {k.split(".", 1)[1]: v for k, v in overrides.items() if k.startswith(section + ".")}

    gpu = None if data.get("gpu") is None else _section(GpuProfile, data["gpu"], f"{file}:{data.line_of('gpu')}",
                                                        "gpu", sub("gpu"))
    if gpu is None and sub("gpu"):
        raise UserError(f"profile {name!r} has no GPU", where="--set profile.gpu", fix="pick a GPU profile")
    cpu = None if data.get("cpu") is None else _section(CpuProfile, data["cpu"], f"{file}:{data.line_of('cpu')}",
                                                        "cpu", sub("cpu"))
    slurm = _section(SlurmProfile, data.get("slurm") or {}, f"{file}:{data.line_of('slurm')}", "slurm", sub("slurm"))
    if gpu is not None and not (gpu.peak_bf16_tflops > 0 and 0 < gpu.mfu <= 1):
        raise UserError(f"gpu.peak_bf16_tflops={gpu.peak_bf16_tflops:g} and gpu.mfu={gpu.mfu:g}: the peak must be "
                        "> 0 and the MFU in (0, 1]", where=file, fix="set gpu.mfu to a fraction such as 0.4")
    if gpu is not None and gpu.memory_gb is not None and not gpu.memory_gb > 0:
        raise UserError(f"must be > 0, got {gpu.memory_gb:g}", where=f"{file}: gpu.memory_gb",
                        fix="write the memory per GPU in GB, e.g. `memory_gb: 80` for an H100 SXM")
    if slurm.tasks_per_node is not None and slurm.tasks_per_node < 1:
        raise UserError(f"slurm.tasks_per_node must be >= 1, got {slurm.tasks_per_node}", where=file,
                        fix="remove it (one task per GPU) or set a positive count")
    if slurm.gpus_per_node > 0 and slurm.tasks_per_node not in (None, slurm.gpus_per_node):
        raise UserError(f"slurm.tasks_per_node={slurm.tasks_per_node} differs from gpus_per_node="
                        f"{slurm.gpus_per_node}: each rank trains on one GPU", where=file,
                        fix="remove tasks_per_node on a GPU profile")
    if cpu is not None and not cpu.gflops > 0:
        raise UserError("cpu.gflops must be > 0", where=file, fix="fix the value")
    profile = Profile(name=name, description=str(data.get("description", "")), gpu=gpu, slurm=slurm, cpu=cpu,
                      source=file)
    check_profile_bounds(profile, where=file)
    return profile
