"""The health check at job start (exoformer/runs/health.py): the checkpoint-size estimate against a real
checkpoint, a disk without room for two checkpoints, a device that does not work, an all-reduce that a rank
never joins, the requeue of a job without its failing node (a stand-in scontrol records the commands), and the
pipeline job ending at once, in one line, before it writes anything."""

import os
import shutil
import stat
from collections import namedtuple
from pathlib import Path

import pytest
import torch.distributed as dist
from ranks import RankError, run_ranks
from train_tiny import tiny_model, tiny_train

from exoformer.registry.registry import Registry
from exoformer.runs import health, rundirs as runs
from exoformer.runs.pipeline import PipelineJob
from exoformer.train.checkpoint import latest_checkpoint
from exoformer.train.loop import train

Usage = namedtuple("Usage", "total used free")


def test_checkpoint_size_estimate_matches_a_real_checkpoint(tiny_data, tmp_path):
    train(tiny_model(), tiny_train(tiny_data, steps=1, val_every=0), tmp_path)
    real = latest_checkpoint(tmp_path / "checkpoints").stat().st_size
    estimate = health.checkpoint_bytes(tiny_model(), "fp32")
    assert real <= estimate <= 1.25 * real, (estimate, real)  # small models: pickling overhead weighs more


def test_a_disk_without_room_for_two_checkpoints_is_one_line(tmp_path, monkeypatch):
    need = 2 * health.checkpoint_bytes(tiny_model(), "fp32")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10 * need, 9 * need, need - 1))
    with pytest.raises(SystemExit) as stop:
        health.health_check_or_exit(tmp_path / "run", tiny_model(), "fp32", "cpu")
    line = str(stop.value.code)
    assert line.startswith("error: ") and "\n" not in line and "checkpoints need" in line and "fix:" in line, line
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10 * need, 9 * need, need))
    health.health_check_or_exit(tmp_path / "run", tiny_model(), "fp32", "cpu")


def test_a_device_that_does_not_work_is_the_nodes_fault():
    health.check_device("cpu")
    with pytest.raises(health.NodeUnhealthy, match="health check: device cuda:99 does not work"):
        health.check_device("cuda:99")


def _all_reduce(rank: int, join: bool) -> str:
    if rank == 1 and not join:
        import time

        time.sleep(6)  # never joins within rank 0's deadline
        return "idle"
    health.check_all_reduce("cpu", timeout_s=2.0)
    return "ok"


@pytest.mark.timeout(120)
def test_the_all_reduce_check_passes_with_every_rank_and_fails_fast_without_one():
    assert run_ranks(_all_reduce, 2, True) == ["ok", "ok"]
    rank0, rank1 = run_ranks(_all_reduce, 2, False)
    assert isinstance(rank0, RankError) and rank0.type == "LinkUnhealthy", rank0
    assert "the all-reduce across 2 ranks failed on rank 0" in rank0.message and rank1 == "idle"


def test_a_node_fault_under_slurm_requeues_the_job_without_that_node(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "scontrol"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-07")
    with pytest.raises(SystemExit) as stop:
        health.health_check_or_exit(tmp_path, tiny_model(), "fp32", "cuda:99")
    line = str(stop.value.code)
    assert line.startswith("error: node gpu-07, rank ") and line.endswith("requeued by Slurm without this node"), line
    assert calls.read_text().splitlines() == ["requeue 4242", "update JobId=4242 ExcNodeList=gpu-07"]
    calls.unlink()

    def broken_link(device, **_):
        raise health.LinkUnhealthy("health check: the all-reduce across 2 ranks failed on rank 0 (timeout)")

    monkeypatch.setattr(health, "check_all_reduce", broken_link)
    with pytest.raises(SystemExit) as stop:  # an all-reduce failure cannot say whose node is at fault
        health.health_check_or_exit(tmp_path, tiny_model(), "fp32", "cpu")
    assert str(stop.value.code).endswith("requeued by Slurm"), stop.value.code
    assert calls.read_text().splitlines() == ["requeue 4242"]


def test_the_pipeline_job_ends_at_once_writing_only_its_reason(tmp_path, monkeypatch):
    spec = Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=1"])
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    before = sorted(p.name for p in Path(run_dir).iterdir())
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(100, 100, 0))
    assert not dist.is_initialized()
    with pytest.raises(SystemExit) as stop:
        PipelineJob()(str(run_dir), spec, "local")
    assert "health check" in str(stop.value.code) and "0.00 GB free" in str(stop.value.code)
    assert sorted(p.name for p in Path(run_dir).iterdir()) == sorted([*before, "STATUS"])  # no log or checkpoint
    status = runs.read_status(run_dir)  # the reason reaches `run` and `status`, not only the job's log
    assert status.state == runs.FAILED and "health check" in status.reason and "0.00 GB free" in status.reason
