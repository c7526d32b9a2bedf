"""Two-rank jobs on the Slurm test cluster (marked `slurm` by conftest): a smoke spec as one job of 2 gloo tasks
(slurm/profiles/testcluster-2tasks.yaml) trains to the losses and weights of the 1-task job; rank 0 failing
before training stops both tasks within seconds with its error; a rank count that does not divide the batch
is refused before anything is submitted.

Tolerance of the loss match: rel 1e-6 (abs 1e-7) on losses and weights. The two runs compute the same step
with the same micro-batch shape (1 rank: 2 micro-batches of 2 sequences, each loss halved before backward,
gradients summed; 2 ranks: 1 micro-batch each, gloo sums the 2 gradients and DDP halves the sum), so they can
differ only in the order of fp32 additions, ~1e-7 relative per add (more ranks, or gloo reducing in another
order). For 2 ranks even that vanishes: halving is exact in binary floating point and a sum of two terms does
not depend on their order, and the runs measured identical to the last bit (0.0 relative difference).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from test_backend_slurm import cli, specs_of, tiny

from exoformer.runs import locking, rundirs as runs
from exoformer.runs.backends import Item, SlurmBackend
from exoformer.registry.profiles import load_profile
from exoformer.rundir import RunDir
from exoformer.train.checkpoint import latest_checkpoint, load_checkpoint

TWO_TASKS = ["--backend", "slurm", "--profile", "testcluster-2tasks"]
ONE_TASK = ["--backend", "slurm", "--profile", "testcluster"]
# 4 sequences of 256 per step: 1 rank x 2 micro-batches of 2, or 2 ranks x 1 micro-batch of 2
BATCH = ["--set", "train.batch_tokens=1024", "--set", "eval.limit=1"]


def train_losses(run_dir: Path) -> list[float]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [line["loss"] for line in lines if line["kind"] == "train"]


def test_two_task_job_matches_the_one_task_job(slurm_cluster, tmp_path):
    args = [*tiny(steps=3), *BATCH]
    (spec,) = specs_of("base-s42", args)
    dirs = {}
    for name, placement in (("one", ONE_TASK), ("two", TWO_TASKS)):
        done = cli("run", "base-s42", *args, *placement, "--wait", runs_dir=tmp_path / name)
        assert done.returncode == 0, done.stdout + done.stderr
        dirs[name] = runs.run_dir_for(spec, tmp_path / name)
        status = runs.read_status(dirs[name])
        assert status.state == runs.SUCCEEDED, status
        assert slurm_cluster.wait_final(status.job_id).state == "COMPLETED"
    job_id = runs.read_status(dirs["two"]).job_id
    script = (tmp_path / "two" / ".jobs" / job_id / f"{job_id}_submission.sh").read_text()
    assert "#SBATCH --ntasks-per-node=2" in script.splitlines(), script
    log = "\n".join(p.read_text() for p in (dirs["two"] / "logs").glob("attempt-*.log"))
    assert "2 rank(s) on cpu" in log and "1 micro-batch(es) of 2x256 per rank" in log, log
    one_log = "\n".join(p.read_text() for p in (dirs["one"] / "logs").glob("attempt-*.log"))
    assert "1 rank(s) on cpu" in one_log and "2 micro-batch(es) of 2x256 per rank" in one_log, one_log

    one, two = train_losses(dirs["one"]), train_losses(dirs["two"])
    assert len(one) == len(two) == 3
    worst = max(abs(a - b) / abs(a) for a, b in zip(one, two))
    print(f"1-task losses {one}; 2-task losses {two}; worst relative difference {worst:.2e}")
    assert two == pytest.approx(one, rel=1e-6, abs=1e-7)
    a = load_checkpoint(latest_checkpoint(dirs["one"] / "checkpoints"))
    b = load_checkpoint(latest_checkpoint(dirs["two"] / "checkpoints"))
    assert a["step"] == b["step"] == 3 and (a["world_size"], b["world_size"]) == (1, 2)
    for name, tensor in a["model"].items():
        torch.testing.assert_close(b["model"][name], tensor, rtol=1e-6, atol=1e-7, msg=name)


def test_rank_zero_failing_before_training_stops_both_tasks_with_its_error(slurm_cluster, tmp_path):
    """Rank 0 finds the run's job lock taken (held here): it raises before any process group exists, where
    rank 1 would otherwise wait for its rendezvous for the distributed timeout (30 minutes)."""
    (spec,) = specs_of("base-s42", tiny(steps=3))
    root = tmp_path / "runs"
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, root))
    item = Item(spec=spec, run_dir=run_dir, claim=locking.new_claim(spec_hash=spec.hash, name=spec.name,
                                                                     run_dir=run_dir, backend="slurm"))
    with RunDir(run_dir).job_lock():
        SlurmBackend(load_profile("testcluster-2tasks")).launch([item], root)
        job_id = item.claim.job_id
        slurm_cluster.wait_running(job_id, timeout=120)
        started = time.monotonic()
        record = slurm_cluster.wait_final(job_id, timeout=180)
        took = time.monotonic() - started
    assert record.state == "FAILED", record
    print(f"2-task job ended {took:.1f} s after it started running")
    logs = {task: (root / ".jobs" / job_id / f"{job_id}_{task}_log.err").read_text() for task in (0, 1)}
    assert "another job is working on this run directory" in logs[0], logs[0]
    assert "PeerFailed: stopping rank 1 because rank 0 failed: UserError: " in logs[1], logs[1]
    assert "another job is working on this run directory" in logs[1].split("PeerFailed:")[-1], logs[1]


def test_ranks_that_do_not_divide_the_batch_are_refused_before_submission(slurm_cluster, tmp_path):
    root = tmp_path / "runs"
    before = slurm_cluster.run("squeue", "-h", "-o", "%i").split()
    done = cli("run", "base-s42", *tiny(), *TWO_TASKS, runs_dir=root)  # 512 tokens = 2 x 256: 1 sequence a rank
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert "train.batch_tokens" in done.stderr and "256 x 2 x 2 = 1024" in done.stderr, done.stderr
    assert "tasks_per_node 2" in done.stderr and "--set train.micro_batch_seqs=1" in done.stderr, done.stderr
    assert not root.exists()
    assert slurm_cluster.run("squeue", "-h", "-o", "%i").split() == before
