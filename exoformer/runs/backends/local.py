"""The local backend: submitit's LocalExecutor with our own concurrency limit (submitit has no queue, #1685) and
an explicit timeout (submitit's default of 2 minutes must never bite: docs/ecosystem.md B6). submitit is
imported only when jobs are launched.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

from exoformer.budget.cost import local_slots
from exoformer.environ import glibc_malloc_env, quiet_progress_env, temporary_env
from exoformer.errors import UserError
from exoformer.limits import check_option
from exoformer.runs import locking
from exoformer.runs.backends.base import QUEUED_IN_JOB, Item, Liveness, launcher_liveness, said_timed_out
from exoformer.registry.profiles import Profile
from exoformer.registry.spec import Spec
from exoformer.rundir import JOBS_DIR, RunDir, Status


def default_concurrency() -> int:
    """Local jobs side by side, each with ONE torch thread (unless OMP_NUM_THREADS is set): one per core, and at
    the end of a launch the last few together when that keeps every core busy (exoformer.budget.cost.local_slots).
    Intra-op threads spin against other processes, so a table runs as parallel one-thread processes."""
    return max(1, os.cpu_count() or 1)


class LocalBackend:
    """submitit.LocalExecutor, each job with an explicit timeout: `concurrency` (--jobs) at a time when given, else
    local_slots' choice as the queue empties (one per core, the last few together)."""

    name = "local"
    waits = True
    orders_branches = True
    """A decay branch whose parent launches with it runs in its parent's job, after it (jobs_of)."""
    submits_under_lock = False
    on_this_machine = True

    def __init__(self, *, concurrency: int | None = None, timeout_min: float = 60.0, signal_delay_s: int = 30,
                 max_requeues: int = 3, threads_per_job: int | None = None, poll_s: float = 0.2,
                 profile: Profile | None = None) -> None:
        if concurrency is not None and concurrency < 1:
            raise UserError(f"must be >= 1, got {concurrency}", where="--jobs", fix="use --jobs 2")
        if threads_per_job is not None and threads_per_job < 1:
            raise UserError(f"must be >= 1, got {threads_per_job}", where="--threads", fix="use --threads 1")
        if not (0 < timeout_min < float("inf")):  # also NaN
            raise UserError(f"must be a positive number of minutes, got {timeout_min}", where="--timeout-min",
                            fix="e.g. --timeout-min 60")
        for value, option in ((concurrency, "--jobs"), (threads_per_job, "--threads"), (timeout_min, "--timeout-min")):
            if value is not None:
                check_option(value, option)
        self.concurrency = concurrency
        self.parallel_jobs = concurrency or default_concurrency()
        self.timeout_min = float(timeout_min)
        self.signal_delay_s = int(min(signal_delay_s, max(1, self.timeout_min * 60 / 4)))
        self.max_requeues = max_requeues
        self.threads_per_job = threads_per_job
        self.poll_s = poll_s
        self.profile = profile

    def check(self, specs: list[Spec]) -> None:
        return None

    @classmethod
    def liveness(cls, claim: locking.Claim | None, status: Status, view: object) -> Liveness:
        """The submitit controller once the job is submitted (its PID is the job id), else the launcher, which
        holds the job until a slot is free."""
        job_id = status.job_id or (claim.job_id if claim else None)
        if claim is None or not job_id or not job_id.isdigit():
            return launcher_liveness(claim)
        if claim.host != socket.gethostname():
            return Liveness(alive=None, reason=f"launched on {claim.host}")
        log = Path(claim.folder) / f"{job_id}_0_log.err" if claim.folder else None
        if locking.pid_alive(int(job_id), expect="submitit"):
            return Liveness(alive=True, reason=f"local job {job_id}")
        timed_out = said_timed_out(log)
        return Liveness(alive=False, timed_out=timed_out,
                        reason=f"local job {job_id} " + ("timed out" if timed_out else "ended without a result"),
                        log=str(log) if log and log.exists() else None)

    def _executor(self, root: Path):
        import submitit

        executor = submitit.LocalExecutor(folder=root / JOBS_DIR / "%j", max_num_timeout=self.max_requeues)
        executor.update_parameters(timeout_min=self.timeout_min, signal_delay_s=self.signal_delay_s,
                                   tasks_per_node=1, gpus_per_node=0, nodes=1)
        return executor

    def launch(self, items: list[Item], root: Path, *, record: Callable[[list[locking.Claim]], None] | None = None,
               on_done: Callable[[Item], None] | None = None) -> None:
        executor = self._executor(root)
        queue, running = jobs_of(items), []
        for first, *then in queue:
            for item in then:
                RunDir(item.run_dir).update_status(reason=QUEUED_IN_JOB.format(parent=first.spec.name))
        threads = str(self.threads_per_job or os.environ.get("OMP_NUM_THREADS") or 1)
        # inherited by the job processes
        with temporary_env({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, **quiet_progress_env(),
                            **glibc_malloc_env()}):
            try:
                while queue or running:
                    while queue and len(running) < self._slots(len(queue), len(running)):
                        job_items = queue.pop(0)
                        job = _submit_deaf_to_ctrl_c(executor, job_items)
                        for item in job_items:
                            item.claim.job_id, item.claim.folder = str(job.job_id), str(job.paths.folder)
                        if record:
                            record([item.claim for item in job_items])
                        running.append((job_items, job))
                    time.sleep(self.poll_s)
                    for pair in [p for p in running if p[1].done()]:
                        running.remove(pair)
                        for item in pair[0] if on_done else ():
                            on_done(item)
            except KeyboardInterrupt:
                self._stop(running)
                raise

    def _slots(self, queued: int, running: int) -> int:
        if self.concurrency is not None:
            return self.concurrency
        return local_slots(queued, running, default_concurrency())

    def _stop(self, running: list, *, grace_s: float = 60.0) -> None:
        """Ctrl-C in the launcher (the jobs ignore it): each job is asked to stop for good and gets SIGTERM, so
        training saves at its next step and the run ends INTERRUPTED; what still runs after `grace_s` is killed.
        No job outlives the launcher."""
        for job_items, job in running:
            for item in job_items:
                RunDir(item.run_dir).request_stop()
            _signal(job, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and not all(job.done() for _, job in running):
            try:
                time.sleep(0.1)
            except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
                break
        for _, job in running:
            if not job.done():
                _signal(job, signal.SIGKILL)


def jobs_of(items: list[Item]) -> list[list[Item]]:
    """The launch's items as jobs, in order: each run followed by the decay branches (train.branch_from) of it in
    this launch, so that a branch starts from its parent's checkpoint in its parent's process, without a process
    start of its own (docs/forecast.md "The CPU ladder"); every other run a job of its own."""
    names = {item.spec.name for item in items}

    def parent(item: Item) -> str | None:
        t = item.spec.train
        return t.branch_from if t.is_branch and t.branch_from in names else None

    jobs = {item.spec.name: [item] for item in items if parent(item) is None}
    for item in items:
        if parent(item) is not None:
            jobs[parent(item)].append(item)
    return list(jobs.values())


def _submit_deaf_to_ctrl_c(executor, job_items: list[Item]):
    """Start a local job of one run and those that follow it (jobs_of) with SIGINT ignored (inherited by its
    controller and tasks), so that a Ctrl-C reaches only the launcher, which then stops the jobs in order
    (LocalBackend._stop)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from exoformer.runs.pipeline import PipelineJob

        first, *then = job_items
        return executor.submit(PipelineJob(), str(first.run_dir), first.spec, "local", "all",
                               tuple((str(item.run_dir), item.spec) for item in then))
    finally:
        signal.signal(signal.SIGINT, previous)


def _signal(job, sig: int) -> None:
    """Signal a local job's controller (it forwards SIGTERM to its tasks; SIGKILL ends it and its tasks' parent)."""
    process = getattr(job, "_process", None)
    if process is None or process.poll() is not None:
        return
    try:
        if sig == signal.SIGKILL:
            for child in _children(process.pid):
                os.kill(child, signal.SIGKILL)
        process.send_signal(sig)
    except ProcessLookupError:
        pass


def _children(pid: int) -> list[int]:
    """PIDs whose parent is `pid` (Linux /proc), for killing a controller's tasks with it."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields_ = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields_) > 1 and fields_[1] == str(pid):
            out.append(int(stat.parent.name))
    return out


