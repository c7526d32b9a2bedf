"""Backends behind one protocol (exoformer.runs.backends.base.Backend), one module each: `inline` (in
process), `local` (submitit's LocalExecutor), `slurm` (submitit on a cluster). Callers read a backend's declared
capabilities (`waits`, `submits_under_lock`, `on_this_machine`) and ask it for `liveness`; no caller tests a
backend by name. `make_backend` validates the profile before anything is written.
"""

from __future__ import annotations

from exoformer.errors import UserError, did_you_mean
from exoformer.runs.backends.base import Backend, Item, Liveness, launcher_liveness
from exoformer.runs.backends.inline import InlineBackend
from exoformer.runs.backends.local import LocalBackend, default_concurrency
from exoformer.runs.backends.slurm import SlurmBackend, SlurmView, sbatch_extra_parameters
from exoformer.registry.profiles import load_profile

__all__ = ["BACKENDS", "Backend", "InlineBackend", "Item", "Liveness", "LocalBackend", "SlurmBackend", "SlurmView",
           "backend_class", "default_concurrency", "launcher_liveness", "make_backend", "sbatch_extra_parameters"]

BACKEND_CLASSES: dict[str, type] = {b.name: b for b in (InlineBackend, LocalBackend, SlurmBackend)}
BACKENDS = tuple(BACKEND_CLASSES)


def backend_class(name: str | None) -> type | None:
    """The class of a backend by the name STATUS or a claim recorded (None for an unknown name)."""
    return BACKEND_CLASSES.get(name or "")


def check_name(name: str) -> type:
    if name not in BACKEND_CLASSES:
        raise UserError(f"unknown backend {name!r}", where="--backend", fix=did_you_mean(name, BACKENDS))
    return BACKEND_CLASSES[name]


def make_backend(name: str, *, profile_name: str | None, preset_profile: str | None, concurrency: int | None,
                 timeout_min: float | None, threads: int | None = None,
                 profile_overrides: dict | None = None) -> InlineBackend | LocalBackend | SlurmBackend:
    """The backend for `run`; the profile is validated here (unknown profile -> one-line error, exit 2)."""
    cls = check_name(name)
    if cls is InlineBackend:
        return InlineBackend()
    if cls is LocalBackend:
        profile = load_profile(profile_name or preset_profile or "cpu", profile_overrides)
        if profile.slurm.nodes > 1:
            raise UserError(f"profile {profile.name!r} needs {profile.slurm.nodes} nodes; the local backend has one",
                            where="--profile", fix="use --backend slurm")
        return LocalBackend(concurrency=concurrency, timeout_min=profile.slurm.time_min if timeout_min is None
                            else timeout_min, signal_delay_s=profile.slurm.signal_delay_s,
                            max_requeues=profile.slurm.max_requeues, threads_per_job=threads, profile=profile)
    if not profile_name:
        raise UserError("the slurm backend needs a cluster profile", where="--profile",
                        fix="pass --profile NAME (one of slurm/profiles/*.yaml)")
    return SlurmBackend(load_profile(profile_name, profile_overrides))
