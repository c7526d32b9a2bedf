"""`plan` says what `run` does: for every STATUS x flag the action printed by plan is what run then does.

`run` goes through the inline backend with fake stages (no training), so "did it launch" is observable: a
launched run gets a new attempt log; a skipped one is untouched.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exoformer.cli import main
from exoformer.runs import locking, pipeline, rundirs as runs
from exoformer.registry.registry import Registry
from exoformer.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
TINY = ["--preset", "smoke", "--set", "train.steps=2"]
STATES = ["none", "PENDING", "RUNNING-live", "RUNNING-dead", "RUNNING-pid1", "RUNNING-pid1-no-manifest",
          "SUCCEEDED", "SUCCEEDED-incomplete", "FAILED",
          "INTERRUPTED", "malformed", "bare-word"]
FLAGS = [[], ["--force"], ["--retry-failed"]]


@pytest.fixture(scope="module")
def spec(smoke_spec):
    return smoke_spec


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _make(state: str, spec, root: Path) -> Path:
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, root))
    rd = RunDir(run_dir)
    claim = locking.new_claim(spec_hash=spec.hash, name=spec.name, run_dir=run_dir, backend="inline")
    if state == "none":
        (rd.checkpoints / "step_00000001.pt").write_bytes(b"x")
        return run_dir
    if state.startswith("RUNNING-pid1"):  # a live, unrelated process; nobody holds the job lock
        rd.write_status(runs.Status(state=runs.RUNNING, backend="local", job_id="1", pid=1,
                                    host=socket.gethostname()))
        if state == "RUNNING-pid1":
            claim.backend, claim.job_id = "local", "1"
            locking.update_claims(root, [claim])
        (rd.checkpoints / "step_00000001.pt").write_bytes(b"x")
        return run_dir
    if state in ("PENDING", "RUNNING-live", "RUNNING-dead"):
        rd.write_status(runs.Status(state=state.split("-")[0], backend="inline"))
        if state == "RUNNING-dead":
            claim.launcher_pid = _dead_pid()
        locking.update_claims(root, [claim])
    elif state.startswith("SUCCEEDED"):
        rd.write_status(runs.Status(state=runs.SUCCEEDED))
        stages = pipeline.STAGES if state == "SUCCEEDED" else pipeline.STAGES[:2]
        for stage in stages:
            rd.record_stage(stage, {})
    elif state in ("FAILED", "INTERRUPTED"):
        rd.write_status(runs.Status(state=state, reason="test"))
    elif state == "malformed":
        rd.status_file.write_bytes(os.urandom(64) + b"\xff")
    elif state == "bare-word":
        rd.status_file.write_text("SUCCEEDED\n")
    return run_dir


def _cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


@pytest.mark.parametrize("state", STATES)
def test_plan_action_is_what_run_does(tmp_path, capsys, spec, fake_stages, state):
    for flags in FLAGS:
        root = tmp_path / f"{state}{''.join(flags)}"
        run_dir = _make(state, spec, root)
        code, out = _cli(capsys, "plan", "base-s42", *TINY, "--runs-dir", str(root), "--json", *flags)
        assert code == 0
        planned = json.loads(out)["specs"][0]["action"]
        dry_code, dry = _cli(capsys, "run", "base-s42", *TINY, "--runs-dir", str(root), "--dry-run", "--json", *flags)
        assert json.loads(dry)["specs"][0]["action"] == planned
        logs_before = sorted(RunDir(run_dir).logs.glob("attempt-*.log"))
        _, ran = _cli(capsys, "run", "base-s42", *TINY, "--runs-dir", str(root), "--backend", "inline", *flags)
        new_dir = runs.run_dir_for(spec, root)
        logs_after = sorted(RunDir(new_dir).logs.glob("attempt-*.log"))
        launched = len(logs_after) != len(logs_before) or (planned == "rerun" and len(logs_after) == 1)
        assert launched == (planned in ("run", "resume", "rerun")), (state, flags, planned, ran)
        assert f"{spec.hash12}  {planned}" in ran, (state, flags, planned, ran)
        if planned == "skip" and state not in ("RUNNING-live", "PENDING"):
            assert not launched
        if state.startswith("RUNNING-pid1") or state == "RUNNING-dead":  # the job lock is free: not running
            assert planned == ("rerun" if flags == ["--force"] else "resume"), (state, flags, planned)


def test_deleted_status_never_gives_a_second_live_job(tmp_path, spec, fake_stages, capsys):
    """A job holds the run's lock; STATUS and the manifest deleted, a second run still skips it."""
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    code = ("import sys, time\nfrom exoformer.rundir import RunDir\n"
            "with RunDir(sys.argv[1]).job_lock():\n    print('held', flush=True); time.sleep(20)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(run_dir)], stdout=subprocess.PIPE, text=True,
                              cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "held"
        for name in ("STATUS", "manifest.json"):
            for path in (run_dir / name, tmp_path / name):
                path.unlink(missing_ok=True)
        code_, out = _cli(capsys, "run", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--backend", "inline")
        assert "skip: already queued or running" in out and code_ == 0
        assert not list(RunDir(run_dir).logs.glob("attempt-*.log"))
        # the job itself refuses a second job on the same directory, whatever the launcher thought
        with pytest.raises(Exception, match="another job is working on this run directory"):
            pipeline.run_pipeline(run_dir, spec, backend="inline")
        assert RunDir(run_dir).read_status() is None  # the refused job wrote nothing
    finally:
        holder.kill()
        holder.wait()


def test_a_foreign_manifest_survives(tmp_path, capsys):
    foreign = '{"owner": "someone else", "jobs": [1, 2, 3]}'
    (tmp_path / "manifest.json").write_text(foreign)
    code = main(["run", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--backend", "inline"])
    err = capsys.readouterr().err
    assert code == 2 and "not a manifest of this harness" in err and err.count("\n") == 1
    assert (tmp_path / "manifest.json").read_text() == foreign


def test_runs_root_is_never_taken_from_the_registry(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EXOFORMER_RUNS_DIR", str(tmp_path / "env"))
    assert runs.runs_root(None) == tmp_path / "env"
    assert runs.runs_root(str(tmp_path / "cli")) == tmp_path / "cli"
    assert main(["run", "base-s42", "--runs-dir", " "]) == 2
    assert "--runs-dir: the option is empty" in capsys.readouterr().err


@pytest.mark.slow
def test_ctrl_c_marks_interrupted_then_a_plain_run_resumes(tmp_path):
    """SIGINT to the launcher of a local job: one line, the job does not outlive it, INTERRUPTED, then resume."""
    env = {**os.environ, "EXOFORMER_RUNS_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    env.pop("SLURM_CONF", None)
    args = ["--preset", "smoke", "--set", "train.steps=400", "--set", "train.checkpoint_every=5"]
    cmd = [sys.executable, str(REPO / "reproduce.py"), "run", "base-s42", *args, "--backend", "local"]
    # A terminal's Ctrl-C: the launcher starts with SIGINT at its default even where the suite itself runs with it
    # ignored (a background job of a non-interactive shell), or Python would never raise KeyboardInterrupt in it.
    launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    spec = Registry().resolve("base-s42", preset="smoke", overrides=args[3::2])
    rd = RunDir(runs.run_dir_for(spec, tmp_path))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        status = rd.read_status()
        if status and status.state == runs.RUNNING and status.pid and rd.has_checkpoint():
            break
        time.sleep(0.5)
    else:
        launcher.kill()
        pytest.fail("the job never started training")
    job_pid = rd.read_status().pid
    launcher.send_signal(signal.SIGINT)
    out, err = launcher.communicate(timeout=60)
    assert launcher.returncode == 130, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in err and "Traceback" not in err
    time.sleep(1)
    assert not locking.pid_alive(job_pid), "the job outlived its launcher"
    assert rd.read_status().state == runs.INTERRUPTED
    plan = subprocess.run([sys.executable, str(REPO / "reproduce.py"), "plan", "base-s42", *args, "--json"],
                          capture_output=True, text=True, env=env, cwd=REPO)
    assert json.loads(plan.stdout)["specs"][0]["action"] == "resume"


def test_a_notebook_can_plan_then_launch(tmp_path, fake_stages):
    from exoformer.runs.backends import make_backend
    from exoformer.runs.launch import launch
    from exoformer.runs.plan import plan

    registry = Registry()
    planned = plan(registry, "base-s42", preset="smoke", overrides=["train.steps=2"], runs_root=tmp_path)
    assert [p.action for p in planned] == ["run"] and planned[0].cost.cpu_minutes is not None
    backend = make_backend("inline", profile_name=None, preset_profile=None, concurrency=None, timeout_min=None)
    final = launch(planned, backend, command=["notebook"])
    assert [p.action for p in final] == ["run"]
    assert RunDir(final[0].run_dir).read_status().state == runs.SUCCEEDED
    again = plan(registry, "base-s42", preset="smoke", overrides=["train.steps=2"], runs_root=tmp_path)
    assert [(p.action, p.reason) for p in again] == [("skip", "SUCCEEDED")]
