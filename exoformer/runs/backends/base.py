"""What every backend is: the `Backend` protocol, the work `Item` it launches, and the `Liveness` of a job that
holds no job lock yet (queued, or waiting for a slot).

A started job's liveness is its run's job lock (exoformer.rundir.RunDir.job_lock), whatever backend ran it;
a backend only answers for the time before the job takes the lock, and for what it knows about how a job
ended (a scheduler's time-out, a cancellation). Torch- and submitit-free, so `status` and `plan` stay fast.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from exoformer.io import open_regular
from exoformer.runs import locking
from exoformer.registry.spec import Spec
from exoformer.rundir import Status


@dataclass(kw_only=True, slots=True)
class Item:
    spec: Spec
    run_dir: Path
    claim: locking.Claim


@dataclass(kw_only=True, slots=True)
class Liveness:
    alive: bool | None
    """True / False, or None when it cannot be told from here (another host, no Slurm client)."""
    reason: str = ""
    log: str | None = None
    timed_out: bool = False
    """The job ended at its time limit (the scheduler or the local executor said so)."""


class Backend(Protocol):
    """A way to run pipeline jobs. Capabilities are class attributes that callers read instead of names."""

    name: str
    waits: bool
    """`launch` returns only when the jobs have ended (else they run on after it, as Slurm jobs do)."""
    submits_under_lock: bool
    """Jobs are submitted while the runs root's launch lock is held (submission is quick and records job ids)."""
    on_this_machine: bool
    """Jobs run on the launcher's machine (its devices are the ones to check)."""
    parallel_jobs: int
    """Jobs that run side by side while `launch` waits, in processes of their own: `run` then draws one progress
    line for them all (exoformer/runs/progress_line.py); 0 when the terminal belongs to the job (inline) or the
    launcher does not wait for the jobs (slurm)."""
    profile: object

    def check(self, specs: list[Spec]) -> None:
        """Refuse, in one line, what cannot run, before anything is written."""

    def launch(self, items: list[Item], root: Path, *, record: Callable[[list[locking.Claim]], None] | None = None,
               on_done: Callable[[Item], None] | None = None) -> None:
        """Start the jobs (and with `waits`, wait for them); `record` saves the claims once job ids are known."""

    @classmethod
    def liveness(cls, claim: locking.Claim | None, status: Status, view: object) -> Liveness:
        """Whether the job of a run that holds no job lock is still queued or starting."""


QUEUED_IN_JOB = "queued: runs in the job of {parent}, after it"
"""The STATUS reason of a run that waits inside another run's job (a decay branch in its parent's local job)."""


def queued_in_a_job(reason: str | None) -> bool:
    """Whether a queued run waits inside another run's job (QUEUED_IN_JOB): that job is live, its own start is not."""
    return bool(reason) and reason.startswith(QUEUED_IN_JOB.split("{", 1)[0])


def launcher_liveness(claim: locking.Claim | None) -> Liveness:
    """The launcher process of a claim, recognised by its PID and process identity (a recycled PID is not it)."""
    if claim is None:
        return Liveness(alive=False, reason="no launch record and no job holds the run's lock")
    if claim.host != socket.gethostname():
        return Liveness(alive=None, reason=f"launched on {claim.host}")
    if locking.pid_alive(claim.launcher_pid, identity=claim.launcher_identity):
        return Liveness(alive=True, reason=f"launcher pid {claim.launcher_pid}")
    return Liveness(alive=False, reason=f"the launcher (pid {claim.launcher_pid}) is gone")


def said_timed_out(log: Path | None) -> bool:
    """Whether a submitit job log says the job reached its time limit."""
    if log is None:
        return False
    try:
        with open_regular(log, limit=1 << 62) as f:  # a FIFO there must not block `status`
            f.seek(0, 2)
            f.seek(max(0, f.tell() - (1 << 20)))
            tail = f.read()
    except OSError:
        return False
    return b"this job is timed-out" in tail or b"Job has timed out" in tail
