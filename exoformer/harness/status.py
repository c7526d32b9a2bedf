"""Run states reconciled with the scheduler; torch-free, never blocks on submitit.

A run whose STATUS says PENDING or RUNNING is only believed while its job is alive: for Slurm, in `squeue`
(one call for all jobs), else its final state from `sacct`; for local jobs, the submitit controller process;
for inline runs (and local jobs still waiting for a slot), the launcher process. A dead job that left no
result (scancel, SIGKILL, OOM, node failure) is marked FAILED with the reason; submitit's `result()` would
wait forever on it (docs/feasibility.md, Slurm pitfall 3), so it is never called here. A live process holding
the run's job lock is alive whatever STATUS says.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exoformer.harness import locking, runs
from exoformer.rundir import RunDir


@dataclass(kw_only=True, slots=True)
class Liveness:
    alive: bool | None
    """True / False, or None when it cannot be told from here (another host, no Slurm client)."""
    reason: str = ""
    log: str | None = None


class SlurmView:
    """squeue and sacct answers for many jobs, fetched lazily once per reconciliation."""

    def __init__(self) -> None:
        self._queue: dict[str, str] | None = None

    def queue(self) -> dict[str, str] | None:
        """job id (array tasks as `A_i`) -> state, for every job the controller still holds; None without Slurm."""
        if self._queue is None:
            try:
                out = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%T"], capture_output=True, text=True,
                                     timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                return None
            if out.returncode != 0:
                return None
            self._queue = dict(line.split("|", 1) for line in out.stdout.splitlines() if "|" in line)
        return self._queue

    @staticmethod
    def final_state(job_id: str) -> str | None:
        """The latest accounting state of a job (`CANCELLED by 0`, `FAILED`, `TIMEOUT` ...), or None."""
        try:
            out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        rows = [line.split("|") for line in out.stdout.splitlines() if line.count("|") == 2]
        rows = [r for r in rows if r[0] == job_id]
        return f"{rows[-1][1]} (exit {rows[-1][2]})" if rows else None


def liveness(claim: locking.Claim | None, status: runs.Status, view: SlurmView) -> Liveness:
    """Is the job working on this run still alive?"""
    job_id = status.job_id or (claim.job_id if claim else None)
    backend = status.backend or (claim.backend if claim else None)
    if backend == "slurm" and job_id:
        queue = view.queue()
        if queue is None:
            return Liveness(alive=None, reason="no Slurm client here")
        if job_id in queue:
            return Liveness(alive=True, reason=queue[job_id])
        final = view.final_state(job_id)
        folder = Path(claim.folder) if claim and claim.folder else None
        log = folder / f"{job_id}_0_log.err" if folder else None
        return Liveness(alive=False, reason=f"slurm job {job_id} ended without a result: "
                        + (final or "no longer in the queue"), log=str(log) if log and log.exists() else None)
    if claim is None:
        if status.pid and status.host == socket.gethostname():  # the job wrote its PID: ask the process
            if locking.pid_alive(status.pid):
                return Liveness(alive=True, reason=f"pid {status.pid}")
            return Liveness(alive=False, reason=f"process {status.pid} died without a result")
        return Liveness(alive=None, reason="no launch record in the manifest")
    if claim.host != socket.gethostname():
        return Liveness(alive=None, reason=f"launched on {claim.host}")
    if backend == "local" and job_id:
        if locking.pid_alive(int(job_id), expect="submitit"):
            return Liveness(alive=True, reason=f"local job {job_id}")
        log = Path(claim.folder) / f"{job_id}_0_log.err" if claim.folder else None
        return Liveness(alive=False, reason=f"local job {job_id} died without a result",
                        log=str(log) if log and log.exists() else None)
    if locking.pid_alive(claim.launcher_pid):
        return Liveness(alive=True, reason=f"launcher pid {claim.launcher_pid}")
    return Liveness(alive=False, reason=f"launcher process {claim.launcher_pid} died without a result")


def reconcile(run_dir: Path, claim: locking.Claim | None, view: SlurmView, *, write: bool = True
              ) -> runs.Status | None:
    """STATUS of a run, with a dead job turned into FAILED and the reason why (written atomically unless
    `write=False`, as `plan` asks: it must not change anything)."""
    rd = RunDir(run_dir)
    status = rd.read_status()
    if status is None or status.state not in runs.ACTIVE_STATES:
        return status
    if rd.job_lock_held():
        return status
    live = liveness(claim, status, view)
    if live.alive is not False:
        return status
    fresh = rd.read_status()  # the job may have finished between the two looks
    if fresh is None or fresh.state not in runs.ACTIVE_STATES or fresh.updated != status.updated:
        return fresh
    fresh.state = runs.FAILED
    fresh.reason = f"dead: {live.reason}" + (f" (during {fresh.stage})" if fresh.stage else "")
    fresh.log = live.log or fresh.log
    fresh.pid = None
    return rd.write_status(fresh) if write else fresh


def claim_alive(run_dir: Path, claim: locking.Claim | None, view: SlurmView) -> bool:
    """Whether some job is working on the run when STATUS cannot tell (missing or damaged): a live holder of the
    job lock, or a claim whose job is alive (or cannot be told dead from here)."""
    if RunDir(run_dir).job_lock_held():
        return True
    if claim is None:
        return False
    probe = runs.Status(state=runs.PENDING, backend=claim.backend, job_id=claim.job_id)
    return liveness(claim, probe, view).alive is not False


def row_for(run_dir: Path, status: runs.Status | None, spec_name: str | None = None,
            total_steps: int | None = None) -> dict[str, Any]:
    """One row of `status`: state, progress (step / total, last loss), elapsed, job id, log path."""
    if total_steps is None:
        spec = _safe_spec(run_dir)
        total_steps = spec.train.steps if spec else None
    last = RunDir(run_dir).last_train_line()
    started = runs.parse_time(status.started) if status else None
    ended = runs.parse_time(status.updated) if status and status.state not in runs.ACTIVE_STATES else None
    elapsed = None
    if started:
        end_ts = ended.timestamp() if ended else time.time()
        elapsed = max(0.0, end_ts - started.timestamp())
    if status is not None and run_dir.is_dir():
        from exoformer.harness.row_integrity import reading_state

        state, damage = reading_state(RunDir(run_dir), status.state)
        if damage:
            status = runs.Status(**{**status.to_dict(), "state": state, "reason": damage})
    return {"spec": spec_name or run_dir.parent.name, "hash": run_dir.name,
            "state": status.state if status else "NEW", "stage": status.stage if status else None,
            "step": last.get("step") if last else 0, "total_steps": total_steps,
            "loss": last.get("loss") if last else None, "elapsed_s": elapsed,
            "job_id": status.job_id if status else None, "backend": status.backend if status else None,
            "reason": status.reason if status else None, "log": status.log if status else None,
            "run_dir": str(run_dir)}


def _safe_spec(run_dir: Path):
    try:
        return runs.read_spec(run_dir)
    except Exception:  # noqa: BLE001 - a broken spec.yaml must not break `status`
        return None


def collect(run_dirs: list[tuple[Path, str | None, int | None]], root_of: dict[Path, Path]) -> list[dict]:
    """Reconciled rows for (run_dir, spec name, total steps) triples; `root_of` maps each to its runs root."""
    view = SlurmView()
    manifests: dict[Path, dict[str, locking.Claim]] = {}
    rows = []
    for run_dir, name, total in run_dirs:
        root = root_of[run_dir]
        if root not in manifests:
            manifests[root] = locking.read_manifest(root)
        spec = _safe_spec(run_dir)
        claim = manifests[root].get(spec.hash) if spec else None
        status = reconcile(run_dir, claim, view) if run_dir.is_dir() else None
        row = row_for(run_dir, status, name, total)
        if row["job_id"] is None and claim and claim.job_id and status and status.state in runs.ACTIVE_STATES:
            row["job_id"] = claim.job_id  # submitted, not started yet
        rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    if not rows:
        return "no runs"
    w = max(4, *(len(r["spec"]) for r in rows))
    lines = [f"{'SPEC':<{w}}  {'HASH':<12}  {'STATE':<9}  {'PROGRESS':<16}  {'LOSS':>7}  {'ELAPSED':>8}  "
             f"{'JOB':<10}  LOG / REASON"]
    for r in rows:
        progress = f"{r['step'] or 0}/{r['total_steps'] or '?'}"
        if r["stage"] and r["state"] in runs.ACTIVE_STATES:
            progress += f" {r['stage']}"
        loss = f"{r['loss']:.3f}" if isinstance(r["loss"], (int, float)) else "-"
        tail = r["log"] or "-"
        if r["state"] == runs.FAILED and r["reason"]:
            tail = f"{r['reason']} | {tail}"
        elif r["state"] == runs.SUCCEEDED and r["reason"]:
            tail = r["reason"]
        lines.append(f"{r['spec']:<{w}}  {r['hash']:<12}  {r['state']:<9}  {progress:<16}  {loss:>7}  "
                     f"{_duration(r['elapsed_s']):>8}  {str(r['job_id'] or '-'):<10}  {tail}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    lines.append("total: " + ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 3600:
        return f"{seconds // 60}:{seconds % 60:02d}"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
