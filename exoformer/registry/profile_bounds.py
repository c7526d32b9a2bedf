"""The ranges of a cluster profile's numbers (docs/input-limits.md "Cluster profiles"): every field `preflight`,
`plan` or a backend uses is checked when a profile is loaded, so `validate` (which loads each profile) refuses
what would crash or mislead them, at the field, in one line.

GPU and task counts must fit the GPU kind: a GPU profile has at least one GPU per node; a CPU profile
(`gpu: null`) has none. Slurm's own ranges: a time limit of at least a minute and at most a year (Slurm counts
minutes in 32 bits; a longer limit is "infinite", which a requeue plan cannot use), a signal delay that is not
negative and leaves time to run, at least one node and one array slot. Types are checked before, when the
profile is read (exoformer/records.py): every value here is already an integer or a finite number.
"""

from __future__ import annotations

from typing import Any

from exoformer.errors import UserError

SLURM_BOUNDS: dict[str, tuple[int, int]] = {
    "nodes": (1, 10_000),
    "gpus_per_node": (0, 64),
    "tasks_per_node": (1, 1_024),
    "cpus_per_task": (1, 1_024),
    "mem_gb": (1, 1_000_000),
    "time_min": (1, 525_600),
    "array_parallelism": (1, 100_000),
    "signal_delay_s": (0, 86_400),
    "max_requeues": (0, 1_000),
    "dist_timeout_s": (10, 86_400),  # a real collective takes seconds; one not done in a day never will be
    "max_array_size": (1, 4_000_001),  # Slurm's own ceiling of MaxArraySize
    "max_submit_jobs": (1, 10_000_000),
    "poll_interval_s": (1, 86_400),
    "eval_gpus_per_node": (0, 64),
    "eval_time_min": (1, 525_600),
    "eval_mem_gb": (1, 1_000_000),
}
"""slurm field -> (lowest, highest) accepted, inclusive."""
GPU_BOUNDS: dict[str, tuple[float, float]] = {"peak_bf16_tflops": (0.0, 1e6), "memory_gb": (0.0, 1e5)}
"""gpu field -> (low, high): above low (exclusive), at most high."""


def check_profile_bounds(profile: Any, *, where: str) -> None:
    """A one-line UserError at the first field of `profile` (a registry.profiles.Profile) outside its range."""
    slurm = profile.slurm
    for name, (low, high) in SLURM_BOUNDS.items():
        value = getattr(slurm, name)
        if value is not None and not low <= value <= high:  # None: tasks_per_node left to the GPU count
            raise UserError(f"slurm.{name} must be an integer in [{low:,}, {high:,}], got {value!r}", where=where,
                            fix=f"set slurm.{name} within [{low:,}, {high:,}] (docs/input-limits.md)")
    if profile.gpu is not None and slurm.gpus_per_node < 1:
        raise UserError(f"slurm.gpus_per_node is {slurm.gpus_per_node} on a GPU profile ({profile.gpu.name})",
                        where=where, fix="set gpus_per_node to the GPUs of one node, or `gpu: null` for a CPU profile")
    if profile.gpu is None and slurm.gpus_per_node != 0:
        raise UserError(f"slurm.gpus_per_node is {slurm.gpus_per_node} on a CPU profile (gpu: null)", where=where,
                        fix="set gpus_per_node: 0, or describe the GPU under gpu:")
    if slurm.eval_as_job and (profile.gpu is None) != (slurm.eval_gpus_per_node == 0):
        raise UserError(f"slurm.eval_gpus_per_node is {slurm.eval_gpus_per_node} on a "
                        f"{'CPU' if profile.gpu is None else 'GPU'} profile", where=where,
                        fix="set eval_gpus_per_node: 0 on a CPU profile, at least 1 on a GPU profile")
    if slurm.signal_delay_s >= slurm.time_min * 60:
        raise UserError(f"slurm.signal_delay_s={slurm.signal_delay_s} is not below slurm.time_min={slurm.time_min} "
                        "minutes: the requeue signal would come before the job starts", where=where,
                        fix="lower signal_delay_s (120 is usual) or raise time_min")
    if profile.gpu is not None:
        for name, (low, high) in GPU_BOUNDS.items():
            value = getattr(profile.gpu, name)
            if value is not None and not low < value <= high:
                raise UserError(f"gpu.{name} must be a finite number in ({low:g}, {high:g}], got {value!r}",
                                where=where, fix=f"write the vendor's value of gpu.{name}")
    if profile.cpu is not None and not profile.cpu.gflops <= 1e9:
        raise UserError(f"cpu.gflops must be a finite number, got {profile.cpu.gflops!r}", where=where,
                        fix="write a measured GFLOP/s, e.g. 20.0")
