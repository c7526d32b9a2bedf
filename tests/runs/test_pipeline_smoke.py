"""End to end on CPU through the real CLI: a smoke spec on the local backend (submitit LocalExecutor; base-s42 as
the session's main job ran it, tests/conftest.py smoke_main_job), the second call skipping it, `status`, the
concurrency guarantee and the SIGKILL crash -> --retry-failed resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from exoformer.runs import rundirs as runs
from exoformer.registry.registry import Registry
from smoke_runs import REPO, cli, cli_env, copy_root, run_dir_of, tiny


@pytest.mark.slow
def test_local_smoke_run_then_skip_then_status(smoke_main_job, tmp_path):
    # The session's main job ran base-s42 (tiny()) on the local backend; this root holds that run alone.
    args = tiny()
    root = copy_root(smoke_main_job, tmp_path / "runs", specs=("base-s42",))
    run_dir = run_dir_of("base-s42", args, root)
    status = runs.read_status(run_dir)
    assert status.state == runs.SUCCEEDED, status
    assert status.backend == "local" and status.job_id
    for name in ("spec.yaml", "provenance.json", "STATUS", "metrics.jsonl", "eval/validation.json",
                 "eval/results.json", "eval/long.jsonl", *(f"stages/{s}.json" for s in
                                                            ("train", "validate", "evaluate", "analyse"))):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "checkpoints").iterdir()) and list((run_dir / "analysis").iterdir())
    prov = json.loads((run_dir / "provenance.json").read_text())
    assert prov["job"]["data_checksums"] and prov["job"]["torch"]
    assert json.loads((run_dir / "stages" / "train.json").read_text())["result"]["step"] == 4
    [log] = (run_dir / "logs").glob("attempt-*.log")
    assert "evaluate: done" in log.read_text() and "it/s]" not in log.read_text()  # no lm-eval / datasets bars
    started = time.monotonic()
    second = cli("run", "base-s42", *args, "--backend", "local", runs_dir=root, check=True)
    assert time.monotonic() - started < 15
    assert "skip: SUCCEEDED" in second.stdout and "skipped 1" in second.stdout
    assert len(list((run_dir / "logs").glob("attempt-*.log"))) == 1
    shown = cli("status", "--json", runs_dir=root, check=True)
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [(r["spec"], r["state"], r["step"], r["total_steps"]) for r in rows] == [("base-s42", "SUCCEEDED", 4, 4)]


@pytest.mark.slow
def test_two_concurrent_runs_launch_each_spec_once(tmp_path):
    args = tiny(steps=2)
    env = cli_env(tmp_path)
    cmd = [sys.executable, str(REPO / "reproduce.py"), "run", "base-s[14]*", *args, "--backend", "inline"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)
             for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    names = Registry().select("base-s[14]*")
    assert len(names) == 2
    for name in names:
        run_dir = run_dir_of(name, args, tmp_path)
        assert runs.read_status(run_dir).state == runs.SUCCEEDED
        attempts = list((run_dir / "logs").glob("attempt-*.log"))
        assert len(attempts) == 1, (name, attempts, outs)
    launched = sum(len(re.findall(r"^\S+\s+[0-9a-f]{12}\s+run$", out, re.M)) for out in outs)  # plan lines
    assert launched == 2, outs  # each spec launched by exactly one of the two commands


@pytest.mark.slow
def test_sigkill_mid_training_is_interrupted_then_a_plain_run_resumes_from_checkpoint(tmp_path):
    args = tiny(steps=120, checkpoint_every=5)
    run_dir = run_dir_of("base-s42", args, tmp_path)
    env = cli_env(tmp_path)
    launcher = subprocess.Popen([sys.executable, str(REPO / "reproduce.py"), "run", "base-s42", *args, "--backend",
                                 "local"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                cwd=REPO)
    deadline = time.monotonic() + 300
    while True:  # wait for a complete checkpoint (its checksum side-car is written last) and the job's PID
        status = runs.read_status(run_dir)
        ckpts = sorted((run_dir / "checkpoints").glob("step_*.pt.sha256")) if run_dir.is_dir() else []
        if status and status.pid and status.stage == "train" and ckpts:
            break
        assert launcher.poll() is None and time.monotonic() < deadline, launcher.communicate()[0]
        time.sleep(0.2)
    killed_at = int(ckpts[-1].name.removeprefix("step_").split(".")[0])
    os.kill(status.pid, signal.SIGKILL)
    out = launcher.communicate(timeout=120)[0]
    assert launcher.returncode == 1, out
    shown = cli("status", "base-s42", *args, "--json", runs_dir=tmp_path)
    row = json.loads(shown.stdout.splitlines()[0])
    assert row["state"] == "INTERRUPTED" and row["reason"].startswith("interrupted during train"), row
    assert row["reason"].endswith("run the same command again to resume from the last checkpoint")
    assert shown.returncode == 0
    assert killed_at > 0
    cli("run", "base-s42", *args, "--backend", "local", runs_dir=tmp_path, check=True)  # what the reason says
    assert runs.read_status(run_dir).state == runs.SUCCEEDED
    second_log = sorted((run_dir / "logs").glob("attempt-002*.log"))[0].read_text()
    assert "resuming at step" in second_log, second_log[:2000]
    resumed_at = int(second_log.split("resuming at step ")[1].split("/")[0])
    assert resumed_at >= killed_at > 0
