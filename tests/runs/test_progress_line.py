"""The whole run's progress line: counts, each running job's stage, step and ETA, and the total ETA, read from the
run directories; drawn in place only on a terminal."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest

from exoformer.rundir import RunDir, Status
from exoformer.runs.progress_line import POST_TRAIN_SHARE, JobView, RunProgress, render

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def test_render_before_any_job_finished_extrapolates_training():
    job = JobView(name="base-s42", stage="train", step=30, total_steps=150, elapsed_s=60.0)
    text = render(done=0, running=[job], queued=2, finished=[], concurrency=1)
    expected = 300.0 * (1 + POST_TRAIN_SHARE)  # 2 s/step x 150 steps, then the stages after training
    job_eta = expected - 60.0
    total = job_eta + 2 * expected
    mm = lambda s: f"{int(round(s)) // 60}:{int(round(s)) % 60:02d}"  # noqa: E731
    assert text == f"run: 0/3 done, 1 running (base-s42 train 30/150 ETA {mm(job_eta)}), 2 queued; ETA {mm(total)}"


def test_render_after_jobs_finished_uses_their_mean_and_the_concurrency():
    jobs = [JobView(name="a", stage="evaluate", step=150, total_steps=150, elapsed_s=100.0),
            JobView(name="b", stage="train", step=10, total_steps=150, elapsed_s=20.0)]
    text = render(done=2, running=jobs, queued=4, finished=[200.0, 400.0], concurrency=2)
    # per job 300 s: a has 200 left, b 280; 4 queued x 300; over 2 slots
    assert text == ("run: 2/8 done, 2 running (a evaluate ETA 3:20, b train 10/150 ETA 4:40), 4 queued; "
                    f"ETA {(200 + 280 + 1200) // 2 // 60}:{(200 + 280 + 1200) // 2 % 60:02d}")


def test_render_without_a_rate_gives_no_eta_and_names_at_most_three_jobs():
    jobs = [JobView(name=f"j{i}", stage=None, step=0, total_steps=150, elapsed_s=1.0) for i in range(5)]
    text = render(done=0, running=jobs, queued=0, finished=[], concurrency=5)
    assert text == "run: 0/5 done, 5 running (j0 starting, j1 starting, j2 starting, +2 more), 0 queued"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _status(run_dir, state, *, stage=None, started=None, updated=None):
    rd = RunDir(run_dir)
    rd.path.mkdir(parents=True, exist_ok=True)
    status = Status(state=state, stage=stage, started=started and started.isoformat())
    from exoformer.io import atomic_write_json

    atomic_write_json(rd.status_file, {**status.to_dict(), "updated": (updated or T0).isoformat()})
    return rd


def test_the_line_is_read_from_the_run_directories(tmp_path):
    a, b, c = tmp_path / "a" / "h", tmp_path / "b" / "h", tmp_path / "c" / "h"
    rd = _status(a, "RUNNING", stage="train", started=T0)
    rd.metrics_file.write_text(json.dumps({"kind": "train", "step": 50, "loss": 1.0}) + "\n")
    _status(b, "PENDING")
    now = T0 + dt.timedelta(seconds=100)
    progress = RunProgress([("a", a, 150), ("b", b, 150), ("c", c, 150)], concurrency=1, stream=_Terminal(),
                           clock=lambda: now.timestamp())
    line = progress.line()
    assert line.startswith("run: 0/3 done, 1 running (a train 50/150 ETA ") and ", 2 queued; ETA " in line
    _status(a, "SUCCEEDED", stage="analyse", started=T0, updated=T0 + dt.timedelta(seconds=300))
    assert progress.line().startswith("run: 1/3 done, 0 running, 2 queued")  # ended before the launcher saw it
    progress.job_done(a)
    assert progress.finished_s == [300.0]
    assert progress.line() == "run: 1/3 done, 0 running, 2 queued; ETA 10:00"
    for run in (b, c):
        _status(run, "FAILED", started=T0, updated=T0)
        progress.job_done(run)
    assert progress.line() == "run: 3/3 done, 0 running, 0 queued"  # nothing left: no ETA


def test_drawn_in_place_on_a_terminal_and_never_elsewhere(tmp_path, capsys):
    run = tmp_path / "a" / "h"
    _status(run, "PENDING")
    terminal = _Terminal()
    progress = RunProgress([("a", run, 10)], concurrency=1, stream=terminal)
    progress._draw()
    assert terminal.getvalue() == "\r\033[Krun: 0/1 done, 0 running, 1 queued"
    progress.say("a: SUCCEEDED")
    assert capsys.readouterr().out == "a: SUCCEEDED\n"
    assert terminal.getvalue().endswith("\r\033[K\r\033[Krun: 0/1 done, 0 running, 1 queued")
    progress.stop()
    assert terminal.getvalue().endswith("\r\033[K")
    log = io.StringIO()  # a log file or a pipe: nothing drawn, lines still printed
    quiet = RunProgress([("a", run, 10)], concurrency=1, stream=log).start()
    quiet._draw()
    quiet.say("a: SUCCEEDED")
    quiet.stop()
    assert log.getvalue() == "" and capsys.readouterr().out == "a: SUCCEEDED\n"


@pytest.mark.parametrize("backend,jobs", [("inline", 0), ("local", 3)])
def test_only_side_by_side_jobs_get_the_line(backend, jobs):
    from exoformer.runs.backends import make_backend

    made = make_backend(backend, profile_name=None, preset_profile="cpu", concurrency=3, timeout_min=5)
    assert made.parallel_jobs == jobs


def test_job_processes_start_with_the_libraries_own_progress_bar_switches_off(monkeypatch):
    """The environment local and Slurm jobs inherit turns off tqdm's bars (lm-eval's) and datasets' bars, as the
    pinned libraries read it at import; a value the user set is kept."""
    import subprocess
    import sys

    from exoformer.environ import QUIET_PROGRESS_ENV, quiet_progress_env

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setenv("HF_DATASETS_DISABLE_PROGRESS_BARS", "0")
    env = quiet_progress_env()
    assert env == {**QUIET_PROGRESS_ENV, "HF_DATASETS_DISABLE_PROGRESS_BARS": "0"}
    code = ("import sys; from tqdm import tqdm; list(tqdm(range(3), desc='bar')); "
            "import datasets.config as c; sys.stdout.write(str(c.HF_DATASETS_DISABLE_PROGRESS_BARS))")
    for quiet, expect_bar in ((QUIET_PROGRESS_ENV, False), ({"TQDM_DISABLE": "", "HF_DATASETS_DISABLE_PROGRESS_BARS":
                                                              "0"}, True)):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={"PATH": "", "HOME": "/nonexistent", **quiet})
        assert ("bar" in done.stderr) == expect_bar
        assert done.stdout == str(not expect_bar)
