"""Resume on another world size: a checkpoint written by 2 gloo ranks resumes on 1 rank bitwise equal to an
uninterrupted 1-rank run (CPU, fp32). (The other direction, 1 -> 2, measured bitwise equal too; the Slurm test
tests/slurm/test_two_nodes.py compares a 2-rank run with 1 rank end to end.)

Why bitwise and not approximately: the global order of training sequences depends only on the seed
(exoformer/data/loader.py), and with 4 sequences a step and micro-batches of 2 the two layouts compute the same
step: 1 rank sums two halved micro-batch gradients, 2 ranks each compute one and gloo sums the two after DDP
halves them; halving is exact in binary floating point and a sum of two terms does not depend on their order.
The resumed run must therefore pick up the same data position, optimiser state and RNG state whatever the
number of ranks that wrote the checkpoint.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_train_ddp import free_port
from same_state import assert_same_tensors
from test_train_resume import RUNNER, train_lines
from train_tiny import tiny_model, tiny_train

from exoformer.train.checkpoint import checkpoint_name, latest_checkpoint, load_checkpoint
from exoformer.train.loop import train

OVERRIDES = ["keep_checkpoints=3", "checkpoint_every=5"]  # steps 5, 10, 12 stay on disk


def train_on_ranks(data: Path, out: Path, world: int) -> str:
    if world == 1:
        done = subprocess.run([sys.executable, str(RUNNER), str(data), str(out), "0", *OVERRIDES],
                              env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(RUNNER), str(data), str(out), "0", *OVERRIDES],
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * world, "\n".join(outputs)
    return outputs[0]


def cut_back_to(run: Path, step: int) -> None:
    """Leave the run as a job stopped right after saving `step`: the later checkpoints are gone."""
    for path in (run / "checkpoints").glob("step_*.pt*"):
        if not path.name.startswith(checkpoint_name(step)):
            path.unlink()
    assert load_checkpoint(latest_checkpoint(run / "checkpoints"))["step"] == step


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_resume_on_another_world_size_is_bitwise_equal_to_one_rank(tiny_data, tmp_path, first=2, then=1):
    reference = tmp_path / "reference"
    train(tiny_model(), tiny_train(tiny_data, keep_checkpoints=3, checkpoint_every=5), reference)

    run = tmp_path / "run"
    train_on_ranks(tiny_data, run, first)
    assert load_checkpoint(run / "checkpoints" / checkpoint_name(5))["world_size"] == first
    cut_back_to(run, 5)
    resumed = train_on_ranks(tiny_data, run, then)
    assert f"resuming at step 5/12: {then} rank(s)" in resumed, resumed
    assert f"written by {first} rank(s)" in resumed, resumed

    ours = load_checkpoint(latest_checkpoint(run / "checkpoints"))
    theirs = load_checkpoint(latest_checkpoint(reference / "checkpoints"))
    assert ours["step"] == theirs["step"] == 12 and ours["world_size"] == then
    for key in ("model", "muon", "adamw", "loader", "rng", "tokens", "final_train_loss"):
        assert_same_tensors(ours[key], theirs[key], f"{key} ({first} -> {then} ranks)")
    assert train_lines(run) == train_lines(reference)
