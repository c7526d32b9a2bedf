"""A multi-rank job: every stage gets the job's device; the ranks other than 0 follow rank 0's stages and join
the ones that split across ranks (train, validate, evaluate), 2 gloo ranks with fake stages."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "train"))

from ranks import run_ranks  # noqa: E402

from exoformer.runs import pipeline, rundirs as runs  # noqa: E402
from exoformer.registry.registry import Registry  # noqa: E402
from exoformer.rundir import RunDir  # noqa: E402


def recording_stage(name: str, calls: list):
    def stage(ctx) -> dict:
        world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        if name in pipeline.SHARDED_STAGES:  # both ranks must be in this stage together, or this waits
            together = torch.ones(1)
            torch.distributed.all_reduce(together)
            world = int(together.item())
        calls.append((name, ctx.device, world))
        return {"value": name}

    return stage


def job_rank(rank: int, run_dir: str, spec) -> list:
    from exoformer.train import distributed as dist_util

    calls: list = []
    for name in pipeline.STAGES:
        pipeline.STAGE_FUNCTIONS[name] = recording_stage(name, calls)
    env = dist_util.DistEnv(rank=rank, world_size=2)
    with dist_util.fail_together(env):
        dist_util.init_process_group(env, torch.device("cpu"))
        try:
            pipeline.PipelineJob().run_rank(run_dir, spec, "local", job_id=None, rank=rank)
        finally:
            torch.distributed.destroy_process_group()
    return calls


@pytest.mark.timeout(200)
def test_other_ranks_join_the_stages_that_split_and_every_stage_gets_the_device(tmp_path):
    spec = Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=2"])
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    rank0, rank1 = run_ranks(job_rank, 2, str(run_dir), spec, group=False, timeout_s=150)
    assert rank0 == [("train", "cpu", 2), ("validate", "cpu", 2), ("evaluate", "cpu", 2), ("analyse", "cpu", 2)]
    assert rank1 == [("train", "cpu", 2), ("validate", "cpu", 2), ("evaluate", "cpu", 2)]
    assert RunDir(run_dir).read_status().state == runs.SUCCEEDED


def test_the_pipeline_gives_every_stage_the_jobs_accelerator(tmp_path, monkeypatch):
    spec = Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=2"])
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    seen = []
    for name in pipeline.STAGES:
        monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, name, lambda ctx, name=name: seen.append(ctx.device) or {})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "a mocked GPU")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert pipeline.run_pipeline(run_dir, spec, backend="inline") == pipeline.DONE
    assert seen == ["cuda:1"] * 4


def test_a_checkpoint_run_runs_on_rank_0_alone_and_the_others_leave_at_once(monkeypatch):
    class ImportSpec:  # the run kind is its declared source, whatever its stages
        def semantic(self):
            return {"source": "checkpoint"}

    ran = []
    monkeypatch.setattr(pipeline, "_job_id_and_rank", lambda: ("7", 3, 8))
    monkeypatch.setattr(pipeline.PipelineJob, "run_rank", lambda self, *a, **k: ran.append(k["rank"]) or {})
    assert pipeline.PipelineJob()("run", ImportSpec(), "slurm") == {"state": "rank-idle", "rank": 3}
    monkeypatch.setattr(pipeline, "_job_id_and_rank", lambda: ("7", 0, 8))
    pipeline.PipelineJob()("run", ImportSpec(), "slurm")
    assert ran == [0]  # rank 0 runs it, without a process group over the 8 tasks


@pytest.mark.parametrize(("env", "gpus"), [
    ({}, False),                                          # the CPU test cluster: no GPU variable at all
    ({"SLURM_GPUS_ON_NODE": "0"}, False),
    ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, False),
    ({"SLURM_JOB_GPUS": "0,1"}, True),
    ({"SLURM_GPUS_ON_NODE": "8"}, True),
    ({"CUDA_VISIBLE_DEVICES": "2"}, True),
])
def test_only_a_job_given_gpus_gets_a_gpu_per_task(env, gpus):
    """A CPU job is never told to use GPU `local_rank` (which would make pick_device refuse a GPU it lacks)."""
    from exoformer.runs.pipeline import job_has_gpus

    assert job_has_gpus(env) is gpus
