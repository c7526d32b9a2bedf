"""Checks that keep the ranks of one job together: each sees its GPU, all resume the same step, a plain srun
task is placed or refused, and a rank failing mid-step stops the others at once (2 gloo ranks on CPU)."""

import os
import time

import pytest
import torch
from ranks import RankError, run_ranks
from train_tiny import tiny_model, tiny_train

from exoformer.errors import UserError
from exoformer.model import ExoTransformer
from exoformer.train import distributed as dist_util
from exoformer.train.loop import train


def test_a_rank_given_a_gpu_it_cannot_see_fails_in_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with pytest.raises(UserError) as caught:
        dist_util.pick_device(None, dist_util.DistEnv(rank=1, world_size=2, local_rank=1))
    assert "rank 1 was given GPU(s) CUDA_VISIBLE_DEVICES=3 but torch sees none" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert dist_util.pick_device("cpu", dist_util.DistEnv()) == torch.device("cpu")  # on purpose: allowed
    for no_gpu in ("", "NoDevFiles"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", no_gpu)
        assert dist_util.pick_device(None, dist_util.DistEnv()) == torch.device("cpu")


def test_a_plain_srun_task_is_placed_from_slurm_variables_or_refused_in_one_line(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SUBMITIT_EXECUTOR"):
        monkeypatch.setenv(name, "")  # so that monkeypatch restores each (distributed_env sets RANK & co.)
        monkeypatch.delenv(name)
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    with pytest.raises(UserError) as caught:
        dist_util.distributed_env()
    assert "started by srun without submitit has no MASTER_ADDR/MASTER_PORT" in str(caught.value)
    assert "\n" not in str(caught.value)
    monkeypatch.setenv("MASTER_ADDR", "node1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert dist_util.distributed_env() == dist_util.DistEnv(rank=1, world_size=2, local_rank=1)
    assert os.environ["RANK"] == "1" and os.environ["WORLD_SIZE"] == "2"


def train_rank(rank: int, data, runs) -> str:
    recipe = tiny_train(data, steps=4, val_every=0, checkpoint_every=2, keep_checkpoints=3)
    return str(train(tiny_model(), recipe, runs[rank]).step)


def test_ranks_that_would_resume_different_steps_all_stop_with_one_line(tiny_data, tmp_path):
    recipe = tiny_train(tiny_data, steps=4, val_every=0, checkpoint_every=2, keep_checkpoints=3)
    behind, fresh = tmp_path / "behind", tmp_path / "fresh"
    train(tiny_model(), recipe, behind)
    for path in (behind / "checkpoints").glob("step_00000004.pt*"):
        path.unlink()  # this rank's directory resumes at step 2, the other's at step 0
    results = run_ranks(train_rank, 2, tiny_data, [fresh, behind], group=False)
    assert all(isinstance(r, RankError) and r.type == "UserError" for r in results), results
    for result in results:  # every rank says the same, naming its own checkpoint folder
        assert "ranks would resume from different checkpoints (rank 0 step 0, rank 1 step 2)" in result.message
        assert "\n" not in result.message
    assert not (fresh / "checkpoints").exists() or not list((fresh / "checkpoints").glob("*.pt"))


_forwards = 0


def model_failing_on_rank_1(config):
    model = ExoTransformer(config)

    def fail_at_the_third_forward(*_):
        global _forwards
        _forwards += 1
        if os.environ["RANK"] == "1" and _forwards == 3:
            raise RuntimeError("out of memory in the middle of a step")

    model.final_norm.register_forward_hook(fail_at_the_third_forward)
    return model


def train_failing_rank(rank: int, data, run) -> dict:
    started = time.monotonic()
    try:
        with dist_util.fail_together(dist_util.DistEnv(rank=rank, world_size=2)):
            train(tiny_model(), tiny_train(data, steps=6, val_every=0), run, build_model=model_failing_on_rank_1)
    except Exception as err:  # noqa: BLE001
        return {"error": f"{type(err).__name__}: {err}", "seconds": time.monotonic() - started}
    return {"error": None}


def test_a_rank_failing_mid_step_stops_the_other_at_once_with_its_message(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setenv(dist_util.TIMEOUT_ENV, "600")  # a hang would outlast the test's wait
    results = run_ranks(train_failing_rank, 2, tiny_data, tmp_path / "run", group=False, timeout_s=90)
    assert results[1]["error"] == "RuntimeError: out of memory in the middle of a step", results
    assert results[0]["error"].startswith("PeerFailed: stopping rank 0 because rank 1 failed: RuntimeError: out of "
                                          "memory in the middle of a step"), results
    assert results[0]["seconds"] < 60, results


