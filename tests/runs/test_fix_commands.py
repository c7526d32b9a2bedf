"""Every fix text on these fault paths is a command that does what it says: each test runs the suggested command
and checks the outcome (a disk-full run resumes; a killed job resumes; a missing evaluation file is rebuilt in
the run's own directory, under its own preset and overrides)."""

from __future__ import annotations

import errno
import json
import shlex
import subprocess
import sys

import pytest

from exoformer.cli import main
from exoformer.runs import locking, pipeline, rundirs as runs, status
from exoformer.runs.backends import LocalBackend
from exoformer.registry.registry import Registry
from exoformer.rundir import RunDir

ARGS = ["base-s42", "--preset", "smoke", "--set", "train.steps=2", "--set", "train.warmup_steps=1"]


@pytest.fixture()
def spec():
    return Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=2", "train.warmup_steps=1"])


def _fake_train(ctx):
    import torch

    from exoformer.train.checkpoint import save_checkpoint

    save_checkpoint(RunDir(ctx.run_dir).checkpoints, 2, {"w": torch.zeros(2)}, keep=2)
    return {"step": 2}


def _fake_validate(ctx):
    rd = RunDir(ctx.run_dir)
    rd.eval_dir.mkdir(parents=True, exist_ok=True)
    rd.validation.write_text(json.dumps({"rows": [{"task": "validation", "metric": "ppl", "value": 9.0}]}))
    return {}


def _fake_evaluate(ctx):
    rd = RunDir(ctx.run_dir)
    rd.write_rows(rd.eval_rows, [{"task": "smoke_piqa", "metric": m, "value": 0.5, "stderr": 0.1, "n": 4}
                                 for m in ("acc", "acc_norm")])
    return {}


@pytest.fixture()
def fake_stages(monkeypatch):
    monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, "train", _fake_train)
    monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, "validate", _fake_validate)
    monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, "evaluate", _fake_evaluate)
    monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, "analyse", lambda ctx: {})
    monkeypatch.setattr(pipeline, "_final_checkpoint_problem", lambda rd, spec: None)


def _run(capsys, monkeypatch, argv):
    monkeypatch.setattr(sys, "argv", ["reproduce.py", *argv])  # what provenance records as the command
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_disk_full_is_interrupted_and_the_same_command_resumes(tmp_path, capsys, monkeypatch, spec, fake_stages):
    import exoformer.train.checkpoint as checkpoint

    real_save, calls = checkpoint.torch.save, []

    def full_disk(obj, f, *a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    argv = ["run", *ARGS, "--runs-dir", str(tmp_path), "--backend", "inline"]
    code, out, _ = _run(capsys, monkeypatch, argv)
    got = runs.read_status(runs.run_dir_for(spec, tmp_path))
    assert code == 1 and got.state == runs.INTERRUPTED, (out, got)
    assert "No space left on device" in got.reason and "run the same command again to resume" in got.reason
    assert not list(RunDir(runs.run_dir_for(spec, tmp_path)).checkpoints.glob(".*.tmp"))
    code, out, _ = _run(capsys, monkeypatch, argv)  # what the fix says
    assert code == 0 and f"{spec.hash12}  resume" in out, out
    assert runs.read_status(runs.run_dir_for(spec, tmp_path)).state == runs.SUCCEEDED


def test_a_killed_job_resumes_on_the_same_command(tmp_path, capsys, monkeypatch, spec, fake_stages):
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    rd = RunDir(run_dir)
    (rd.checkpoints / "step_00000001.pt").write_bytes(b"x")
    rd.write_status(runs.Status(state=runs.RUNNING, stage="train", backend="local", job_id="1", pid=1,
                                host=status.socket.gethostname()))
    code, out, _ = _run(capsys, monkeypatch, ["status", "--runs-dir", str(tmp_path)])
    reason = runs.read_status(run_dir).reason
    assert runs.read_status(run_dir).state == runs.INTERRUPTED and reason.endswith(status.RESUME_FIX), out
    code, out, _ = _run(capsys, monkeypatch, ["run", *ARGS, "--runs-dir", str(tmp_path), "--backend", "inline"])
    assert code == 0 and f"{spec.hash12}  resume" in out and runs.read_status(run_dir).state == runs.SUCCEEDED


def test_a_missing_eval_file_names_a_command_that_rebuilds_it(tmp_path, capsys, monkeypatch, spec, fake_stages):
    code, out, _ = _run(capsys, monkeypatch, ["run", *ARGS, "--runs-dir", str(tmp_path), "--backend", "inline"])
    rd = RunDir(runs.run_dir_for(spec, tmp_path))
    assert code == 0 and rd.eval_rows.is_file(), out
    rd.eval_rows.unlink()
    table = ["table", "table1", "--preset", "smoke", "--set", "train.steps=2", "--set", "train.warmup_steps=1",
             "--runs-dir", str(tmp_path)]
    code, _, err = _run(capsys, monkeypatch, table)
    assert code == 2 and "re-run it: reproduce.py run base-s42" in err, err
    fix = err.split("re-run it: ", 1)[1].rsplit(")", 1)[0]
    argv = shlex.split(fix)
    assert argv[0] == "reproduce.py"
    code, out, _ = _run(capsys, monkeypatch, argv[1:])
    assert code == 0, out
    assert rd.eval_rows.is_file()  # rebuilt in the run's own directory (same preset, same overrides)
    code, _, err = _run(capsys, monkeypatch, table)
    assert code == 0, err


def test_a_local_time_out_reads_timed_out(tmp_path, spec):
    """The local executor's own words in the job log decide: "timed out", not "died without a result"."""
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    (RunDir(run_dir).logs / "attempt-001.log").write_text("started\n")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folder = tmp_path / ".jobs" / str(dead.pid)
    folder.mkdir(parents=True)
    (folder / f"{dead.pid}_0_log.err").write_text(
        "submitit WARNING (2026-01-01) - Caught signal SIGUSR2 on vm: this job is timed-out.\n"
        "submitit INFO - Job not requeued because: timed-out too many times.\n")
    claim = locking.new_claim(spec_hash=spec.hash, name=spec.name, run_dir=run_dir, backend="local")
    claim.job_id, claim.folder = str(dead.pid), str(folder)
    runs.write_status(run_dir, runs.Status(state=runs.PENDING, backend="local", job_id=str(dead.pid),
                                           reason="stopped by a signal in train at step 3; requeued"))
    got = status.reconcile(run_dir, claim, status.SlurmView())
    assert got.state == runs.INTERRUPTED and got.reason.startswith("timed out"), got.reason
    assert LocalBackend.liveness(claim, got, status.SlurmView()).timed_out
