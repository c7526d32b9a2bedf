"""Launch a plan: lock -> decide again -> claim -> submit, callable from Python (a notebook can plan, then launch).

Under the runs root's launch lock each planned spec is decided again (another launcher may have claimed it since
the plan was made), its run directory is prepared, STATUS says PENDING and the claim goes to the manifest; only
then is the job started. Slurm jobs are submitted while the lock is held (sbatch is quick); inline and local jobs
run after it is released, and `launch` returns when they end. Ctrl-C stops the local jobs (they never outlive the
launcher), marks every unfinished run INTERRUPTED and raises `Interrupted`.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from exoformer.errors import UserError
from exoformer.runs import locking, rundirs as runs
from exoformer.runs.device_checks import check_placement
from exoformer.runs.plan import ACTIVE, LAUNCHING, RERUN, SKIP, PlannedRun, assess
from exoformer.runs.status import SlurmView, reconcile
from exoformer.io import check_real_directories, remove_temp_files
from exoformer.rundir import JOBS_DIR, RUN_INDEX_DIR, RunDir


class Interrupted(Exception):
    """Ctrl-C during a launch; every unfinished run of it is INTERRUPTED and a plain `run` resumes it."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(", ".join(names))
        self.names = names


def launch(planned: list[PlannedRun], backend, *, command: list[str] | None = None,
           on_decided: Callable[[list[PlannedRun], Any], None] | None = None,
           on_done: Callable[[object], None] | None = None) -> list[PlannedRun]:
    """Start the jobs of a plan on `backend` (from exoformer.runs.backends.make_backend); returns the plan as
    decided under the lock (`on_decided` sees it before any local job starts; `on_done` each local item as it
    ends). Raises UserError before anything is written when a check fails."""
    if not planned:
        return []
    if not backend.on_this_machine:  # a cluster's jobs: memory and time limit of each, before anything is written
        from exoformer.budget.preflight import refuse_unfit

        refuse_unfit([p.spec for p in planned if p.launches], backend.profile)
    roots = sorted({p.root for p in planned})
    for root in roots:
        runs.check_writable(root)
    for p in planned:
        runs.check_identity(p.spec, p.run_dir)
        if p.launches:  # before anything is written or moved: no folder of the run may be a link or a file
            RunDir(p.run_dir).check_real_layout()
    for root in roots:
        check_real_directories([root / JOBS_DIR, root / RUN_INDEX_DIR],
                               fix="move it away (nothing was written); the harness creates it")
    backend.check([p.spec for p in planned])
    check_placement([p.spec for p in planned], backend.profile, backend.name)
    command = list(command) if command is not None else [Path(sys.argv[0]).name, *sys.argv[1:]]

    from exoformer.runs.backends import Item

    held = held_branches(planned, backend)
    final: list[PlannedRun] = []
    items: dict[Path, list[Item]] = {}
    view = SlurmView()
    for root in roots:
        claims = locking.read_manifest(root)
        view.expect(claims.get(p.spec.hash) for p in planned if p.root == root)
    try:
        for root in roots:
            with locking.launch_lock(root, wait=locking.LOCK_WAITS.get()):  # `run --no-wait`: refused at once
                remove_temp_files(root)  # a launcher killed mid-write of the manifest
                manifest = locking.read_manifest(root)
                claims = []
                for p in (p for p in planned if p.root == root):
                    if p.run_dir.is_dir() and not RunDir(p.run_dir).job_lock_held():
                        remove_temp_files(p.run_dir)  # a launcher or `status` killed mid-write of STATUS
                    claim = manifest.get(p.spec.hash)
                    action, reason, state = assess(p.spec, root, claim=claim, view=view, force=p.force,
                                                   retry_failed=p.retry_failed, write=True)
                    again = replace(p, action=action, reason=reason, state=state, claim=claim)
                    if again.action in LAUNCHING and again.spec.hash in held:
                        again = replace(again, action=SKIP, reason=held[again.spec.hash])
                    final.append(again)
                    if again.action not in LAUNCHING:
                        continue
                    if again.action == RERUN and again.run_dir.exists():
                        _move_aside(again.run_dir)
                    runs.prepare(again.spec, again.run_dir, command=command, identity=again.identity)
                    RunDir(again.run_dir).clear_stop()
                    RunDir(again.run_dir).write_status(runs.Status(state=runs.PENDING, backend=backend.name,
                                                                   reason="queued by run"))
                    claim = locking.new_claim(spec_hash=again.spec.hash, name=again.spec.name, run_dir=again.run_dir,
                                              backend=backend.name)
                    claims.append(claim)
                    items.setdefault(root, []).append(Item(spec=again.spec, run_dir=again.run_dir, claim=claim))
                locking.record_claims(root, manifest, claims)
                if backend.submits_under_lock and items.get(root):
                    _submit(backend, items[root], root, manifest)
    except locking.LaunchLockHeld:  # a TimeoutError, so an OSError too: another launcher, never the disk
        raise
    except OSError as err:  # a full disk, a read-only root: nothing was started
        raise UserError(f"cannot write the runs root ({err.strerror or type(err).__name__}); no job was started",
                        where=str(err.filename or roots[0]),
                        fix="free space on that disk (or make it writable) and run the same command again") from None
    if on_decided:
        on_decided(final, backend)
    if not backend.submits_under_lock:
        for root, group in items.items():
            try:
                backend.launch(group, root, record=lambda cs, r=root: locking.update_claims(r, cs), on_done=on_done)
            except KeyboardInterrupt:
                raise Interrupted(_mark_interrupted([i for g in items.values() for i in g])) from None
    return final


def held_branches(planned: list[PlannedRun], backend) -> dict[str, str]:
    """Spec hash -> why, for each decay branch whose parent launches with it on a backend that cannot make a job
    wait for another (Slurm here): it is not started now, and a later `run` starts it from the parent's checkpoint."""
    if getattr(backend, "orders_branches", False):
        return {}
    launching = {p.spec.name for p in planned if p.launches}
    return {p.spec.hash: f"waits for its parent {p.spec.train.branch_from} (step {p.spec.train.branch_step}): run "
                         "again after the stable runs finish"
            for p in planned if p.launches and p.spec.train.is_branch and p.spec.train.branch_from in launching}


def _mark_interrupted(items: list) -> list[str]:
    """Runs of this launch that did not end on their own (still active, or killed with the launcher's jobs);
    a queued run whose job never started goes back to un-run."""
    names = []
    for item in items:
        rd = RunDir(item.run_dir)
        status = rd.read_status()
        if status is not None and status.state == runs.PENDING and not any(rd.logs.glob("attempt-*.log")) \
                and not rd.job_lock_held():
            rd.status_file.unlink(missing_ok=True)
            continue
        if status is None or status.state in runs.ACTIVE_STATES or status.state == runs.INTERRUPTED:
            where = f" during {status.stage}" if status and status.stage else ""
            rd.update_status(state=runs.INTERRUPTED, pid=None,
                             reason=f"interrupted (Ctrl-C){where}; run the same command to resume")
            names.append(item.spec.name)
    return names


def _submit(backend, items, root: Path, manifest: dict) -> None:
    """sbatch through submitit while holding the lock; a refused submission marks the runs it left unsubmitted
    FAILED (exit 2); those of arrays that went in before it stay queued."""
    try:
        backend.launch(items, root, record=lambda claims: locking.record_claims(root, manifest, claims))
    except Exception as err:  # noqa: BLE001 - sbatch's own message is the useful part
        message = " ".join(str(err).split())[:300]
        for item in items:
            if item.claim.job_id is None:
                RunDir(item.run_dir).update_status(state=runs.FAILED, reason=f"submission failed: {message}")
        raise UserError(f"sbatch refused the job: {message}", where=f"--profile {backend.profile.name}",
                        fix="fix the profile (partition, account, qos, resources) and run again") from None


def _move_aside(run_dir: Path) -> None:
    """--force keeps the old results: the directory becomes <hash12>.old-<timestamp>."""
    shutil.move(str(run_dir), str(run_dir.with_name(f"{run_dir.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")))


def wait_for_slurm(planned: list[PlannedRun], *, poll_s: float) -> None:
    """Block until no launched run of the plan is PENDING or RUNNING (reconciled with one squeue and at most one
    sacct per look, every `poll_s`: the profile's poll_interval_s)."""
    launched = [p for p in planned if p.launches]
    while True:
        view = SlurmView()
        manifests = {p.root: locking.read_manifest(p.root) for p in launched}
        view.expect(manifests[p.root].get(p.spec.hash) for p in launched)
        states = [reconcile(p.run_dir, manifests[p.root].get(p.spec.hash), view) for p in launched]
        if view.problem:  # a busy controller: say so, and look again at the next interval
            print(f"slurm: {view.problem}; asking again in {poll_s:.0f} s", file=sys.stderr, flush=True)
        if all(s is not None and s.state not in runs.ACTIVE_STATES for s in states):
            return
        time.sleep(poll_s)


def unfinished(planned: list[PlannedRun], *, queued_ok: bool) -> list[tuple[str, str]]:
    """(spec name, why) of each requested spec that ended neither done nor queued (`run`'s exit code 1)."""
    out = []
    for p in planned:
        status = RunDir(p.run_dir).read_status()
        state = status.state if status else None
        if p.state == runs.DAMAGED and not p.launches:  # skipped as damaged: not done, whatever STATUS says
            out.append((p.spec.name, p.reason))
            continue
        if state == runs.SUCCEEDED or (queued_ok and state in runs.ACTIVE_STATES) or p.reason == ACTIVE:
            continue  # done, queued, or another launcher's job is working on it
        why = state or "not run"
        if status and status.reason:
            why += f": {status.reason}"
        out.append((p.spec.name, why))
    return out
