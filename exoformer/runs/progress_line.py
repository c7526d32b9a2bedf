"""One line on the terminal for a whole `run`: jobs done / starting / running / queued, each running job's stage,
step and ETA, and the total ETA, rewritten in place while local jobs run.

The jobs write nothing here: the line is read from their run directories (STATUS: state, stage, start time;
metrics.jsonl: the newest training step) and the runs root's manifest (a job submitted has its job id there), so
it shows the same truth as `status`. A job is *starting* from its submission until it logs its first training
step (the interpreter, the imports, the data and the model), *running* after that; a run that ended INTERRUPTED
(Ctrl-C, a timeout) is counted apart, never as done.

A job's ETA is its expected duration minus its elapsed time. The expected duration, in this order:
1. once its own step rate is steady (RATE_MIN_STEPS steps measured, and the rates of its last two windows of steps
   within RATE_AGREEMENT of each other: `_Rate`): the steps left at the rate of the recent half of its steps, plus
   POST_TRAIN_SHARE of its training time for the stages after training (past training: that share from when
   training ended). The rate is measured by this line between the steps it sees, so the startup and the first
   step are not in it;
2. the mean duration of this launch's jobs that SUCCEEDED, once one has;
3. the cost model of `plan` (exoformer/budget/cost.py, `planned_seconds`: a CPU profile's CPU-minutes, every stage
   of the job; a GPU profile's GPU-hours, training on one GPU), when the launch passed its plan;
4. else its training time so far extrapolated to the last step times (1 + POST_TRAIN_SHARE): startup and the slow
   first steps count in it, so it is high early on (issue 41: 3:44:23 for a 41-minute job).
The total ETA spreads the work left (the ETAs of the jobs started, plus one expected duration per queued job: the
mean of those that SUCCEEDED, else each one's planned seconds) over the launch's concurrency.
Torch-free; `render` is pure so it can be tested with a fake clock.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from exoformer.runs.backends.base import queued_in_a_job
from exoformer.rundir import INTERRUPTED, PENDING, RUNNING, SUCCEEDED, RunDir, parse_time
from exoformer.train.progress import duration

POST_TRAIN_SHARE = 0.35
"""Validate + evaluate + analyse over train, per job, at the smoke preset (benchmarks/bench_main_job.py measures it)."""
MAX_SHOWN = 3
"""Running jobs named on the line; the rest are counted."""
RATE_MIN_STEPS = 10
"""Steps a job's own rate must span before it can be steady (the first steps are slow: caches, allocations)."""
RATE_AGREEMENT = 0.2
"""A job's rate is steady when an estimate is within this fraction of the one before it (and stays steady)."""


@dataclass(kw_only=True, slots=True)
class JobView:
    """What the line knows of one job that has started."""

    name: str
    stage: str | None
    step: int
    total_steps: int
    elapsed_s: float
    rate_s: float | None = None
    """Seconds per training step, measured; only once steady (module docstring), else None."""
    train_end_s: float | None = None
    """Past training: the job's elapsed seconds when training ended (as the line saw it), else None."""
    planned_s: float | None = None
    """Seconds the whole job takes by the cost model of `plan`; None: not priced."""


def planned_seconds(cost: Any) -> float | None:
    """Wall seconds of one local job by the cost model `plan` prints (an exoformer.budget.cost.Cost): its
    CPU-minutes (every stage, one thread) on a CPU profile, else its GPU-hours (training, summed over GPUs: one
    GPU's wall time); None when the profile prices neither."""
    cpu_minutes, gpu_hours = getattr(cost, "cpu_minutes", None), getattr(cost, "gpu_hours", None)
    if cpu_minutes is not None and cpu_minutes > 0:
        return float(cpu_minutes) * 60.0
    if gpu_hours is not None and gpu_hours > 0:
        return float(gpu_hours) * 3600.0
    return None


def expected_duration(job: JobView, finished: list[float]) -> float | None:
    """Seconds the whole job is expected to take (module docstring), None while nothing tells."""
    training = job.stage in (None, "train")
    if job.rate_s is not None and job.total_steps > 0:
        after_training = POST_TRAIN_SHARE * job.total_steps * job.rate_s
        if training:
            return job.elapsed_s + max(0, job.total_steps - job.step) * job.rate_s + after_training
        if job.train_end_s is not None:
            return job.train_end_s + after_training
    if finished:
        return sum(finished) / len(finished)
    if job.planned_s is not None:
        return job.planned_s
    if training and job.step > 0 and job.total_steps > 0:
        return job.elapsed_s / job.step * job.total_steps * (1 + POST_TRAIN_SHARE)
    return None


def _eta(job: JobView, finished: list[float]) -> float | None:
    expected = expected_duration(job, finished)
    return None if expected is None else max(0.0, expected - job.elapsed_s)


def render(*, done: int, running: list[JobView], queued: int, finished: list[float], concurrency: int,
           starting: Iterable[JobView] = (), interrupted: int = 0, queued_planned_s: float | None = None) -> str:
    """`run: 3/9 done, 2 running (base-s42 train 120/150 ETA 0:12, gated-s42 evaluate), 4 queued; ETA 3:40`;
    `run: 0/9 done, 2 starting, 7 queued; ETA 12:00` while no job has logged a step; `, 1 interrupted` after
    `done` for runs that ended INTERRUPTED. `queued_planned_s`: the planned seconds of all the queued jobs."""
    starting = list(starting)
    total = done + interrupted + len(starting) + len(running) + queued
    parts, left = [], []
    for job in running:
        eta = _eta(job, finished)
        left.append(eta)
        what = f"{job.name} {job.stage or 'starting'}"
        if job.stage == "train" and job.total_steps:
            what += f" {job.step}/{job.total_steps}"
        parts.append(what + (f" ETA {duration(eta)}" if eta is not None else ""))
    left += [_eta(job, finished) for job in starting]
    shown = parts[:MAX_SHOWN] + ([f"+{len(parts) - MAX_SHOWN} more"] if len(parts) > MAX_SHOWN else [])
    text = f"run: {done}/{total} done" + (f", {interrupted} interrupted" if interrupted else "")
    if starting:
        text += f", {len(starting)} starting"
    if running or not starting:
        text += f", {len(running)} running" + (f" ({', '.join(shown)})" if shown else "")
    text += f", {queued} queued"
    if finished:
        queued_work = queued * sum(finished) / len(finished)
    elif queued and queued_planned_s is not None:
        queued_work = queued_planned_s
    else:
        per_job = next((e for e in (expected_duration(j, []) for j in [*running, *starting]) if e is not None), None)
        queued_work = None if per_job is None and queued else queued * (per_job or 0.0)
    active = len(running) + len(starting)
    if (active or queued) and queued_work is not None and all(eta is not None for eta in left):
        work = sum(left) + queued_work  # type: ignore[arg-type]
        text += f"; ETA {duration(work / max(1, min(concurrency, active + queued)))}"
    return text


@dataclass(slots=True)
class _Rate:
    """A job's training steps as this line saw them, (step, clock time) at each new step, and whether its rate is
    steady: RATE_MIN_STEPS steps measured, and the rates of the last two windows of steps (each a quarter of the
    steps seen, at least RATE_MIN_STEPS / 2) within RATE_AGREEMENT of each other: a job still speeding up or
    slowing down is not steady. Once steady it stays so; the rate is then that of the recent half of the steps seen,
    so slow first steps leave it. `train_end_s`: the job's elapsed seconds when the line first saw it past
    training."""

    samples: list[tuple[int, float]] = field(default_factory=list)
    steady: bool = False
    train_end_s: float | None = None

    def see(self, step: int, now: float) -> None:
        if self.samples and step < self.samples[-1][0]:  # a rerun, or a resume from an earlier checkpoint
            self.samples.clear()
            self.steady, self.train_end_s = False, None
        if self.samples and step == self.samples[-1][0]:
            return
        self.samples.append((step, now))
        first, last = self.samples[0][0], step
        if self.steady or last - first < RATE_MIN_STEPS:
            return
        window = max(RATE_MIN_STEPS // 2, (last - first) // 4)
        middle, start = self._at(last - window), self._at(last - 2 * window)
        before, recent = self._rate(start, middle), self._rate(middle, self.samples[-1])
        self.steady = before is not None and recent is not None and abs(recent - before) <= RATE_AGREEMENT * before

    def _at(self, step: float) -> tuple[int, float]:
        """The sample nearest to `step`."""
        return min(self.samples, key=lambda sample: abs(sample[0] - step))

    @staticmethod
    def _rate(a: tuple[int, float], b: tuple[int, float]) -> float | None:
        return (b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] and b[1] > a[1] else None

    @property
    def rate_s(self) -> float | None:
        if not self.steady:
            return None
        return self._rate(self._at((self.samples[0][0] + self.samples[-1][0]) / 2), self.samples[-1])


class RunProgress:
    """The live line of one launch: `start()`, `job_done(run_dir)` as each job ends, `say(text)` for a line of
    its own above it, `stop()`. Draws only when `stream` is a terminal; otherwise `say` just prints.
    `plan`: the launch's PlannedRun list (anything with `run_dir` and `cost`), whose cost model gives a job's ETA
    until its own rate is steady; without it, ETAs come from the jobs alone (module docstring)."""

    def __init__(self, jobs: list[tuple[str, Path, int]], *, concurrency: int, stream: TextIO | None = None,
                 interval_s: float = 1.0, clock=time.time, plan: Iterable[Any] = ()) -> None:
        self.jobs = {Path(run_dir): (name, steps) for name, run_dir, steps in jobs}
        self.planned_s: dict[Path, float] = {}
        for p in plan:
            seconds = planned_seconds(getattr(p, "cost", None))
            if seconds is not None and Path(p.run_dir) in self.jobs:
                self.planned_s[Path(p.run_dir)] = seconds
        self.concurrency = max(1, concurrency)
        self.stream = stream or sys.stderr
        self.live = bool(jobs) and self.stream.isatty()
        self.interval_s, self.clock = interval_s, clock
        self.done: set[Path] = set()
        self.interrupted: set[Path] = set()
        self.finished_s: list[float] = []
        self._rates: dict[Path, _Rate] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = False

    def start(self) -> RunProgress:
        if self.live and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="run-progress", daemon=True)
            self._thread.start()
        return self

    def job_done(self, run_dir: Path) -> None:
        """A job ended: its run counts as done, or as interrupted when it ended INTERRUPTED; a SUCCEEDED one's
        duration joins the mean that prices the jobs left."""
        status = RunDir(run_dir).read_status()
        started = parse_time(status.started) if status else None
        with self._lock:
            if Path(run_dir) in self.done or Path(run_dir) in self.interrupted:
                return
            if status is not None and status.state == INTERRUPTED:
                self.interrupted.add(Path(run_dir))
                return
            self.done.add(Path(run_dir))
            if started is not None and status.state == SUCCEEDED:
                ended = parse_time(status.updated)
                if ended is not None:
                    self.finished_s.append(max(0.0, ended.timestamp() - started.timestamp()))

    def say(self, text: str, *, file: TextIO | None = None) -> None:
        """Print a line of its own (a job's end), clearing the live line first and drawing it again after."""
        with self._lock:
            self._clear()
            print(text, file=file or sys.stdout, flush=True)
        self._draw()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            self._clear()

    def line(self) -> str:
        now = self.clock()
        submitted = self._submitted()
        running, starting, queued, queued_planned, ended, interrupted = [], [], 0, 0.0, 0, 0
        for run_dir, (name, steps) in self.jobs.items():
            if run_dir in self.done or run_dir in self.interrupted:
                continue
            rd = RunDir(run_dir)
            status = rd.read_status()
            planned = self.planned_s.get(run_dir)
            if status is None or status.state == PENDING:
                if run_dir in submitted and status is not None and not queued_in_a_job(status.reason):
                    # its job is on its way: a process, the imports
                    starting.append(JobView(name=name, stage=None, step=0, total_steps=steps, elapsed_s=0.0,
                                            planned_s=planned))
                else:
                    queued += 1
                    queued_planned = None if planned is None or queued_planned is None else queued_planned + planned
                continue
            if status.state != RUNNING:  # ended; the launcher has not seen its job exit yet
                if status.state == INTERRUPTED:
                    interrupted += 1
                else:
                    ended += 1
                continue
            started = parse_time(status.started)
            last = rd.last_train_line() if status.stage in (None, "train") else None
            step = int((last or {}).get("step") or 0)
            elapsed = max(0.0, now - started.timestamp()) if started else 0.0
            training = status.stage in (None, "train")
            with self._lock:
                rate = self._rates.get(run_dir)
                if training and step > 0:
                    rate = self._rates.setdefault(run_dir, _Rate())
                    rate.see(step, now)
                elif not training and rate is not None and rate.train_end_s is None:
                    rate.train_end_s = elapsed
                rate_s, train_end_s = (rate.rate_s, rate.train_end_s) if rate is not None else (None, None)
            view = JobView(name=name, stage=status.stage, step=step, total_steps=steps, elapsed_s=elapsed,
                           rate_s=rate_s, train_end_s=train_end_s, planned_s=planned)
            (starting if training and step == 0 else running).append(view)
        with self._lock:
            done, finished = len(self.done) + ended, list(self.finished_s)
            interrupted += len(self.interrupted)
        return render(done=done, running=running, queued=queued, finished=finished, concurrency=self.concurrency,
                      starting=starting, interrupted=interrupted,
                      queued_planned_s=queued_planned if queued_planned is not None and queued else None)

    def _submitted(self) -> set[Path]:
        """Run directories whose job this launch has submitted: a job id in their runs root's manifest."""
        from exoformer.runs import locking

        out: set[Path] = set()
        for root in {run_dir.parent.parent for run_dir in self.jobs}:
            try:
                claims = locking.read_manifest(root)
            except Exception:  # noqa: BLE001 - a manifest half replaced or not ours: none are known to start
                continue
            out.update(Path(c.run_dir) for c in claims.values() if c.job_id)
        return out

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self._draw()

    def _draw(self) -> None:
        if not self.live or self._stopping.is_set():
            return
        try:
            text = self.line()
        except Exception:  # noqa: BLE001 - a half-written STATUS between two looks: draw on the next tick
            return
        width = shutil.get_terminal_size((120, 24)).columns - 1  # a wrapped line cannot be rewritten in place
        with self._lock:
            self.stream.write("\r\033[K" + text[:width])
            self.stream.flush()
            self._shown = True

    def _clear(self) -> None:
        if self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False
