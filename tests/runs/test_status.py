"""`status`: reconciling STATUS with the scheduler (fake squeue/sacct answers), rows, table and --json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from exoformer.cli import main
from exoformer.runs import locking, rundirs as runs, status
from exoformer.runs.backends.slurm_query import QueuedJob
from exoformer.registry.registry import Registry

REPO = Path(__file__).resolve().parents[2]


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
    """A view whose squeue answer is `queue` (job id -> state; None: Slurm cannot be asked) and whose sacct
    answers `final` for every job."""

    def __init__(self, queue, final=None):
        super().__init__()
        self.fake_queue = None if queue is None else {j: QueuedJob(state=s) for j, s in queue.items()}
        self.fake_final = final

    def queue(self):
        return self.fake_queue

    def final_state(self, job_id):
        return self.fake_final


def claim_for(spec, run_dir, backend="inline", pid=None, job_id=None):
    claim = locking.new_claim(spec_hash=spec.hash, name=spec.name, run_dir=run_dir, backend=backend)
    claim.launcher_pid = pid or claim.launcher_pid
    claim.job_id = job_id
    return claim


def _hold_lock(run_dir):
    code = ("import sys, time\nfrom exoformer.rundir import RunDir\n"
            "with RunDir(sys.argv[1]).job_lock():\n    print('held', flush=True); time.sleep(30)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(run_dir)], stdout=subprocess.PIPE, text=True,
                              cwd=REPO)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_dead_job_is_interrupted_not_failed(spec, run_dir):
    runs.write_status(run_dir, runs.Status(state=runs.RUNNING, stage="train", backend="inline"))
    got = status.reconcile(run_dir, claim_for(spec, run_dir, pid=dead_pid()), FakeSlurm({}))
    assert got.state == runs.INTERRUPTED and got.reason.startswith("interrupted during train")
    assert got.reason.endswith(status.RESUME_FIX)
    assert runs.read_status(run_dir).state == runs.INTERRUPTED  # written to disk


def test_running_naming_a_live_unrelated_pid_with_the_lock_free_is_not_running(spec, run_dir):
    """pid 1 is alive (and after a reboot small PIDs are reused): only the job lock says a job runs."""
    runs.write_status(run_dir, runs.Status(state=runs.RUNNING, backend="local", host=status.socket.gethostname(),
                                           pid=1, job_id="1"))
    for claim in (None, claim_for(spec, run_dir, backend="local", job_id="1")):
        got = status.reconcile(run_dir, claim, FakeSlurm({}), write=False)
        assert got.state == runs.INTERRUPTED and "pid 1" in got.reason


def test_the_job_lock_keeps_a_run_running_whatever_status_names(spec, run_dir):
    runs.write_status(run_dir, runs.Status(state=runs.RUNNING, backend="inline", pid=dead_pid()))
    holder = _hold_lock(run_dir)
    try:
        assert status.reconcile(run_dir, None, FakeSlurm({})).state == runs.RUNNING
    finally:
        holder.kill()
        holder.wait()
    assert status.reconcile(run_dir, None, FakeSlurm({})).state == runs.INTERRUPTED


def test_a_queued_run_with_its_launcher_alive_stays_pending(spec, run_dir):
    runs.write_status(run_dir, runs.Status(state=runs.PENDING, backend="inline"))
    assert status.reconcile(run_dir, claim_for(spec, run_dir), FakeSlurm({})).state == runs.PENDING


def test_a_recycled_launcher_pid_is_not_the_launcher(spec, run_dir):
    runs.write_status(run_dir, runs.Status(state=runs.PENDING, backend="inline"))
    (run_dir / "logs" / "attempt-001.log").write_text("started\n")
    claim = claim_for(spec, run_dir)
    claim.launcher_identity = "another-boot:123"  # this PID, but not the process that launched
    assert status.reconcile(run_dir, claim, FakeSlurm({})).state == runs.INTERRUPTED


def test_a_queued_run_that_never_started_goes_back_to_unrun(spec, run_dir):
    runs.write_status(run_dir, runs.Status(state=runs.PENDING, backend="local", reason="queued by run"))
    assert status.reconcile(run_dir, claim_for(spec, run_dir, backend="local", pid=dead_pid()),
                            FakeSlurm({})) is None
    assert runs.read_status(run_dir) is None


def test_slurm_states(spec, run_dir):
    claim = claim_for(spec, run_dir, backend="slurm", job_id="7_1")
    (run_dir / "logs" / "attempt-001.log").write_text("started\n")
    runs.write_status(run_dir, runs.Status(state=runs.PENDING, backend="slurm"))
    assert status.reconcile(run_dir, claim, FakeSlurm({"7_1": "PENDING"})).state == runs.PENDING
    assert status.reconcile(run_dir, claim, FakeSlurm(None)).state == runs.PENDING  # no Slurm here: unknown
    got = status.reconcile(run_dir, claim, FakeSlurm({"7_0": "RUNNING"}, final="CANCELLED by 0 (exit 0:15)"),
                           write=False)
    assert got.state == runs.INTERRUPTED and "slurm job 7_1" in got.reason and "CANCELLED" in got.reason
    got = status.reconcile(run_dir, claim, FakeSlurm({}, final="TIMEOUT (exit 0:0)"))
    assert got.state == runs.INTERRUPTED and got.reason.startswith("timed out")


def test_finished_runs_are_left_alone(spec, run_dir):
    runs.write_status(run_dir, runs.Status(state=runs.SUCCEEDED))
    assert status.reconcile(run_dir, claim_for(spec, run_dir, pid=dead_pid()), FakeSlurm({})).state == "SUCCEEDED"


def test_job_pid_without_manifest(spec, run_dir):
    runs.write_status(run_dir, runs.Status(state=runs.RUNNING, host=status.socket.gethostname(), pid=dead_pid()))
    assert status.reconcile(run_dir, None, FakeSlurm({})).state == runs.INTERRUPTED


def test_rows_table_and_json(tmp_path, spec, run_dir, capsys):
    runs.write_status(run_dir, runs.Status(state=runs.FAILED, reason="train: ValueError: boom", log="/x/tb.txt",
                                           job_id="42", started=runs.now()))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 3, "loss": 2.5}) + "\n")
    rows = status.status_rows([(run_dir, None, None)], {run_dir: tmp_path})
    assert rows[0]["step"] == 3 and rows[0]["total_steps"] == 5 and rows[0]["loss"] == 2.5
    text = status.format_table(rows)
    assert "3/5" in text and "ValueError: boom | /x/tb.txt" in text and "total: 1 failed" in text
    assert main(["status", "--json", "--runs-dir", str(tmp_path)]) == 1  # a failed run: exit 1
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert (row["spec"], row["hash"], row["state"], row["job_id"]) == ("base-s42", spec.hash12, "FAILED", "42")
    assert main(["status", "base-s42", "--preset", "smoke", "--set", "train.steps=5", "--runs-dir",
                 str(tmp_path)]) == 1
    assert "base-s42" in capsys.readouterr().out


def test_a_job_on_another_host_is_judged_by_its_scheduler(spec, run_dir):
    """A flock taken on a compute node need not show on the login node: there the scheduler decides."""
    claim = claim_for(spec, run_dir, backend="slurm", job_id="9")
    runs.write_status(run_dir, runs.Status(state=runs.RUNNING, backend="slurm", job_id="9", host="node-17", pid=5))
    assert status.reconcile(run_dir, claim, FakeSlurm({"9": "RUNNING"}), write=False).state == runs.RUNNING
    assert status.reconcile(run_dir, claim, FakeSlurm(None), write=False).state == runs.RUNNING  # cannot tell
    got = status.reconcile(run_dir, claim, FakeSlurm({}, final="OUT_OF_MEMORY (exit 0:125)"), write=False)
    assert got.state == runs.INTERRUPTED and "OUT_OF_MEMORY" in got.reason, got.reason


def test_a_finished_run_is_read_afresh_when_the_index_has_not_seen_it_finish(tmp_path, spec, run_dir):
    from exoformer.runs.run_index import find_runs

    [before] = find_runs(tmp_path)  # not finished yet when the index read it
    assert before.state is None and before.steps == 5
    (run_dir / "eval" / "long.jsonl").write_text(json.dumps({"task": "piqa", "metric": "acc", "value": 7.5}) + "\n")
    finished = runs.write_status(run_dir, runs.Status(state=runs.SUCCEEDED))
    row = status.row_for(run_dir, finished, indexed=before)
    assert row["state"] == "DAMAGED" and "outside its range" in row["reason"] and row["total_steps"] == 5
    (run_dir / "identity.json").write_text("{not json")
    row = status.row_for(run_dir, finished)
    assert row["state"] == "DAMAGED" and "identity.json missing or unreadable" in row["reason"]
    assert row["total_steps"] is None and row["preset"] is None


def test_a_run_without_its_identity_file_reads_damaged_in_any_state(tmp_path, run_dir):
    (run_dir / "identity.json").unlink()  # not started yet: no STATUS either
    [row] = status.status_rows([(run_dir, None, None)], {run_dir: tmp_path})
    assert row["state"] == "DAMAGED" and row["preset"] is None
    assert row["reason"].startswith("identity.json missing or unreadable: no such file (fix: `reproduce.py run "
                                    "base-s42")
    assert "DAMAGED" in status.format_table([row]) and row["reason"] in status.format_table([row])


def test_a_link_job_that_handed_the_run_over_is_not_gone(tmp_path, spec, run_dir):
    """The manifest is read before Slurm is asked. A link job may submit the run's next array, record it and end
    in between: judged by the claim read first, its job looks gone. The run stays queued (was: STATUS deleted,
    and the next link found nothing to submit)."""
    runs.write_status(run_dir, runs.Status(state=runs.PENDING, backend="slurm"))
    judged = claim_for(spec, run_dir, backend="slurm", job_id="39")
    ended = FakeSlurm({"39": "COMPLETED"})
    now = claim_for(spec, run_dir, backend="slurm", job_id="44")
    locking.record_claims(tmp_path, locking.read_manifest(tmp_path), [now])
    assert status.reconcile(run_dir, judged, ended).state == runs.PENDING
    assert runs.read_status(run_dir).state == runs.PENDING
    locking.record_claims(tmp_path, locking.read_manifest(tmp_path), [judged])  # not handed over: gone
    assert status.reconcile(run_dir, judged, ended) is None and runs.read_status(run_dir) is None
