"""One line on the terminal for a whole `run`: jobs done / running / queued, each running job's stage, step and
ETA, and the total ETA, rewritten in place while local jobs run.

The jobs write nothing here: the line is read from their run directories (STATUS: state, stage, start time;
metrics.jsonl: the newest training step), so it shows the same truth as `status`. A job's ETA is its expected
duration minus its elapsed time: the mean duration of this launch's finished jobs once one has finished, before
that its training time extrapolated to the last step times (1 + POST_TRAIN_SHARE). The total ETA spreads the
work left (running jobs' ETAs plus one expected duration per queued job) over the launch's concurrency.
Torch-free; `render` is pure so it can be tested with a fake clock.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from exoformer.rundir import PENDING, RUNNING, RunDir, parse_time
from exoformer.train.progress import duration

POST_TRAIN_SHARE = 0.35
"""Validate + evaluate + analyse over train, per job, at the smoke preset (benchmarks/bench_main_job.py measures it)."""
MAX_SHOWN = 3
"""Running jobs named on the line; the rest are counted."""


@dataclass(kw_only=True, slots=True)
class JobView:
    """What the line knows of one running job."""

    name: str
    stage: str | None
    step: int
    total_steps: int
    elapsed_s: float


def expected_duration(job: JobView, finished: list[float]) -> float | None:
    """Seconds the whole job is expected to take (module docstring), None while nothing tells."""
    if finished:
        return sum(finished) / len(finished)
    if job.stage in (None, "train") and job.step > 0 and job.total_steps > 0:
        return job.elapsed_s / job.step * job.total_steps * (1 + POST_TRAIN_SHARE)
    return None


def render(*, done: int, running: list[JobView], queued: int, finished: list[float], concurrency: int) -> str:
    """`run: 3/9 done, 2 running (base-s42 train 120/150 ETA 0:12, gated-s42 evaluate), 4 queued; ETA 3:40`."""
    total = done + len(running) + queued
    parts, left = [], []
    for job in running:
        expected = expected_duration(job, finished)
        eta = None if expected is None else max(0.0, expected - job.elapsed_s)
        left.append(eta)
        what = f"{job.name} {job.stage or 'starting'}"
        if job.stage == "train" and job.total_steps:
            what += f" {job.step}/{job.total_steps}"
        parts.append(what + (f" ETA {duration(eta)}" if eta is not None else ""))
    shown = parts[:MAX_SHOWN] + ([f"+{len(parts) - MAX_SHOWN} more"] if len(parts) > MAX_SHOWN else [])
    text = f"run: {done}/{total} done, {len(running)} running" + (f" ({', '.join(shown)})" if shown else "")
    text += f", {queued} queued"
    per_job = sum(finished) / len(finished) if finished else next(
        (expected_duration(j, []) for j in running if expected_duration(j, []) is not None), None)
    if (running or queued) and per_job is not None and all(eta is not None for eta in left):
        work = sum(left) + queued * per_job  # type: ignore[arg-type]
        text += f"; ETA {duration(work / max(1, min(concurrency, len(running) + queued)))}"
    return text


class RunProgress:
    """The live line of one launch: `start()`, `job_done(run_dir)` as each job ends, `say(text)` for a line of
    its own above it, `stop()`. Draws only when `stream` is a terminal; otherwise `say` just prints."""

    def __init__(self, jobs: list[tuple[str, Path, int]], *, concurrency: int, stream: TextIO | None = None,
                 interval_s: float = 1.0, clock=time.time) -> None:
        self.jobs = {Path(run_dir): (name, steps) for name, run_dir, steps in jobs}
        self.concurrency = max(1, concurrency)
        self.stream = stream or sys.stderr
        self.live = bool(jobs) and self.stream.isatty()
        self.interval_s, self.clock = interval_s, clock
        self.done: set[Path] = set()
        self.finished_s: list[float] = []
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
        status = RunDir(run_dir).read_status()
        started = parse_time(status.started) if status else None
        with self._lock:
            if Path(run_dir) in self.done:
                return
            self.done.add(Path(run_dir))
            if started is not None and status.state != RUNNING:
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
        running, queued, ended = [], 0, 0
        for run_dir, (name, steps) in self.jobs.items():
            if run_dir in self.done:
                continue
            rd = RunDir(run_dir)
            status = rd.read_status()
            if status is None or status.state == PENDING:
                queued += 1
                continue
            if status.state != RUNNING:  # ended; the launcher has not seen its job exit yet
                ended += 1
                continue
            started = parse_time(status.started)
            last = rd.last_train_line() if status.stage in (None, "train") else None
            elapsed = max(0.0, now - started.timestamp()) if started else 0.0
            running.append(JobView(name=name, stage=status.stage, step=int((last or {}).get("step") or 0),
                                   total_steps=steps, elapsed_s=elapsed))
        with self._lock:
            done, finished = len(self.done) + ended, list(self.finished_s)
        return render(done=done, running=running, queued=queued, finished=finished, concurrency=self.concurrency)

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
