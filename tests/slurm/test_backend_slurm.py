"""The slurm backend against the real single-node test cluster (slurm/testcluster; marked `slurm` by conftest):
a smoke spec through sbatch, a 4-spec array with parallelism 2 and one failing spec, scancel reported FAILED
within a minute, and (slow) a signalled job that checkpoints, requeues and finishes with its steps intact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from smoke_runs import tiny as smoke_tiny

from exoformer.runs import locking, rundirs as runs
from exoformer.registry.registry import Registry

REPO = Path(__file__).resolve().parents[2]
PROFILE = ["--backend", "slurm", "--profile", "testcluster"]


def tiny(steps: int = 3, checkpoint_every: int = 2) -> list[str]:
    """The shared tiny smoke recipe, without the analysis stage (a Slurm job's time goes to the stages tested)."""
    return smoke_tiny(steps, checkpoint_every, analysis=False)


def cli(*args: str, runs_dir: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "EXOFORMER_RUNS_DIR": str(runs_dir)}
    return subprocess.run([sys.executable, str(REPO / "reproduce.py"), *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)


def specs_of(target: str, args: list[str]):
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    reg = Registry()
    return [reg.resolve(n, preset="smoke", overrides=sets) for n in reg.select(target)]


def status_rows(target: str, args: list[str], runs_dir: Path) -> list[dict]:
    started = time.monotonic()
    done = cli("status", target, *args, "--json", runs_dir=runs_dir, timeout=60)
    assert time.monotonic() - started < 30, "status must never hang"
    return [json.loads(line) for line in done.stdout.splitlines()]


def wait_ended(target: str, args: list[str], runs_dir: Path, timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        rows = status_rows(target, args, runs_dir)
        if rows and all(r["state"] in ("SUCCEEDED", "FAILED") for r in rows):
            return rows
        assert time.monotonic() < deadline, rows
        time.sleep(2)


def test_smoke_spec_end_to_end_through_sbatch(slurm_cluster, tmp_path):
    args = tiny()
    done = cli("run", "base-s42", *args, *PROFILE, "--wait", runs_dir=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (spec,) = specs_of("base-s42", args)
    run_dir = runs.run_dir_for(spec, tmp_path)
    status = runs.read_status(run_dir)
    assert status.state == runs.SUCCEEDED and status.backend == "slurm"
    assert slurm_cluster.wait_final(status.job_id).state == "COMPLETED"
    assert (run_dir / "stages" / "evaluate.json").is_file() and (run_dir / "eval" / "long.jsonl").is_file()
    again = cli("run", "base-s42", *args, *PROFILE, runs_dir=tmp_path)
    assert again.returncode == 0 and "skip: SUCCEEDED" in again.stdout


def test_array_of_four_parallelism_two_with_one_failing_spec(slurm_cluster, tmp_path):
    target, args = "gated-[sr]*[1-4][37]", tiny()  # seeds 1337 and 2027 of gated and gated-resformer
    specs = specs_of(target, args)
    assert len(specs) == 4
    broken = specs[2]  # its metrics.jsonl is a directory: the train stage raises IsADirectoryError
    broken_dir = runs.prepare(broken, runs.run_dir_for(broken, tmp_path))
    (broken_dir / "metrics.jsonl").mkdir()
    started = time.monotonic()
    done = cli("run", target, *args, *PROFILE, runs_dir=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started < 60  # returns after submission
    manifest = locking.read_manifest(tmp_path)
    job_ids = sorted(manifest[s.hash].job_id for s in specs)
    array_id = job_ids[0].split("_")[0]
    assert job_ids == [f"{array_id}_{i}" for i in range(4)]
    script = (tmp_path / ".jobs" / array_id / f"{array_id}_submission.sh").read_text()
    assert "#SBATCH --array=0-3%2" in script and "#SBATCH --partition=debug" in script
    assert "export OMP_NUM_THREADS=1" in script
    # a second launch while they are queued or running launches nothing
    again = cli("run", target, *args, *PROFILE, runs_dir=tmp_path)
    assert again.returncode == 0 and again.stdout.count("skip:") == 4, again.stdout
    rows = {r["spec"]: r for r in wait_ended(target, args, tmp_path, timeout=600)}
    for spec in specs:
        row = rows[spec.name]
        if spec is broken:
            assert row["state"] == "FAILED" and "IsADirectoryError" in row["reason"], row
            assert "Traceback" in Path(row["log"]).read_text()
        else:
            assert row["state"] == "SUCCEEDED", row
    assert slurm_cluster.wait_final(manifest[broken.hash].job_id).state == "FAILED"


def test_scancel_is_reported_interrupted_within_a_minute_and_resumes(slurm_cluster, tmp_path):
    args = tiny(steps=100000, checkpoint_every=1000)
    (spec,) = specs_of("base-s42", args)
    run_dir = runs.run_dir_for(spec, tmp_path)
    done = cli("run", "base-s42", *args, *PROFILE, runs_dir=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    deadline = time.monotonic() + 300
    while not ((s := runs.read_status(run_dir)) and s.state == runs.RUNNING and s.stage == "train"):
        assert time.monotonic() < deadline, s
        time.sleep(0.5)
    slurm_cluster.run("scancel", s.job_id)
    cancelled = time.monotonic()
    while True:
        (row,) = status_rows("base-s42", args, tmp_path)
        if row["state"] == "INTERRUPTED":
            break
        assert time.monotonic() - cancelled < 60, row
        time.sleep(2)
    # a job killed from outside is not a failure of the job: a plain `run` resumes it (its reason says so)
    assert "run the same command again to resume" in row["reason"], row
    again = cli("run", "base-s42", *args, *PROFILE, "--dry-run", runs_dir=tmp_path)
    assert again.returncode == 0 and "resume" in again.stdout, again.stdout + again.stderr


@pytest.mark.slow
def test_signalled_job_checkpoints_requeues_and_finishes(slurm_cluster, tmp_path):
    steps = 150
    args = [*tiny(steps=steps, checkpoint_every=10), "--set", "profile.slurm.time_min=10"]
    (spec,) = specs_of("base-s42", args[:-2])
    run_dir = runs.run_dir_for(spec, tmp_path)
    done = cli("run", "base-s42", *args, *PROFILE, runs_dir=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    deadline = time.monotonic() + 300
    while not list((run_dir / "checkpoints").glob("*.sha256")):
        assert time.monotonic() < deadline
        time.sleep(0.5)
    job_id = runs.read_status(run_dir).job_id
    # what Slurm sends signal_delay_s before the time limit, or on preemption
    slurm_cluster.run("scancel", "--signal=USR2", job_id)
    rows = wait_ended("base-s42", args[:-2], tmp_path, timeout=600)
    assert rows[0]["state"] == "SUCCEEDED", rows
    assert json.loads((run_dir / "stages" / "train.json").read_text())["result"]["step"] == steps
    logs = sorted((run_dir / "logs").glob("attempt-*.log"))
    assert len(logs) >= 2, logs
    assert "interrupted" in logs[0].read_text() and "resuming at step" in logs[1].read_text()
    train_steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                   if '"train"' in line]
    assert train_steps[-1] == steps and max(train_steps) == steps


def test_gpu_profile_on_a_cluster_without_gpus_is_refused(slurm_cluster, tmp_path):
    root = tmp_path / "runs"
    done = cli("run", "base-s42", *tiny(), "--backend", "slurm", "--profile", "h100", runs_dir=root)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "has no GPUs" in done.stderr, done.stderr
    assert not root.exists()
