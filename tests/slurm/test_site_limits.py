"""A site's limits on the real test cluster (MaxArraySize=8; QOS `capped`: 6 queued jobs, 1 running per user; see
slurm/testcluster/README.md): plans larger than either go in as chained arrays and link jobs, every run once;
a launcher killed between arrays loses nothing; evaluation jobs run after their training jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from smoke_runs import tiny as smoke_tiny

from exoformer.runs import locking, rundirs as runs
from exoformer.registry.registry import Registry

REPO = Path(__file__).resolve().parents[2]
MANY = "[bgr]*"  # 15 specs, three seeds each: a first array of 5 and a link job, then arrays of 8 and 2 behind it


def tiny() -> list[str]:
    """The shared tiny recipe at two steps without analysis: 15 of these take minutes on two cores."""
    return smoke_tiny(2, 2, analysis=False)


def cli(*args: str, runs_dir: Path, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "EXOFORMER_RUNS_DIR": str(runs_dir), **(env or {})}
    return subprocess.run([sys.executable, str(REPO / "reproduce.py"), *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)


def specs_of(target: str, args: list[str]):
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set" and not args[i + 1].startswith("profile.")]
    reg = Registry()
    return [reg.resolve(n, preset="smoke", overrides=sets) for n in reg.select(target)]


def wait_all_ended(target: str, args: list[str], runs_dir: Path, timeout: float) -> tuple[list[dict], list[str]]:
    """Rows once every run ended, and the status tables seen on the way (for their pending reasons)."""
    deadline, tables = time.monotonic() + timeout, []
    while True:
        table = cli("status", target, *args, runs_dir=runs_dir, timeout=120).stdout
        tables.append(table)
        rows = [json.loads(line) for line in cli("status", target, *args, "--json", runs_dir=runs_dir,
                                                 timeout=120).stdout.splitlines()]
        if rows and all(r["state"] in ("SUCCEEDED", "FAILED", "INTERRUPTED") for r in rows):
            return rows, tables
        assert time.monotonic() < deadline, table
        time.sleep(3)


def accounting(slurm_cluster, job_ids: set[str], *, settle_s: float = 60) -> dict[str, dict[str, str]]:
    """sacct rows (JobID -> State, Start, End, JobName) of these jobs' arrays, once every one of `job_ids` has ended
    (or after `settle_s`). A run's STATUS says SUCCEEDED before its job's process exits, and the accounting follows
    the process, so a job can still read RUNNING for a moment."""
    arrays = ",".join(sorted({j.split("_")[0] for j in job_ids}))
    deadline = time.monotonic() + settle_s
    while True:
        out = slurm_cluster.run("sacct", "-X", "-n", "-P", "-j", arrays, "-o", "JobID,State,Start,End,JobName")
        rows = {}
        for line in out.splitlines():
            jid, state, start, end, name = line.split("|")
            rows[jid] = {"state": state, "start": start, "end": end, "name": name}
        ended = all(j in rows and rows[j]["state"] not in ("PENDING", "RUNNING", "COMPLETING") for j in job_ids)
        if ended or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


def _once_each(specs, root: Path, *, jobs_per_run: int = 1) -> list[Path]:
    """Every run SUCCEEDED, started exactly once by each of its jobs; their logs in order."""
    logs = []
    for spec in specs:
        run_dir = runs.run_dir_for(spec, root)
        assert runs.read_status(run_dir).state == runs.SUCCEEDED, spec.name
        attempts = sorted((run_dir / "logs").glob("attempt-*.log"))
        assert len(attempts) == jobs_per_run, (spec.name, attempts)
        logs.append(attempts)
    return logs


def test_many_runs_go_in_as_chained_arrays_within_the_array_and_queue_limits(slurm_cluster, tmp_path):
    args = tiny()
    specs = specs_of(MANY, args)
    assert len(specs) == 15
    done = cli("run", MANY, *args, "--backend", "slurm", "--profile", "testcluster-capped", runs_dir=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    print(done.stdout[:3000])
    lines = [line for line in done.stdout.splitlines() if line.startswith("slurm: ")]
    assert lines[0].startswith("slurm: array ") and ": 5 run(s)" in lines[0], lines  # 6 queued jobs: 5 + a link
    assert lines[-1].startswith("slurm: link job ") and "the other 10 run(s)" in lines[-1], lines
    rows, tables = wait_all_ended(MANY, args, tmp_path, timeout=1500)
    assert all(r["state"] == "SUCCEEDED" for r in rows), [r for r in rows if r["state"] != "SUCCEEDED"]
    _once_each(specs, tmp_path)
    waiting = [line for t in tables for line in t.splitlines() if "PENDING" in line]
    for reason in ("[Dependency]", "[QOSMaxJobsPerUserLimit]"):  # one line of each, for the log
        print(next((line for line in waiting if reason in line), f"no {reason} line"))
    assert any("waits for the jobs it follows [Dependency]" in line for line in waiting), waiting[:20]
    assert any("held by a limit of the QOS (running jobs) [QOSMaxJobsPerUserLimit]" in line for line in waiting)
    manifest = locking.read_manifest(tmp_path)
    ids = {manifest[s.hash].job_id for s in specs}
    rows = accounting(slurm_cluster, ids)
    sizes = {}
    for jid in ids:
        sizes[jid.split("_")[0]] = sizes.get(jid.split("_")[0], 0) + 1
    print("arrays and their sizes:", sorted(sizes.items()))
    assert all(size <= 8 for size in sizes.values()) and sum(sizes.values()) == 15
    assert all(int(jid.split("_")[1]) < 8 for jid in ids)  # index offsets, never an index past the limit
    links = [jid for jid, row in rows.items() if row["name"].startswith("exo-link-")]
    assert links == [] or all(rows[j]["state"] == "COMPLETED" for j in links)


def test_a_launcher_killed_between_arrays_loses_and_repeats_nothing(slurm_cluster, tmp_path):
    args = tiny()
    target = "[bg]*"  # 12 specs: arrays of 8 and 4
    specs = specs_of(target, args)
    assert len(specs) == 12
    shim = tmp_path / "bin"
    shim.mkdir()
    count = tmp_path / "sbatch-calls"
    real = subprocess.run(["bash", "-c", "command -v sbatch"], capture_output=True, text=True).stdout.strip()
    (shim / "sbatch").write_text(f"""#!/bin/bash
# The second sbatch of a launch kills the launcher first: a launcher killed between two arrays.
echo x >> {count}
if [ "$(wc -l < {count})" = 2 ]; then kill -9 $PPID; exit 1; fi
exec {real} "$@"
""")
    (shim / "sbatch").chmod(0o755)
    killed = cli("run", target, *args, "--backend", "slurm", "--profile", "testcluster", runs_dir=tmp_path,
                 env={"PATH": f"{shim}:{os.environ['PATH']}"})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    manifest = locking.read_manifest(tmp_path)
    submitted = [s for s in specs if manifest.get(s.hash) and manifest[s.hash].job_id]
    assert len(submitted) == 8  # the first array went in and was recorded
    again = cli("run", target, *args, "--backend", "slurm", "--profile", "testcluster", runs_dir=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("skip:") == 8 and "slurm: array " in again.stdout, again.stdout
    rows, _ = wait_all_ended(target, args, tmp_path, timeout=900)
    assert all(r["state"] == "SUCCEEDED" for r in rows), rows
    _once_each(specs, tmp_path)


def test_evaluation_jobs_run_after_their_training_jobs_on_their_own_resources(slurm_cluster, tmp_path):
    args = [*smoke_tiny(3, 2, analysis=False), "--set", "profile.slurm.eval_as_job=true",
            "--set", "profile.slurm.eval_gpus_per_node=0"]
    target = "base-s*"
    specs = specs_of(target, args)
    done = cli("run", target, *args, "--backend", "slurm", "--profile", "testcluster", runs_dir=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    print(done.stdout)
    rows, tables = wait_all_ended(target, args, tmp_path, timeout=900)
    assert all(r["state"] == "SUCCEEDED" for r in rows), rows
    logs = _once_each(specs, tmp_path, jobs_per_run=2)  # a training job, then an evaluation job
    manifest = locking.read_manifest(tmp_path)
    claims = [manifest[s.hash] for s in specs]
    sacct = accounting(slurm_cluster, {c.job_id for c in claims} | {c.eval_job_id for c in claims})
    for spec, claim, (train_log, eval_log) in zip(specs, claims, logs):
        train, evaluation = sacct[claim.job_id], sacct[claim.eval_job_id]
        print(spec.name, claim.job_id, train, claim.eval_job_id, evaluation)
        assert train["state"] == evaluation["state"] == "COMPLETED"
        assert datetime.fromisoformat(evaluation["start"]) >= datetime.fromisoformat(train["end"])
        assert evaluation["name"].startswith("exo-eval-")
        assert "training done; validate and the stages after it run in the evaluation job" in train_log.read_text()
        assert "train: already done" in eval_log.read_text() and "evaluate: done" in eval_log.read_text()
        assert (runs.run_dir_for(spec, tmp_path) / "stages" / "evaluate.json").is_file()
    assert any("+" in line for t in tables for line in t.splitlines() if "base-s" in line), tables[:2]
