"""Run states reconciled with the job lock and the scheduler; torch-free, never blocks on submitit.

One liveness truth: a started job holds its run's job lock (exoformer.rundir.RunDir.job_lock) for its whole
life and the kernel drops it when the process dies, whatever way it dies. So a RUNNING run whose lock nobody
holds is not running, whatever PID its STATUS names (the PID is a hint for messages only). Before a job takes
the lock (PENDING: queued on Slurm, or waiting for a local slot) its backend answers (`Backend.liveness`).

A run whose job is gone without a result is INTERRUPTED (killed by a signal, out of memory, a hang-up, a lost
launcher, or its time limit: "timed out"), which a plain `run` resumes from its last good checkpoint; FAILED
is only written by the job itself, for an error raised inside it. A queued run whose job never started goes
back to un-run (no STATUS). submitit's `result()` would wait forever on a dead job (docs/feasibility.md, Slurm
pitfall 3), so it is never called here.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Any

from exoformer.errors import UserError
from exoformer.runs import locking, rundirs as runs
from exoformer.runs.backends import Liveness, SlurmView, backend_class, launcher_liveness
from exoformer.runs.backends.slurm_query import waiting_words
from exoformer.registry.hashing import hash12
from exoformer.runs.run_index import RunInfo, find_runs, is_run, read_run_info, yaml_word
from exoformer.rundir import DAMAGED, RunDir

__all__ = ["Liveness", "SlurmView", "claim_alive", "format_table", "liveness", "reconcile", "row_for",
           "set_words", "status_rows", "yaml_word"]

RESUME_FIX = "run the same command again to resume from the last checkpoint"


def liveness(claim: locking.Claim | None, status: runs.Status, view: SlurmView) -> Liveness:
    """Is the job of a run that holds no job lock still queued or starting (its backend's answer)?"""
    cls = backend_class(status.backend or (claim.backend if claim else None))
    if cls is None:
        return launcher_liveness(claim)
    return cls.liveness(claim, status, view)


def _gone(claim: locking.Claim | None, status: runs.Status, view: SlurmView) -> Liveness | None:
    """Why the job of an active run is gone, or None while it may still be alive."""
    live = liveness(claim, status, view)
    if status.state == runs.RUNNING:
        if live.alive is not False and status.host not in (None, socket.gethostname()):
            return None  # a lock on another host may not show here: its scheduler decides (or nobody can tell)
        hint = f" (pid {status.pid} on {status.host})" if status.pid else ""
        return Liveness(alive=False, timed_out=live.timed_out, log=live.log,
                        reason=f"the job{hint} stopped without a result and holds no job lock"
                        + (f" ({live.reason})" if live.alive is False and claim is not None else ""))
    return live if live.alive is False else None


def reconcile(run_dir: Path, claim: locking.Claim | None, view: SlurmView, *, write: bool = True
              ) -> runs.Status | None:
    """STATUS of a run, with a gone job turned into INTERRUPTED (or back into un-run, None, when it never
    started); written atomically unless `write=False`, as `plan` asks: it must not change anything."""
    rd = RunDir(run_dir)
    status = rd.read_status()
    if status is not None and status.state == runs.FAILED and (status.reason or "").startswith("dead: "):
        status.state, status.reason = runs.INTERRUPTED, status.reason.removeprefix("dead: ") + f"; {RESUME_FIX}"
        return _write(rd, status, write)  # a job lost without a result is never a failure of the job
    if status is None or status.state not in runs.ACTIVE_STATES:
        return status
    if rd.job_lock_held():
        return status
    gone = _gone(claim, status, view)
    if gone is None:
        return status
    fresh = rd.read_status()  # the job may have started or finished between the two looks
    if fresh is None or fresh.state not in runs.ACTIVE_STATES or fresh.updated != status.updated \
            or rd.job_lock_held() or _handed_over(Path(run_dir), claim):
        return fresh
    if fresh.state == runs.PENDING and not any(rd.logs.glob("attempt-*.log")):
        if write:  # queued, never started: it was never run
            with contextlib.suppress(OSError):
                rd.status_file.unlink(missing_ok=True)
        return None
    where = f" during {fresh.stage}" if fresh.stage else ""
    what = "timed out" if gone.timed_out else "interrupted"
    fresh.state = runs.INTERRUPTED
    fresh.reason = f"{what}{where}: {gone.reason}; {RESUME_FIX}"
    fresh.log = gone.log or fresh.log
    fresh.pid = None
    return _write(rd, fresh, write)


def _handed_over(run_dir: Path, claim: locking.Claim | None) -> bool:
    """Whether the run's claim now names other jobs than the one it was judged by. The manifest is read before
    Slurm is asked: a link job that submitted the run's next array and ended in between looks gone, but it
    handed the run over (`<root>/<spec>/<hash12>`: the root two levels up)."""
    if claim is None:
        return False
    now = claims_by_run(locking.read_manifest(run_dir.parent.parent)).get((run_dir.parent.name, run_dir.name))
    return now is not None and (now.job_id, now.eval_job_id) != (claim.job_id, claim.eval_job_id)


def _write(rd: RunDir, status: runs.Status, write: bool) -> runs.Status:
    """The reconciled status, written when asked and possible: a read-only root still gets its answer."""
    if write:
        try:
            return rd.write_status(status)
        except (OSError, UserError):
            pass
    return status


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
            total_steps: int | None = None, indexed: RunInfo | None = None) -> dict[str, Any]:
    """One row of `status`: state, preset and `--set` overrides (the run's identity, exoformer/run_identity.py: two
    variants of one spec otherwise read alike), progress (step / total, last loss), elapsed, job id, log path.

    `indexed`: the run as the run index read it (exoformer/runs/run_index.py); a finished run then shows the
    index's integrity verdict, checked against the same files. Without it (or when the run's state changed since
    the index read it) the run's files are read afresh. A run the index reads DAMAGED (exoformer/runs/run_index.py
    read_run_info) is DAMAGED here too, with the same reason, unless a job is working on it."""
    info, problem = indexed, None
    settled = status is None or status.state not in runs.ACTIVE_STATES
    if info is None or (settled and run_dir.is_dir() and info.state not in (status.state if status else None,
                                                                             DAMAGED)):
        info, problem = _read_afresh(run_dir)
    if total_steps is None and info is not None:
        total_steps = info.steps
    last = RunDir(run_dir).last_train_line()
    started = runs.parse_time(status.started) if status else None
    ended = runs.parse_time(status.updated) if status and status.state not in runs.ACTIVE_STATES else None
    elapsed = None
    if started:
        end_ts = ended.timestamp() if ended else time.time()
        elapsed = max(0.0, end_ts - started.timestamp())
    damage = problem or (info.damage if info is not None else None)
    if damage and (settled or (info is not None and info.identity is None)):  # no identity: DAMAGED in any state
        status = runs.Status(**{**(status.to_dict() if status else {}), "state": DAMAGED, "reason": damage})
    identity = info.identity if info is not None else None
    return {"spec": spec_name or run_dir.parent.name, "hash": run_dir.name,
            "preset": identity.preset if identity else None,
            "overrides": dict(identity.overrides) if identity else {},
            "state": status.state if status else "NEW", "stage": status.stage if status else None,
            "step": last.get("step") if last else 0, "total_steps": total_steps,
            "loss": last.get("loss") if last else None, "elapsed_s": elapsed,
            "job_id": status.job_id if status else None, "backend": status.backend if status else None,
            "reason": status.reason if status else None, "log": status.log if status else None,
            "run_dir": str(run_dir)}


def _read_afresh(run_dir: Path) -> tuple[RunInfo | None, str | None]:
    """(the run as its files say now, why they cannot be read): a broken run directory must not break `status`,
    and makes a finished run DAMAGED."""
    if not is_run(RunDir(run_dir)):
        return None, None
    try:
        return read_run_info(RunDir(run_dir)), None
    except UserError as err:
        return None, f"{err.where}: {err.problem}"


def claims_by_run(manifest: dict[str, locking.Claim]) -> dict[tuple[str, str], locking.Claim]:
    """The manifest's claims by (spec name, hash12), the two names of a run directory under its root
    (exoformer/runs/rundirs.py run_dir_for): a claim is found without reading the run's spec file."""
    return {(claim.name, hash12(claim.hash)): claim for claim in manifest.values()}


def index_entries(run_dirs: list[tuple[Path, str | None, int | None]],
                  root_of: dict[Path, Path]) -> dict[Path, RunInfo]:
    """The run index's entries of these run directories (exoformer/runs/run_index.py; inside one_view()
    each spec directory is read once per view)."""
    names: dict[Path, set[str]] = {}
    for run_dir, _, _ in run_dirs:
        names.setdefault(root_of[run_dir], set()).add(run_dir.parent.name)
    return {info.path: info for root, specs in names.items() for info in find_runs(root, specs=specs)}


def status_rows(run_dirs: list[tuple[Path, str | None, int | None]], root_of: dict[Path, Path],
                view: SlurmView | None = None) -> list[dict]:
    """Reconciled rows for (run_dir, spec name, total steps) triples; `root_of` maps each to its runs root.
    A finished run's integrity verdict comes from the run index (see row_for). One SlurmView answers for every
    run (`view`: one kept from an earlier refresh, as `status --watch` does between its Slurm polls)."""
    indexed = index_entries(run_dirs, root_of)
    manifests = {root: claims_by_run(locking.read_manifest(root)) for root in dict.fromkeys(root_of.values())}
    claims = {run_dir: manifests[root_of[run_dir]].get((run_dir.parent.name, run_dir.name))
              for run_dir, _, _ in run_dirs}
    view = view if view is not None else SlurmView()
    view.expect(claims.values())
    rows = []
    for run_dir, name, total in run_dirs:
        claim = claims[run_dir]
        status = reconcile(run_dir, claim, view) if run_dir.is_dir() else None
        row = row_for(run_dir, status, name, total, indexed.get(run_dir))
        active = status is not None and status.state in runs.ACTIVE_STATES
        if active and claim is not None:
            _add_jobs(row, claim, view)
        rows.append(row)
    return rows


def _add_jobs(row: dict[str, Any], claim: locking.Claim, view: SlurmView) -> None:
    """An active run's jobs as the scheduler holds them: the job ids (training, then its evaluation) and why the
    queued one waits, and since when."""
    if row["job_id"] is None and claim.job_id:
        row["job_id"] = claim.job_id  # submitted, not started yet
    row["eval_job_id"] = claim.eval_job_id
    cls = backend_class(claim.backend)
    if cls is None or cls.on_this_machine or row["state"] != runs.PENDING:  # only a scheduler's queue says why
        return
    for job_id in (row["job_id"], claim.job_id, claim.eval_job_id):
        job = view.queued(job_id) if job_id else None
        if job is not None and job.state == "PENDING":
            row["waiting"] = waiting_words(job.reason)
            row["waited_s"] = max(0.0, time.time() - job.submitted) if job.submitted else None
            row["waiting_job"] = job_id
            return


def set_words(overrides: dict[str, Any]) -> list[str]:
    """The `--set` words of a run's recorded overrides (`train.steps=60`), values written as YAML reads them back."""
    return [f"{key}={yaml_word(value)}" for key, value in overrides.items()]


def _variant(row: dict) -> tuple[str, str]:
    """(preset, overrides) of a row as the table shows them; "-" where the run has no identity yet."""
    words = set_words(row.get("overrides") or {})
    return row.get("preset") or "-", ",".join(words) or "-"


def format_table(rows: list[dict]) -> str:
    if not rows:
        return "no runs"
    w = max(4, *(len(r["spec"]) for r in rows))
    variants = [_variant(r) for r in rows]
    pw = max(6, *(len(p) for p, _ in variants))
    sw = max(3, *(len(s) for _, s in variants))
    lines = [f"{'SPEC':<{w}}  {'HASH':<12}  {'PRESET':<{pw}}  {'SET':<{sw}}  {'STATE':<9}  {'PROGRESS':<16}  "
             f"{'LOSS':>7}  {'ELAPSED':>8}  {'JOB':<10}  LOG / REASON"]
    for r, (preset, sets) in zip(rows, variants):
        progress = f"{r['step'] or 0}/{r['total_steps'] or '?'}"
        if r["stage"] and r["state"] in runs.ACTIVE_STATES:
            progress += f" {r['stage']}"
        loss = f"{r['loss']:.3f}" if isinstance(r["loss"], (int, float)) else "-"
        tail = r["log"] or "-"
        if r.get("waiting"):  # a queued Slurm job: why it waits, and for how long
            tail = f"{r['waiting']} (waited {_duration(r.get('waited_s'))})"
        elif r["state"] == runs.PENDING and r["reason"]:
            tail = r["reason"]
        if r["state"] in (runs.FAILED, runs.INTERRUPTED) and r["reason"]:
            tail = f"{r['reason']} | {tail}"
        elif r["state"] in (runs.SUCCEEDED, DAMAGED) and r["reason"]:  # a DAMAGED run: why, and its fix
            tail = r["reason"]
        lines.append(f"{r['spec']:<{w}}  {r['hash']:<12}  {preset:<{pw}}  {sets:<{sw}}  {r['state']:<9}  "
                     f"{progress:<16}  {loss:>7}  {_duration(r['elapsed_s']):>8}  {_jobs(r):<10}  "
                     f"{tail}")
    counts = Counter(r["state"] for r in rows)
    lines.append("total: " + ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


def _jobs(row: dict) -> str:
    """The run's job ids: training, then its evaluation job (eval_as_job) after a '+'."""
    jobs = [j for j in dict.fromkeys((row["job_id"], row.get("eval_job_id"))) if j]
    return "+".join(map(str, jobs)) or "-"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 3600:
        return f"{seconds // 60}:{seconds % 60:02d}"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
