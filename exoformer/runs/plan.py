"""What `run` would do with each spec of a target, decided once: `plan`, `run --dry-run` and `run` all call `plan()`.

Per spec the decision (`decide`) reads the run directory's STATUS (reconciled by exoformer.runs.status: a
RUNNING run whose job lock nobody holds, or a queued one whose job is gone, counts as INTERRUPTED, or as un-run
when its job never started), whether a live process holds its job lock, the manifest's claim, its checkpoints
and its stage records:

| state                                  | no flag          | --retry-failed | --force          |
|----------------------------------------|------------------|----------------|------------------|
| a job is alive on it (any STATUS)      | skip (active)    | skip (active)  | skip (active)    |
| no run directory / no STATUS           | run (or resume when a checkpoint exists)  | same | rerun |
| SUCCEEDED with every stage recorded    | skip             | skip           | rerun            |
| SUCCEEDED with a stage record missing  | resume           | resume         | rerun            |
| FAILED (an error raised in the job)    | skip (failed)    | resume         | rerun            |
| INTERRUPTED (killed, lost, timed out), DAMAGED STATUS | resume | resume     | rerun            |
| DAMAGED otherwise (no identity, lost STATUS, bad rows) | skip  | skip           | rerun            |

A run is DAMAGED here exactly when the reading verbs show it DAMAGED (exoformer/runs/run_index.py read_run_info),
and the reason says so in the same words.

A WSD ladder's decay branch (train.branch_from, docs/forecast.md "The CPU ladder") comes after its parent in the
plan, and is refused (UserError) when it would launch while its parent neither launches with it nor has its
checkpoint at the branch's start. Its cost is its own steps only (exoformer/budget/cost.py), and when its parent
launches with it, no process start of its own: the local backend runs it in its parent's job, after it.

Torch-free, so `plan` answers at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exoformer.runs import locking, rundirs as runs
from exoformer.budget.cost import Cost, estimate
from exoformer.registry.ladders import branch_parent
from exoformer.registry.profiles import Profile, load_profile
from exoformer.registry.registry import Registry
from exoformer.registry.spec import Spec, parse_override, wanted_stages
from exoformer.runs.run_index import RESUMES, entry_of, is_run
from exoformer.runs.status import SlurmView, claim_alive, reconcile
from exoformer.errors import UserError
from exoformer.limits import check_runs_root_path
from exoformer.run_identity import RunIdentity
from exoformer.rundir import RunDir

RUN, RESUME, RERUN, SKIP = "run", "resume", "rerun", "skip"
LAUNCHING = (RUN, RESUME, RERUN)
"""Actions that start a job."""
ACTIVE = "already queued or running"
"""The reason of a skip because some job is alive on the run."""


@dataclass(kw_only=True, slots=True)
class PlannedRun:
    """One spec of a plan: where its run lives, what `run` does with it and why, and what it costs."""

    spec: Spec
    root: Path
    run_dir: Path
    action: str
    reason: str
    state: str | None
    """STATUS state as reconciled (None: no STATUS)."""
    claim: locking.Claim | None
    profile: str
    cost: Cost
    force: bool = False
    retry_failed: bool = False
    identity: RunIdentity | None = None
    """What the run directory records as the run's identity when it is created (harness.runs.identity_for)."""

    @property
    def launches(self) -> bool:
        return self.action in LAUNCHING

    def describe(self) -> str:
        """The action as `plan` and `run` print it (with its reason, except a plain run or resume)."""
        plain = self.action in (RUN, RESUME) and not self.reason.startswith(runs.DAMAGED)
        return self.action if plain else f"{self.action}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.spec.name, "group": self.spec.group, "hash": self.spec.hash12,
                "variant": self.spec.variant, "preset": self.spec.preset, "profile": self.profile,
                "action": self.action, "reason": self.reason, "status": self.state,
                "params": self.spec.model.num_parameters(), "tokens": self.spec.train.tokens,
                "flops": self.cost.flops, "gpu_hours": self.cost.gpu_hours, "cpu_minutes": self.cost.cpu_minutes,
                "mfu": self.cost.mfu, "mfu_source": self.cost.mfu_source, "memory_gb": self.cost.memory_gb,
                "memory_source": self.cost.memory_source, "run_dir": str(self.run_dir)}


def decide(*, state: str | None, active: bool, has_checkpoint: bool, missing_stages: list[str], exists: bool,
           force: bool, retry_failed: bool, damage: str | None = None) -> tuple[str, str]:
    """(action, reason) for one run; pure, so the table in the module docstring is tested exhaustively.
    `damage`: why the run reads DAMAGED in every reading verb (exoformer/runs/run_index.py read_run_info), with
    its fix: a damaged STATUS is resumed, any other damage is skipped until --force."""
    if active:
        return SKIP, ACTIVE
    if force:
        return (RERUN, "--force: the old directory is moved aside") if exists else (RUN, "new")
    if damage is not None:  # the reason without the fix, which the action says
        why = f"{runs.DAMAGED}: {damage.split(' (fix: ')[0].split('; its numbers are not shown')[0]}"
        if damage.startswith(RunDir(".").status_file.name) and RESUMES in damage:
            return RESUME, why
        return SKIP, f"{why} (use --force)"
    if state is None:
        return (RESUME, "a checkpoint exists") if has_checkpoint else (RUN, "new")
    if state == runs.SUCCEEDED:
        if missing_stages:
            return RESUME, f"SUCCEEDED but no record of stage {', '.join(missing_stages)}"
        return SKIP, "SUCCEEDED"
    if state == runs.FAILED:
        return (RESUME, "--retry-failed") if retry_failed else (SKIP, "FAILED (use --retry-failed)")
    return RESUME, state  # INTERRUPTED, DAMAGED


def assess(spec: Spec, root: Path, *, claim: locking.Claim | None, view: SlurmView, force: bool,
           retry_failed: bool, write: bool = False) -> tuple[str, str, str | None]:
    """(action, reason, reconciled state) of one spec. With `write`, a gone job's STATUS is turned into INTERRUPTED
    (or removed, when it never started) on disk, as `run` and `status` do; without, nothing is changed."""
    run_dir = runs.run_dir_for(spec, root)
    rd = RunDir(run_dir)
    status = reconcile(run_dir, claim, view, write=write) if run_dir.is_dir() else None
    state = status.state if status else None
    if state in runs.ACTIVE_STATES:
        active = True  # reconcile keeps an active state only while the job is alive (or cannot be told dead)
    elif state in (None, runs.DAMAGED):
        active = run_dir.is_dir() and claim_alive(run_dir, claim, view)
    else:
        active = rd.job_lock_held()
    damage = None
    if not active and run_dir.is_dir() and is_run(rd):  # the verdict every reading verb shows for the run
        info = entry_of(rd)
        damage = info.damage if info is not None else None
        state = runs.DAMAGED if damage is not None else state
    action, reason = decide(state=state, active=active, has_checkpoint=rd.has_checkpoint(),
                            missing_stages=rd.missing_stage_records(wanted_stages(spec)), exists=run_dir.exists(),
                            force=force, retry_failed=retry_failed, damage=damage)
    return action, reason, state


def split_overrides(overrides: list[str] | tuple[str, ...]) -> tuple[list[str], dict[str, object]]:
    """Spec overrides vs `profile.*` overrides (which feed the cost model, never a spec)."""
    spec_sets, profile_sets = [], {}
    for text in overrides:
        key, value = parse_override(text)
        if key.startswith("profile."):
            profile_sets[key[len("profile."):]] = value
        else:
            spec_sets.append(text)
    return spec_sets, profile_sets


def resolve_target(registry: Registry, target: str, *, preset: str | None = None,
                   overrides: list[str] | tuple[str, ...] = (), all_seeds: bool = False) -> list[Spec]:
    """The resolved specs of a spec name, glob, table id or figure id."""
    spec_sets, _ = split_overrides(overrides)
    return [registry.resolve(n, preset=preset, overrides=spec_sets)
            for n in registry.select(target, replicates=all_seeds)]


def cost_profile_name(registry: Registry, spec: Spec, profile: str | None) -> str:
    """--profile, else the spec's placement profile, else its preset's, else h100."""
    return profile or spec.placement.profile or registry.presets[spec.preset].profile or "h100"


def plan(registry: Registry, target: str, *, preset: str | None = None, overrides: list[str] | tuple[str, ...] = (),
         runs_root: str | Path | None = None, all_seeds: bool = False, force: bool = False,
         retry_failed: bool = False, profile: str | None = None, write: bool = False) -> list[PlannedRun]:
    """Every spec of `target` with the action `run` takes for it. `runs_root` None: $EXOFORMER_RUNS_DIR, else
    results/runs. Read-only unless `write` (then gone jobs are marked INTERRUPTED, as `run` does under its lock)."""
    specs = resolve_target(registry, target, preset=preset, overrides=overrides, all_seeds=all_seeds)
    return plan_specs(registry, specs, runs_root=runs_root, overrides=overrides, force=force,
                      retry_failed=retry_failed, profile=profile, write=write)


def plan_specs(registry: Registry, specs: list[Spec], *, runs_root: str | Path | None = None,
               overrides: list[str] | tuple[str, ...] = (), force: bool = False, retry_failed: bool = False,
               profile: str | None = None, write: bool = False,
               cost: Callable[..., Cost] = estimate) -> list[PlannedRun]:
    """`plan` for resolved specs (each once); `cost` prices one spec on a profile (training by default), and a
    decay branch that launches with its parent as it runs there, after it in its job (`after=parent`)."""
    root = runs.runs_root(None if runs_root is None else str(runs_root))
    check_runs_root_path(root, where="--runs-dir" if runs_root is not None else "the runs root")
    specs = parents_first(specs)
    spec_sets, profile_sets = split_overrides(overrides)
    manifest = locking.read_manifest(root)
    view = SlurmView()
    view.expect(manifest.get(spec.hash) for spec in specs)
    profiles: dict[str, Profile] = {}
    planned, seen, launching = [], set(), {}
    for spec in specs:
        if spec.hash in seen:
            continue  # the same spec twice on one command line
        seen.add(spec.hash)
        name = cost_profile_name(registry, spec, profile)
        if name not in profiles:
            profiles[name] = load_profile(name, profile_sets)
        claim = manifest.get(spec.hash)
        action, reason, state = assess(spec, root, claim=claim, view=view, force=force, retry_failed=retry_failed,
                                       write=write)
        parent = launching.get(spec.train.branch_from) if spec.train.is_branch and action in LAUNCHING else None
        price = cost(spec, profiles[name]) if parent is None else cost(spec, profiles[name], after=parent)
        if action in LAUNCHING:
            launching[spec.name] = spec
        planned.append(PlannedRun(spec=spec, root=root, run_dir=runs.run_dir_for(spec, root), action=action,
                                  reason=reason, state=state, claim=claim, profile=name, cost=price, force=force,
                                  retry_failed=retry_failed, identity=runs.identity_for(registry, spec, overrides)))
    check_branch_starts(registry, planned, spec_sets)
    return planned


def parents_first(specs: list[Spec]) -> list[Spec]:
    """The specs with every decay branch whose parent is among them moved after all the others (a parent is never
    itself a branch), so that the local backends start parents first; otherwise in the order given."""
    names = {spec.name for spec in specs}
    waits = [spec.train.is_branch and spec.train.branch_from in names for spec in specs]
    return [s for s, w in zip(specs, waits) if not w] + [s for s, w in zip(specs, waits) if w]


def checkpoint_file(run_dir: Path, step: int) -> Path:
    """Checkpoint `step` of a run (RunDir.checkpoint: the name the trainer writes, torch-free)."""
    return RunDir(run_dir).checkpoint(step)


def check_branch_starts(registry: Registry, planned: list[PlannedRun], spec_sets: list[str]) -> None:
    """Each decay branch that would launch can start exactly from its parent (same preset and `--set`), and
    that parent launches in this plan or has its checkpoint at the branch's start; else a one-line UserError."""
    launching = {p.spec.hash for p in planned if p.launches}
    for p in planned:
        if not (p.launches and p.spec.train.is_branch):
            continue
        parent = branch_parent(registry, p.spec, spec_sets)
        step = int(p.spec.train.branch_step or 0)
        if parent.hash in launching or checkpoint_file(runs.run_dir_for(parent, p.root), step).is_file():
            continue
        raise UserError(f"parent {parent.name} has no checkpoint at step {step} yet: run it first",
                        where=p.spec.name, fix=f"reproduce.py run {parent.name} (same --preset and --set), or the "
                        f"whole group ({p.spec.group}): parents train before their branches")


def totals(planned: list[PlannedRun]) -> dict[str, Any]:
    """Counts by action and the cost of what would start (skipped runs cost nothing)."""
    todo = [p for p in planned if p.launches]

    def total(values) -> float | None:
        values = [v for v in values if v is not None]
        return sum(values) if values else None

    return {"specs": len(planned), "to_run": sum(p.action in (RUN, RERUN) for p in planned),
            "to_resume": sum(p.action == RESUME for p in planned), "to_skip": sum(p.action == SKIP for p in planned),
            "flops": sum(p.cost.flops for p in todo), "gpu_hours": total(p.cost.gpu_hours for p in todo),
            "cpu_minutes": total(p.cost.cpu_minutes for p in todo)}
