"""The whole run's progress line: counts, each running job's stage, step and ETA, and the total ETA, read from the
run directories; drawn in place only on a terminal. Before a job's rate is measured its ETA comes from `plan`'s cost
model, and its own rate takes over once steady; jobs submitted but not yet training read "starting"; a run that
ended INTERRUPTED (Ctrl-C) is never counted as done. Synthetic STATUS, metrics.jsonl and manifest files, a fake
clock: no training."""

from __future__ import annotations

import datetime as dt
import io
import json
from types import SimpleNamespace

import pytest

from exoformer.budget.cost import Cost
from exoformer.io import atomic_write_json
from exoformer.rundir import RunDir, Status
from exoformer.runs import locking
from exoformer.runs.progress_line import (POST_TRAIN_SHARE, RATE_MIN_STEPS, JobView, RunProgress, planned_seconds,
                                          render)
from exoformer.train.progress import duration

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
STEPS = 120


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


def _step(rd, step):
    with rd.metrics_file.open("a") as f:
        f.write(json.dumps({"kind": "train", "step": step, "loss": 1.0}) + "\n")


def _planned(run_dir, cpu_minutes):
    return SimpleNamespace(run_dir=run_dir, cost=Cost(flops=1.0, gpu_hours=None, cpu_minutes=cpu_minutes))


def _submitted(root, *run_dirs):
    """The manifest as the launcher leaves it once the local backend has submitted these runs' jobs."""
    claims = {}
    for i, run_dir in enumerate(run_dirs):
        claim = locking.new_claim(spec_hash=f"h{i}", name=run_dir.parent.name, run_dir=run_dir, backend="local")
        claim.job_id = str(1000 + i)
        claims[claim.hash] = claim
    locking.write_manifest(root, claims)


def test_before_its_rate_is_steady_a_jobs_eta_is_the_planned_cost_then_its_own_rate(tmp_path):
    """A slow start (60 s of imports and setup, a slow first step) no longer inflates the first ETA: the cost
    model's 10 minutes minus the time elapsed, until the job's own steps agree on a rate; then the steps left at
    that rate plus the stages after training."""
    run = tmp_path / "base-s42" / "h"
    clock = {"now": T0.timestamp()}
    progress = RunProgress([("base-s42", run, STEPS)], concurrency=1, stream=_Terminal(),
                           clock=lambda: clock["now"], plan=[_planned(run, 10.0)])
    rd = _status(run, "RUNNING", stage="train", started=T0)
    etas = {}
    for step in range(1, 41):
        _step(rd, step)
        clock["now"] = T0.timestamp() + 60 + 2.0 * step  # 60 s before the first step, then 2 s a step
        line = progress.line()
        etas[step] = line.split(" ETA ")[1].split(")")[0]
    # the old extrapolation at step 1: 62 s per step x 120 steps x 1.35 = 2:47:24; now the plan's 600 s - 62 s
    assert etas[1] == duration(600 - 62)
    assert etas[RATE_MIN_STEPS] == duration(600 - (60 + 2 * RATE_MIN_STEPS))  # not steady before RATE_MIN_STEPS steps
    steady = (STEPS - 40) * 2.0 + POST_TRAIN_SHARE * STEPS * 2.0
    assert etas[40] == duration(steady)
    assert line == f"run: 0/1 done, 1 running (base-s42 train 40/{STEPS} ETA {duration(steady)}), 0 queued; " \
                   f"ETA {duration(steady)}"


def test_slow_first_steps_leave_the_rate_and_the_stages_after_training_follow_it(tmp_path):
    """Ten slow steps (6 s: caches, allocations) then 2 s a step: by step 60 the ETA is the steps left at 2 s;
    past training, POST_TRAIN_SHARE of the training time from when training ended."""
    run = tmp_path / "a" / "h"
    clock = {"now": T0.timestamp()}
    progress = RunProgress([("a", run, STEPS)], concurrency=1, stream=_Terminal(), clock=lambda: clock["now"],
                           plan=[_planned(run, 1.0)])
    rd = _status(run, "RUNNING", stage="train", started=T0)
    t = 30.0
    for step in range(1, STEPS + 1):
        _step(rd, step)
        t += 6.0 if step <= 10 else 2.0
        clock["now"] = T0.timestamp() + t
        line = progress.line()
        if step == 60:
            assert line.endswith(f"ETA {duration((STEPS - 60) * 2.0 + POST_TRAIN_SHARE * STEPS * 2.0)}")
    _status(run, "RUNNING", stage="validate", started=T0)
    assert progress.line().endswith(f"ETA {duration(POST_TRAIN_SHARE * STEPS * 2)}")  # training ends at this look
    _status(run, "RUNNING", stage="evaluate", started=T0)
    clock["now"] += 10
    assert progress.line() == (f"run: 0/1 done, 1 running (a evaluate ETA {duration(POST_TRAIN_SHARE * STEPS * 2 - 10)}"
                               f"), 0 queued; ETA {duration(POST_TRAIN_SHARE * STEPS * 2 - 10)}")


def test_a_rate_that_keeps_changing_is_not_steady(tmp_path):
    """Steps that slow down by more than the agreement between looks keep the planned ETA."""
    run = tmp_path / "a" / "h"
    clock = {"now": T0.timestamp()}
    progress = RunProgress([("a", run, STEPS)], concurrency=1, stream=_Terminal(), clock=lambda: clock["now"],
                           plan=[_planned(run, 400.0)])
    rd = _status(run, "RUNNING", stage="train", started=T0)
    t = 0.0
    for step in range(1, RATE_MIN_STEPS + 4):
        _step(rd, step)
        t += 2.0 ** step  # each step twice as long as the one before
        clock["now"] = T0.timestamp() + t
        line = progress.line()
    assert line.endswith(f"ETA {duration(400 * 60 - t)}")


def test_queued_jobs_are_priced_by_the_plan_until_one_succeeds(tmp_path):
    a, b, c = (tmp_path / n / "h" for n in "abc")
    progress = RunProgress([("a", a, STEPS), ("b", b, STEPS), ("c", c, STEPS)], concurrency=1, stream=_Terminal(),
                           clock=lambda: T0.timestamp() + 30, plan=[_planned(a, 2.0), _planned(b, 3.0),
                                                                   _planned(c, 5.0)])
    _status(a, "RUNNING", stage="validate", started=T0)
    assert progress.line() == f"run: 0/3 done, 1 running (a validate ETA 1:30), 2 queued; ETA {duration(90 + 480)}"


def test_the_plans_cost_model_prices_a_smoke_job_in_cpu_minutes(tmp_path):
    """RunProgress takes `plan`'s PlannedRun list as it is: the planned seconds are the CPU-minutes `plan` prints."""
    from exoformer.registry.registry import Registry
    from exoformer.runs.plan import plan

    planned = plan(Registry(), "base-s42", preset="smoke", runs_root=tmp_path)
    p = planned[0]
    assert p.cost.cpu_minutes and planned_seconds(p.cost) == p.cost.cpu_minutes * 60
    progress = RunProgress([(p.spec.name, p.run_dir, p.spec.train.steps)], concurrency=1, stream=_Terminal(),
                           plan=planned)
    assert progress.planned_s == {p.run_dir: p.cost.cpu_minutes * 60}
    assert planned_seconds(Cost(flops=1.0, gpu_hours=0.5, cpu_minutes=None)) == 1800.0
    assert planned_seconds(Cost(flops=1.0, gpu_hours=None, cpu_minutes=None)) is None


def test_jobs_submitted_but_not_training_yet_read_starting(tmp_path):
    """Between its submission and its first logged step (a process, torch's import, the data, the model) a job is
    "starting": the line no longer says "0 running, 3 queued" while three jobs start."""
    a, b, c, d = (tmp_path / n / "h" for n in "abcd")
    for run in (a, b, c, d):
        _status(run, "PENDING")
    _submitted(tmp_path, a, b, c)
    progress = RunProgress([(n, r, STEPS) for n, r in zip("abcd", (a, b, c, d))], concurrency=3,
                           stream=_Terminal(), clock=lambda: T0.timestamp() + 20,
                           plan=[_planned(r, 1.0) for r in (a, b, c, d)])
    assert progress.line() == "run: 0/4 done, 3 starting, 1 queued; ETA 1:20"  # (3 x 60 + 60) s / 3 slots
    _status(a, "RUNNING", started=T0)  # the job's process wrote STATUS: no stage yet
    rd = _status(b, "RUNNING", stage="train", started=T0)  # training set up, no step logged yet
    assert progress.line().startswith("run: 0/4 done, 3 starting, 1 queued; ETA ")
    _step(rd, 1)
    assert progress.line().startswith(f"run: 0/4 done, 2 starting, 1 running (b train 1/{STEPS} ETA 0:40), "
                                      "1 queued; ETA ")


def test_a_branch_waiting_in_its_parents_job_reads_queued_not_starting(tmp_path):
    """A decay branch's claim names its parent's job from the start, but the branch starts only when its parent
    ends (exoformer/runs/backends/local.py jobs_of): until then it is queued."""
    from exoformer.runs.backends.base import QUEUED_IN_JOB

    parent, branch = tmp_path / "p" / "h", tmp_path / "b" / "h"
    rd = _status(parent, "RUNNING", stage="train", started=T0)
    _step(rd, 1)
    _status(branch, "PENDING")
    RunDir(branch).update_status(reason=QUEUED_IN_JOB.format(parent="p"))
    _submitted(tmp_path, parent, branch)
    progress = RunProgress([("p", parent, STEPS), ("b", branch, STEPS)], concurrency=2, stream=_Terminal(),
                           clock=lambda: T0.timestamp() + 20)
    assert progress.line().startswith(f"run: 0/2 done, 1 running (p train 1/{STEPS}"), progress.line()
    assert progress.line().endswith("1 queued") or "1 queued;" in progress.line()


def test_render_counts_starting_jobs_apart_from_running_ones():
    starting = [JobView(name=n, stage=None, step=0, total_steps=STEPS, elapsed_s=0.0, planned_s=60.0) for n in "ab"]
    running = JobView(name="c", stage="evaluate", step=STEPS, total_steps=STEPS, elapsed_s=50.0, planned_s=60.0)
    assert render(done=0, running=[], starting=starting, queued=7, finished=[], concurrency=2,
                  queued_planned_s=420.0) == "run: 0/9 done, 2 starting, 7 queued; ETA 4:30"
    assert render(done=0, running=[running], starting=starting[:1], queued=0, finished=[], concurrency=2) == \
        "run: 0/2 done, 1 starting, 1 running (c evaluate ETA 0:10), 0 queued; ETA 0:35"


def test_a_run_interrupted_by_ctrl_c_is_not_counted_done(tmp_path):
    """Ctrl-C: the launcher marks the run INTERRUPTED, and the line drawn just before "interrupted" used to read
    "run: 1/1 done"."""
    run = tmp_path / "a" / "h"
    rd = _status(run, "RUNNING", stage="train", started=T0)
    _step(rd, 5)
    terminal = _Terminal()
    progress = RunProgress([("a", run, STEPS)], concurrency=1, stream=terminal, clock=lambda: T0.timestamp() + 10)
    _status(run, "INTERRUPTED", stage="train", started=T0, updated=T0 + dt.timedelta(seconds=10))
    assert progress.line() == "run: 0/1 done, 1 interrupted, 0 running, 0 queued"
    progress.job_done(run)  # the launcher saw its job end
    assert progress.line() == "run: 0/1 done, 1 interrupted, 0 running, 0 queued"
    assert progress.finished_s == [] and not progress.done
    progress._draw()
    assert "done" in terminal.getvalue() and "1/1 done" not in terminal.getvalue()


def test_only_a_run_that_succeeded_prices_the_jobs_left(tmp_path):
    """A run that FAILED at once is done, but its few seconds are not what a job takes."""
    a, b = tmp_path / "a" / "h", tmp_path / "b" / "h"
    progress = RunProgress([("a", a, STEPS), ("b", b, STEPS)], concurrency=1, stream=_Terminal(),
                           clock=lambda: T0.timestamp(), plan=[_planned(a, 1.0), _planned(b, 1.0)])
    _status(a, "FAILED", started=T0, updated=T0 + dt.timedelta(seconds=3))
    progress.job_done(a)
    assert progress.finished_s == []
    assert progress.line() == "run: 1/2 done, 0 running, 1 queued; ETA 1:00"
