"""What `reproduce.py run` does, as one call from Python: plan a target, choose the profile and the backend,
launch, wait, and say how every requested run ended (`run_target`; `run_planned` for a plan made beforehand,
as `evaluate` makes one). Nothing here prints (an inline job echoes its own log): the CLI (exoformer/cli/runs.py)
passes `on_decided` and `on_done` to show progress and prints the RunResult; a notebook reads the RunResult.

The exit status of `run` is RunResult.exit_code: 130 after Ctrl-C (returned, not raised: every unfinished run is
then INTERRUPTED and the same call resumes it), 1 when a launched run FAILED or a requested run ended neither
done nor queued, else 0.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exoformer.registry.registry import Registry
from exoformer.runs import rundirs as runs
from exoformer.runs.plan import PlannedRun, plan, split_overrides
from exoformer.runs.status import status_rows

INTERRUPTED_EXIT = 130


@dataclass(kw_only=True, frozen=True, slots=True)
class LaunchOptions:
    """What a plan is launched with: the backend and its limits, the --set overrides (their `profile.*` ones shape
    the profile), waiting for Slurm jobs, TensorBoard files (never part of a run's identity)."""

    backend: str = "local"
    """inline (in this process) | local (submitit's LocalExecutor) | slurm."""
    profile: str | None = None
    """Cluster profile in slurm/profiles/ (default: the specs' own, else the preset's)."""
    jobs: int | None = None
    """local: jobs side by side (default: one per core, the last few together so that none idles at the end:
    budget/cost.py local_slots)."""
    threads: int | None = None
    """local: torch threads per job (default: $OMP_NUM_THREADS, else 1)."""
    timeout_min: float | None = None
    """local: time limit per job (default: the profile's time_min)."""
    overrides: tuple[str, ...] = ()
    wait: bool = False
    """slurm: return only when the jobs have ended."""
    no_wait: bool = False
    """When another launcher holds the runs root's launch lock, fail at once naming it (exit 2) instead of waiting."""
    tensorboard: bool = False


@dataclass(kw_only=True, slots=True)
class RunResult:
    """How a launch ended: the plan as decided under the launch lock, one status row per requested run (the
    rows `status` prints, each with the plan's `action`), and what did not end done."""

    target: str
    backend: str
    planned: list[PlannedRun] = field(default_factory=list)
    """Empty after Ctrl-C."""
    rows: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    waited: bool = False
    """The jobs had ended when the call returned (inline and local backends, or slurm with `wait`)."""
    unfinished: list[tuple[str, str]] = field(default_factory=list)
    """(spec name, why) of each requested run that ended neither done nor (unless `waited`) queued."""
    interrupted: list[str] | None = None
    """After Ctrl-C: the runs marked INTERRUPTED (None: no Ctrl-C)."""
    submitted: list[str] = field(default_factory=list)
    """Slurm: one line per array or link job submitted (sizes and dependencies)."""

    @property
    def launched(self) -> int:
        return sum(p.launches for p in self.planned)

    @property
    def failed(self) -> list[str]:
        """Names of the runs this call launched that ended FAILED."""
        return [r["spec"] for r, p in zip(self.rows, self.planned)
                if r["state"] == runs.FAILED and p.launches]

    @property
    def exit_code(self) -> int:
        if self.interrupted is not None:
            return INTERRUPTED_EXIT
        return 1 if self.failed or self.unfinished else 0

    def run_dir(self, name: str) -> Path:
        """The run directory of spec `name` in this launch."""
        for p in self.planned:
            if p.spec.name == name:
                return p.run_dir
        raise KeyError(f"{name} is not a spec of this launch ({', '.join(p.spec.name for p in self.planned)})")


def run_target(target: str, *, preset: str | None = None, overrides: Sequence[str] = (), backend: str = "local",
               profile: str | None = None, jobs: int | None = None, threads: int | None = None,
               timeout_min: float | None = None, wait: bool = False, no_wait: bool = False,
               tensorboard: bool = False, all_seeds: bool = False, force: bool = False, retry_failed: bool = False,
               registry: Registry | None = None, runs_root: str | os.PathLike | None = None,
               command: Sequence[str] | None = None,
               on_decided: Callable[[list[PlannedRun], Any], None] | None = None,
               on_done: Callable[[object], None] | None = None) -> RunResult:
    """`reproduce.py run TARGET` from Python, with the same arguments (README "Verbs"): plan the target (a spec
    name, glob, table id or figure id) under `preset` and the --set `overrides`, skip what is done, launch the rest
    on `backend`, wait when the backend runs here (or `wait`), and return how each run ended. `registry` defaults
    to experiments/ and `runs_root` to $EXOFORMER_RUNS_DIR, else results/runs. Bad input raises
    exoformer.errors.UserError before anything is written."""
    registry = registry if registry is not None else Registry()
    root = runs.runs_root(None if runs_root is None else str(runs_root))
    runs.check_runs_root(root, where="runs_root" if runs_root is not None else "runs root", missing_ok=True)
    planned = plan(registry, target, preset=preset, overrides=list(overrides), runs_root=root, all_seeds=all_seeds,
                   force=force, retry_failed=retry_failed, profile=profile)
    options = LaunchOptions(backend=backend, profile=profile, jobs=jobs, threads=threads, timeout_min=timeout_min,
                            overrides=tuple(overrides), wait=wait, no_wait=no_wait, tensorboard=tensorboard)
    if command is None:
        command = _equivalent_command(target, preset=preset, overrides=overrides, backend=backend)
    return run_planned(registry, planned, options, target=target, command=command, on_decided=on_decided,
                       on_done=on_done)


def _equivalent_command(target: str, *, preset: str | None, overrides: Sequence[str], backend: str) -> list[str]:
    """The command line a run directory records for a launch from Python: the `run` that does the same."""
    return ["reproduce.py", "run", target, *(["--preset", preset] if preset else []),
            *[arg for o in overrides for arg in ("--set", o)], "--backend", backend]


def run_planned(registry: Registry, planned: list[PlannedRun], options: LaunchOptions, *, target: str,
                command: Sequence[str] | None = None,
                on_decided: Callable[[list[PlannedRun], Any], None] | None = None,
                on_done: Callable[[object], None] | None = None) -> RunResult:
    """Launch a plan (exoformer.runs.plan.plan, or exoformer.checkpoint_import's for `evaluate`) with `options`
    and return how it ended (module docstring). `command` is what the run directories record as their command
    line (default: this process's). `on_decided(plan, backend)` sees the plan as decided under the lock
    before any local job starts; `on_done(item)` each local or inline job as it ends."""
    from exoformer.environ import quiet_progress_env, temporary_env
    from exoformer.runs import locking
    from exoformer.runs.launch import Interrupted, launch, unfinished, wait_for_slurm
    from exoformer.train.tensorboard import ENV as TENSORBOARD_ENV

    backend = _backend(registry, planned, options)
    started = time.time()
    waits = locking.LOCK_WAITS.set(not options.no_wait)
    try:
        # job processes (local, Slurm) and an inline job importing lm-eval inherit the quiet switches
        with temporary_env({**quiet_progress_env(), **({TENSORBOARD_ENV: "1"} if options.tensorboard else {})}):
            final = launch(planned, backend, command=list(command) if command is not None else None,
                           on_done=on_done, on_decided=on_decided)
    except Interrupted as stop:
        return RunResult(target=target, backend=backend.name, seconds=time.time() - started, interrupted=stop.names)
    finally:
        locking.LOCK_WAITS.reset(waits)
    submitted = list(getattr(backend, "notes", []))
    if not backend.waits and options.wait:
        wait_for_slurm(final, poll_s=backend.profile.slurm.poll_interval_s)
    waited = backend.waits or options.wait
    rows = status_rows([(p.run_dir, p.spec.name, p.spec.train.steps) for p in final],
                       {p.run_dir: p.root for p in final})
    for row, p in zip(rows, final):
        row["action"] = p.action
    return RunResult(target=target, backend=backend.name, planned=final, rows=rows, seconds=time.time() - started,
                     waited=waited, unfinished=unfinished(final, queued_ok=not waited), submitted=submitted)


def _backend(registry: Registry, planned: list[PlannedRun], options: LaunchOptions):
    """The backend the options name, with the profile chosen as `run` chooses it: --profile, else the one profile
    the specs name, else the preset's."""
    from exoformer.runs.backends import make_backend

    specs = [p.spec for p in planned]
    _, profile_sets = split_overrides(list(options.overrides))
    names = {s.placement.profile for s in specs if s.placement.profile}
    profile_name = options.profile or (names.pop() if len(names) == 1 else None)
    preset_profile = registry.presets[specs[0].preset].profile if specs else None
    return make_backend(options.backend, profile_name=profile_name, preset_profile=preset_profile,
                        concurrency=options.jobs, timeout_min=options.timeout_min, threads=options.threads,
                        profile_overrides=profile_sets)

