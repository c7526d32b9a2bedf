"""Validation and evaluation split across 2 gloo ranks give the numbers of 1 process (rank 0 writes them)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from ranks import run_ranks

from exoformer.eval.stage import evaluate_stage, validate_stage
from exoformer.registry.registry import Registry
from exoformer.stage import StageContext
from exoformer.train.loop import train

# fp32 scoring: bf16 log-likelihoods depend on which requests share a padded batch, and the ranks batch other
# requests together than one process does, so only fp32 scoring is exact across rank counts.
TINY = ["train.steps=2", "train.batch_tokens=1024", "train.micro_batch_seqs=2", "train.seq_len=256",
        "train.warmup_steps=1", "train.muon_momentum_steps=1", "train.val_every=0", "train.val_batches=1",
        "train.checkpoint_every=2", "train.final_val_tokens=2560", "train.precision=fp32", "eval.limit=5",
        "eval.precision=fp32",
        "eval.num_fewshot=1", "eval.batch_size=2", "model.n_layer=1", "model.d_model=64", "model.n_head=2"]


def spec(*extra: str):
    return Registry().resolve("e-exoformer-s42", preset="smoke", overrides=[*TINY, *extra])


def stages(rank: int, run_dir, *extra: str) -> tuple[dict, dict]:
    ctx = StageContext(run_dir=run_dir, spec=spec(*extra), device="cpu")
    return validate_stage(ctx), evaluate_stage(ctx)


def outputs(run_dir) -> tuple[dict, list[dict]]:
    validation = json.loads((run_dir / "eval" / "validation.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "eval" / "long.jsonl").read_text().splitlines()]
    return validation, rows


def trained_twice(tmp_path):
    """One trained run directory and a copy: `single` for 1 process, `shared` for the 2 ranks."""
    torch.set_num_threads(1)
    single = tmp_path / "single"
    single.mkdir()
    train(spec().model, spec().train, single)
    shared = tmp_path / "shared"
    shutil.copytree(single, shared)
    return single, shared


@pytest.mark.timeout(300)
def test_two_ranks_validate_and_evaluate_as_one_process(tmp_path):
    single, shared = trained_twice(tmp_path)
    stages(0, single)
    results = run_ranks(stages, 2, shared, timeout_s=240)
    assert results[1] == ({}, {}), results  # rank 1 scored its share and wrote nothing
    assert results[0][0]["tokens"] == 2560  # all 10 validation sequences, 5 batches split 3 + 2
    ours, theirs = outputs(shared), outputs(single)
    for key in ("val_loss", "val_ppl", "val_loss_ce", "val_ppl_ce", "tokens"):
        assert ours[0][key] == pytest.approx(theirs[0][key], rel=1e-12), key
    assert len(ours[1]) == len(theirs[1]) == 11
    for a, b in zip(ours[1], theirs[1]):
        assert (a["task"], a["metric"], a["n"]) == (b["task"], b["metric"], b["n"]) and a["n"] == 5
        assert a["value"] == pytest.approx(b["value"], rel=1e-12)
        assert a["stderr"] == pytest.approx(b["stderr"], rel=1e-9)


@pytest.mark.timeout(300)
def test_fewer_documents_than_ranks_are_scored_by_rank_0_alone(tmp_path):
    """eval.limit=1 on 2 ranks: lm-eval would deal rank 1 no document (and refuse); rank 0 scores it."""
    single, shared = trained_twice(tmp_path)
    stages(0, single, "eval.limit=1")
    results = run_ranks(stages, 2, shared, "eval.limit=1", timeout_s=240)
    assert results[1][1] == {}, results
    ours, theirs = outputs(shared), outputs(single)
    assert [(r["task"], r["metric"], r["n"], r["value"]) for r in ours[1]] == \
        [(r["task"], r["metric"], r["n"], r["value"]) for r in theirs[1]]
    assert all(r["n"] == 1 for r in ours[1])
