"""`status`: reconciling STATUS with the scheduler (fake squeue/sacct answers), rows, table and --json."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from exoformer.cli import main
from exoformer.harness import locking, runs, status
from exoformer.harness.registry import Registry


@pytest.fixture(scope="module")
def spec():
    return Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=5"])


@pytest.fixture()
def run_dir(tmp_path, spec):
    return runs.prepare(spec, runs.run_dir_for(spec, tmp_path))


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


class FakeSlurm(status.SlurmView):
    def __init__(self, queue, final=None):
        super().__init__()
        self._queue, self._final = queue, final

    def queue(self):
        return self._queue

    def final_state(self, job_id):
        return self._final


def claim_for(spec, run_dir, backend="inline", pid=None, job_id=None):
    claim = locking.new_claim(spec_hash=spec.hash, name=spec.name, run_dir=run_dir, backend=backend)
    claim.launcher_pid = pid or claim.launcher_pid
    claim.job_id = job_id
    return claim


def test_dead_inline_launcher_becomes_failed(spec, run_dir):
    runs.write_status(run_dir, runs.Status(state=runs.RUNNING, stage="train", backend="inline"))
    got = status.reconcile(run_dir, claim_for(spec, run_dir, pid=dead_pid()), FakeSlurm({}))
    assert got.state == runs.FAILED and got.reason.startswith("dead: launcher process")
    assert "(during train)" in got.reason
    assert runs.read_status(run_dir).state == runs.FAILED  # written to disk


def test_live_launcher_keeps_running(spec, run_dir):
    runs.write_status(run_dir, runs.Status(state=runs.RUNNING, backend="inline"))
    assert status.reconcile(run_dir, claim_for(spec, run_dir), FakeSlurm({})).state == runs.RUNNING


def test_slurm_states(spec, run_dir):
    claim = claim_for(spec, run_dir, backend="slurm", job_id="7_1")
    runs.write_status(run_dir, runs.Status(state=runs.PENDING, backend="slurm"))
    assert status.reconcile(run_dir, claim, FakeSlurm({"7_1": "PENDING"})).state == runs.PENDING
    assert status.reconcile(run_dir, claim, FakeSlurm(None)).state == runs.PENDING  # no Slurm here: unknown
    got = status.reconcile(run_dir, claim, FakeSlurm({"7_0": "RUNNING"}, final="CANCELLED by 0 (exit 0:15)"))
    assert got.state == runs.FAILED and "slurm job 7_1" in got.reason and "CANCELLED" in got.reason


def test_finished_runs_are_left_alone(spec, run_dir):
    runs.write_status(run_dir, runs.Status(state=runs.SUCCEEDED))
    assert status.reconcile(run_dir, claim_for(spec, run_dir, pid=dead_pid()), FakeSlurm({})).state == "SUCCEEDED"


def test_job_pid_without_manifest(spec, run_dir):
    runs.write_status(run_dir, runs.Status(state=runs.RUNNING, host=status.socket.gethostname(), pid=dead_pid()))
    assert status.reconcile(run_dir, None, FakeSlurm({})).state == runs.FAILED


def test_rows_table_and_json(tmp_path, spec, run_dir, capsys):
    runs.write_status(run_dir, runs.Status(state=runs.FAILED, reason="train: ValueError: boom", log="/x/tb.txt",
                                           job_id="42", started=runs.now()))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 3, "loss": 2.5}) + "\n")
    rows = status.collect([(run_dir, None, None)], {run_dir: tmp_path})
    assert rows[0]["step"] == 3 and rows[0]["total_steps"] == 5 and rows[0]["loss"] == 2.5
    text = status.format_table(rows)
    assert "3/5" in text and "ValueError: boom | /x/tb.txt" in text and "total: 1 failed" in text
    assert main(["status", "--json", "--runs-dir", str(tmp_path)]) == 1  # a failed run: exit 1
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert (row["spec"], row["hash"], row["state"], row["job_id"]) == ("base-s42", spec.hash12, "FAILED", "42")
    assert main(["status", "base-s42", "--preset", "smoke", "--set", "train.steps=5", "--runs-dir",
                 str(tmp_path)]) == 1
    assert "base-s42" in capsys.readouterr().out
