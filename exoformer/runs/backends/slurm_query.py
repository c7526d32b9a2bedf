"""What the harness asks a Slurm controller, at a cost that does not grow with the cluster or the plan.

One reconciliation (one `status`, one look of `run --wait`) runs at most one squeue and one sacct:
- squeue lists this user's jobs only (`-u USER` and no job list). squeue then asks the controller for one user's
  jobs; a job list of more than one id makes it load every job of the cluster and filter on the client.
- sacct asks, in one call, for every expected job that has left the queue. Array jobs are asked by their array
  id, which covers all their tasks. A list longer than SACCT_IDS_CHARS becomes one `-u USER -S <first submit>`.
A transient controller error ("Socket timed out", "Unable to contact slurm controller") is retried with
exponential backoff and jitter, then reported in one line (`SlurmView.problem`); callers show that line and
carry on with what they know. sbatch is never retried here: a timed-out submission may have gone through.
The site's limits come from `scontrol show config` and sacctmgr, unless the profile names them (docs/cluster.md).
"""

from __future__ import annotations

import getpass
import random
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

RETRY_DELAYS_S = (1.0, 2.0, 4.0)
"""Waits before each retry of a transient controller error, each scaled by a random factor in [0.5, 1.5)."""
COMMAND_TIMEOUT_S = 30.0
SACCT_IDS_CHARS = 8000
"""Longest comma-separated id list given to one sacct; past it sacct is asked by user and start time."""
DEFAULT_POLL_S = 30.0
"""How often a watcher asks Slurm when no claim names its profile's poll_interval_s."""
DEFAULT_MAX_ARRAY_SIZE = 1001
"""Slurm's default MaxArraySize: array indices 0..1000."""

TRANSIENT = ("socket timed out", "unable to contact slurm controller", "connection refused", "connection timed out",
             "resource temporarily unavailable", "slurmctld not responding", "communication connection failure",
             "slurmdbd: connection", "try again", "temporarily unavailable", "timed out after")


class SlurmUnavailable(RuntimeError):
    """A Slurm client that failed for good: not installed, a refusal, or a transient error past its retries."""


def is_transient(message: str) -> bool:
    """Whether a Slurm client's error says the controller was busy or unreachable, not that the request was wrong."""
    text = message.lower()
    return "invalid" not in text and any(word in text for word in TRANSIENT)


def slurm_command(*args: str, delays: tuple[float, ...] | None = None, log: list[str] | None = None) -> str:
    """stdout of a Slurm client; transient errors are retried after `delays` (default RETRY_DELAYS_S).
    Raises SlurmUnavailable with a one-line reason; `log` gets the command name of every attempt."""
    delays = RETRY_DELAYS_S if delays is None else delays
    for attempt in range(len(delays) + 1):
        if log is not None:
            log.append(args[0])
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        except FileNotFoundError:
            raise SlurmUnavailable(f"{args[0]} is not installed here") from None
        except subprocess.TimeoutExpired:
            message = f"{args[0]} timed out after {COMMAND_TIMEOUT_S:.0f} s"
        except OSError as err:
            raise SlurmUnavailable(f"{args[0]}: {err.strerror or err}") from None
        else:
            if done.returncode == 0:
                return done.stdout
            message = " ".join((done.stderr or done.stdout).split())[:300] or f"{args[0]} exited {done.returncode}"
            if not is_transient(message):
                raise SlurmUnavailable(message)
        if attempt == len(delays):
            raise SlurmUnavailable(f"{args[0]} did not answer after {attempt + 1} tries: {message}")
        time.sleep(delays[attempt] * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


def slurm_user() -> str:
    return getpass.getuser()


ENDED_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                          "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"})
"""States of a job that squeue still shows for MinJobAge after it ended; it no longer counts against a limit."""


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """One of this user's jobs as squeue shows it."""

    state: str
    reason: str | None = None
    """Slurm's pending reason (Priority, Resources, Dependency, QOSMaxSubmitJobPerUserLimit ...); None if running."""
    submitted: float | None = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


def queued_count(queue: dict[str, QueuedJob] | None) -> int:
    """This user's jobs that count against a queued-job limit: pending or running (array tasks one each)."""
    return sum(1 for job in (queue or {}).values() if not job.ended)


WAITING_WORDS = {
    "Priority": "other jobs come first (priority)",
    "Resources": "waiting for free nodes",
    "Dependency": "waits for the jobs it follows",
    "DependencyNeverSatisfied": "never starts: a job it follows failed (scancel it, then run again)",
    "JobArrayTaskLimit": "held by the array's throttle (array_parallelism)",
    "BeginTime": "waits for its start time (a requeued job's hold)",
    "JobHeldUser": "held by you (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "ReqNodeNotAvail": "its nodes are unavailable (down, drained or reserved)",
    "PartitionDown": "its partition is down",
    "PartitionNodeLimit": "asks for more nodes than the partition allows",
    "PartitionTimeLimit": "asks for more time than the partition allows",
    "Reservation": "waits for its reservation",
    "Licenses": "waits for licenses",
    "Cleaning": "its nodes are being cleaned after a job",
    "launch failed requeued held": "held after a failed launch (scontrol release)",
}


def waiting_words(reason: str | None) -> str:
    """Why a job waits, in words a user reads; Slurm's own word follows in brackets."""
    if not reason or reason == "None":
        return "queued"
    words = WAITING_WORDS.get(reason)
    if words is None and reason.startswith(("QOS", "Assoc")):
        owner = "the QOS" if reason.startswith("QOS") else "your account"
        what = reason.removeprefix("QOS").removeprefix("Assoc").removesuffix("Limit")
        words = f"held by a limit of {owner} ({_limit_words(what)})"
    return f"{words or 'queued'} [{reason}]"


def _limit_words(what: str) -> str:
    for key, words in (("MaxSubmitJob", "queued jobs per user"), ("MaxJobs", "running jobs"), ("GRES", "GPUs"),
                       ("Cpu", "CPUs"), ("Node", "nodes"), ("Mem", "memory"), ("Wall", "run time"),
                       ("Billing", "billing units")):
        if key in what:
            return words
    return what


def _epoch(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        return None


def array_id(job_id: str) -> str:
    """The id sacct and scancel take for a whole array (`123` for `123_4`)."""
    return job_id.split("_", 1)[0]


class SlurmView:
    """squeue and sacct answers for the jobs of one reconciliation, fetched lazily, at most once each.

    `expect` names the jobs to be asked about, so that one sacct serves them all. `commands` counts the Slurm
    clients run (retries included); `problem` is the one-line reason when Slurm could not be asked."""

    def __init__(self, *, delays: tuple[float, ...] | None = None) -> None:
        self._expected: dict[str, float] = {}
        self._queue: dict[str, QueuedJob] | None = None
        self._final: dict[str, str] = {}
        self._asked: set[str] = set()
        self._delays = delays
        self.commands: list[str] = []
        self.problem: str | None = None
        self.poll_s: float | None = None
        """The shortest poll interval the expected claims ask for (their profiles' poll_interval_s)."""
        self.fetched = time.monotonic()

    def expect(self, claims: Iterable) -> None:
        """Jobs of these launch claims (exoformer.runs.locking.Claim; None is skipped) will be asked about."""
        for claim in claims:
            if claim is None:
                continue
            for job_id in (claim.job_id, getattr(claim, "eval_job_id", None)):
                if job_id:
                    self._expected[job_id] = min(self._expected.get(job_id, claim.submitted), claim.submitted)
            poll = getattr(claim, "poll_s", None)
            if poll:
                self.poll_s = poll if self.poll_s is None else min(self.poll_s, poll)

    def queue(self) -> dict[str, QueuedJob] | None:
        """job id (array tasks as `A_i`) -> this user's queued or running job; None when Slurm cannot be asked."""
        if self._queue is None and self.problem is None:
            try:
                out = slurm_command("squeue", "-h", "-r", "-u", slurm_user(), "-o", "%i|%T|%r|%V",
                                    delays=self._delays, log=self.commands)
            except SlurmUnavailable as err:
                self.problem = str(err)
                return None
            queue = {}
            for line in out.splitlines():
                parts = line.split("|")
                if len(parts) >= 2:
                    reason = parts[2] if len(parts) > 2 and parts[2] not in ("", "None") else None
                    queue[parts[0]] = QueuedJob(state=parts[1], reason=reason,
                                                submitted=_epoch(parts[3]) if len(parts) > 3 else None)
            self._queue = queue
            self.fetched = time.monotonic()
        return self._queue

    def queued(self, job_id: str | None) -> QueuedJob | None:
        queue = self.queue() or {}
        return queue.get(job_id) if job_id else None

    def final_state(self, job_id: str) -> str | None:
        """The latest accounting state of a job that left the queue (`CANCELLED by 0 (exit 0:15)`), or None."""
        if job_id not in self._asked:
            self._fetch_final({job_id, *(j for j in self._expected if j not in (self.queue() or {}))})
        return self._final.get(job_id)

    def _fetch_final(self, job_ids: set[str]) -> None:
        self._asked |= job_ids
        arrays = sorted({array_id(j) for j in job_ids})
        fields = ["-X", "-n", "-P", "-o", "JobID,State,ExitCode"]
        if len(",".join(arrays)) <= SACCT_IDS_CHARS:
            args = ["sacct", *fields, "-j", ",".join(arrays)]
        else:
            first = min((self._expected.get(j, time.time()) for j in job_ids), default=time.time()) - 86400
            args = ["sacct", *fields, "-u", slurm_user(), "-S", time.strftime("%Y-%m-%dT%H:%M:%S",
                                                                               time.localtime(first))]
        try:
            out = slurm_command(*args, delays=self._delays, log=self.commands)
        except SlurmUnavailable as err:
            self.problem = self.problem or str(err)
            return
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[0] in job_ids:
                self._final[parts[0]] = f"{parts[1]} (exit {parts[2]})"


@dataclass(frozen=True, slots=True)
class SiteLimits:
    """What one user may have in a Slurm queue: array indices below `max_array_size`, at most `max_submit`
    jobs queued or running (array tasks count one each; None: no limit found)."""

    max_array_size: int
    max_submit: int | None
    source: str
    """Where each limit was read: the profile or the cluster."""

    def describe(self) -> str:
        cap = "no limit on queued jobs found" if self.max_submit is None else f"{self.max_submit} queued jobs per user"
        return f"arrays below index {self.max_array_size}, {cap} ({self.source})"


def site_limits(*, max_array_size: int | None, max_submit: int | None, qos: str | None,
                log: list[str] | None = None) -> SiteLimits:
    """The limits a profile names, else what the cluster says (`scontrol show config`, the user's association
    and QOS in sacctmgr, where the user may read them)."""
    sources = []
    if max_array_size is None:
        max_array_size = _config_value("MaxArraySize", log) or DEFAULT_MAX_ARRAY_SIZE
        sources.append("MaxArraySize from scontrol")
    else:
        sources.append("max_array_size from the profile")
    if max_submit is None:
        max_submit = _submit_limit(qos, log)
        sources.append("MaxSubmitJobs from sacctmgr" if max_submit else "no MaxSubmitJobs in sacctmgr")
    else:
        sources.append("max_submit_jobs from the profile")
    return SiteLimits(max_array_size=max_array_size, max_submit=max_submit, source=", ".join(sources))


def _config_value(key: str, log: list[str] | None) -> int | None:
    try:
        out = slurm_command("scontrol", "show", "config", log=log)
    except SlurmUnavailable:
        return None
    for line in out.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == key:
            return _int(value)
    return None


def _submit_limit(qos: str | None, log: list[str] | None) -> int | None:
    """The smallest MaxSubmit of the user's associations and of the QOS the jobs run under."""
    limits = []
    try:
        assoc = slurm_command("sacctmgr", "-n", "-P", "show", "assoc", f"user={slurm_user()}",
                              "format=MaxSubmit,DefaultQOS", log=log)
    except SlurmUnavailable:
        assoc = ""
    defaults = []
    for line in assoc.splitlines():
        cap, _, default_qos = line.partition("|")
        limits.append(_int(cap))
        defaults.append(default_qos.strip())
    qos = qos or next((d for d in defaults if d), None) or "normal"
    try:
        shown = slurm_command("sacctmgr", "-n", "-P", "show", "qos", qos, "format=Name,MaxSubmitPU", log=log)
    except SlurmUnavailable:
        shown = ""
    for line in shown.splitlines():
        name, _, cap = line.partition("|")
        if name.strip() == qos:
            limits.append(_int(cap))
    found = [n for n in limits if n is not None and n > 0]
    return min(found) if found else None


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None
