"""A job of 2 nodes x 1 rank on the test cluster's two nodes (slurm/testcluster/start.sh: a second slurmd in
Slurm's multiple-slurmd mode; profile testcluster-2nodes), requeued mid-training with `scontrol requeue` (what a
preemption or an operator does): every rank saves and exits before Slurm's SIGKILL (KillWait=5 s), the job comes
back through submitit, resumes, validates and evaluates, and its final state is bitwise equal to an uninterrupted
1-rank run (4 sequences a step: 1 rank x 2 micro-batches or 2 ranks x 1 are the same arithmetic,
tests/train/test_train_world_size_resume.py).

The rendezvous: the first node of the allocation is `exotest-n2` (Slurm sorts the node list), a name that does
not resolve, so the address must come from its NodeAddr, and the port from the job id; submitit's own
export (the first node's name) cannot start this job.
"""

from __future__ import annotations

import json
import time
from datetime import datetime

import torch
from same_state import assert_same_tensors
from test_backend_slurm import cli, specs_of, tiny, wait_ended

from exoformer.runs import rundirs as runs
from exoformer.train.checkpoint import latest_checkpoint, load_checkpoint
from exoformer.train.distributed import job_port
from exoformer.train.loop import train

TWO_NODES = ["--backend", "slurm", "--profile", "testcluster-2nodes"]
BATCH = ["--set", "train.batch_tokens=1024", "--set", "eval.limit=1"]  # 4 sequences of 256 a step
KILL_WAIT_S = 5  # slurm/testcluster/start.sh: SIGTERM -> SIGKILL


def submitit_time(line: str) -> datetime:
    """The timestamp of a submitit log line: `submitit INFO (2026-12-02 06:50:38,749) - ...`."""
    return datetime.strptime(line.split("(", 1)[1].split(")", 1)[0], "%Y-%m-%d %H:%M:%S,%f")


def test_two_node_job_requeued_mid_training_resumes_bitwise_through_submitit(slurm_cluster, tmp_path):
    partitions = slurm_cluster.run("sinfo", "-h", "-o", "%R").split()
    assert "twonode" in partitions, f"the test cluster has no second node (partitions {partitions}); restart it " \
                                    "with slurm/testcluster/start.sh"
    steps = 14
    args = [*tiny(steps=steps, checkpoint_every=4), *BATCH]
    (spec,) = specs_of("base-s42", args)
    root = tmp_path / "runs"
    run_dir = runs.run_dir_for(spec, root)
    done = cli("run", "base-s42", *args, *TWO_NODES, runs_dir=root)
    assert done.returncode == 0, done.stdout + done.stderr
    deadline = time.monotonic() + 240
    while not list((run_dir / "checkpoints").glob("*.sha256")):
        assert time.monotonic() < deadline, runs.read_status(run_dir)
        time.sleep(0.2)
    job_id = runs.read_status(run_dir).job_id
    requeued_at = datetime.now()
    slurm_cluster.run("scontrol", "requeue", job_id)

    rows = wait_ended("base-s42", args, root, timeout=400)
    assert rows[0]["state"] == "SUCCEEDED", rows
    for stage in ("train", "validate", "evaluate"):
        assert (run_dir / "stages" / f"{stage}.json").is_file(), stage
    logs = sorted((run_dir / "logs").glob("attempt-*.log"))
    assert len(logs) == 2, logs
    first, second = (p.read_text() for p in logs)
    assert "train: interrupted" in first and "2 rank(s) on cpu" in first, first
    stopped = json.loads(first.split("stopped at step ")[1].split(")")[0]) if "stopped at step" in first else None
    assert stopped is not None and 4 <= stopped < steps, first
    assert f"resuming at step {stopped}/{steps}: 2 rank(s)" in second, second

    folder = root / ".jobs" / job_id
    for rank, node in ((0, "exotest-n2"), (1, slurm_cluster.node)):
        out = (folder / f"{job_id}_{rank}_log.out").read_text()
        err = (folder / f"{job_id}_{rank}_log.err").read_text()
        rendezvous = [line for line in out.splitlines() if line.startswith("rendezvous ")]
        assert len(rendezvous) == 2, out  # one per attempt, the same both times
        assert set(rendezvous) == {f"rendezvous 127.0.0.1:{job_port(job_id)}: first node of exotest-n2,"
                                   f"{slurm_cluster.node}, job {job_id}; this is rank {rank} on node {node}"}, out
        ended = [submitit_time(line) for line in out.splitlines() if "Job completed successfully" in line]
        assert len(ended) == 2, out  # the interrupted attempt returned normally too, on every rank
        took = (ended[0] - requeued_at).total_seconds()
        print(f"rank {rank} on {node} exited {took:.2f} s after the requeue")
        assert took < KILL_WAIT_S, f"rank {rank} took {took:.1f} s to exit after the requeue"
        assert "Traceback" not in err and "triggered an exception" not in err, err

    reference = tmp_path / "reference"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the job's ranks (OMP_NUM_THREADS=1): more threads may sum in another order
    try:
        train(spec.model, spec.train, reference)
    finally:
        torch.set_num_threads(threads)
    ours = load_checkpoint(latest_checkpoint(run_dir / "checkpoints"))
    theirs = load_checkpoint(latest_checkpoint(reference / "checkpoints"))
    assert ours["step"] == theirs["step"] == steps and ours["world_size"] == 2
    for key in ("model", "muon", "adamw", "loader", "rng", "tokens", "final_train_loss"):
        assert_same_tensors(ours[key], theirs[key], key)


def test_profile_exports_its_collective_timeout_to_the_job(slurm_cluster, tmp_path):
    """The submission script sets EXOFORMER_DIST_TIMEOUT_S from the profile's slurm.dist_timeout_s."""
    from exoformer.registry.profiles import load_profile
    from exoformer.runs.backends.slurm import SlurmBackend

    (spec,) = specs_of("base-s42", tiny(steps=1))
    backend = SlurmBackend(load_profile("testcluster-2nodes", {"slurm.dist_timeout_s": 123}))
    script = backend._executor(tmp_path, spec, 1)._executor._make_submission_file_text("python -m x", "0")
    assert "export EXOFORMER_DIST_TIMEOUT_S=123" in script.splitlines(), script
    assert "#SBATCH --nodes=2" in script.splitlines() and "#SBATCH --partition=twonode" in script.splitlines()
