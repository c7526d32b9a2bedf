"""The validate and evaluate stages on a tiny run directory trained for a few steps on the smoke corpus."""

from __future__ import annotations

import json
import logging
import math

import pytest
import torch

from exoformer.eval.stage import evaluate_stage, validate_stage
from exoformer.registry.registry import Registry
from exoformer.report.reading.selection import Selection
from exoformer.rundir import RunDir
from exoformer.runs.run_index import find_runs
from exoformer.runs.rundirs import identity_for
from exoformer.stage import StageContext
from exoformer.train.loop import train

TINY = ["train.steps=3", "train.batch_tokens=1024", "train.micro_batch_seqs=4", "train.seq_len=256",
        "train.warmup_steps=1", "train.muon_momentum_steps=1", "train.val_every=2", "train.val_batches=1",
        "train.checkpoint_every=3", "train.final_val_tokens=1024", "train.precision=fp32", "eval.limit=3",
        "eval.num_fewshot=1", "model.n_layer=2", "model.d_model=64", "model.n_head=2"]


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """A tiny smoke-shaped E-ExoFormer trained 3 steps, then validated and evaluated (3 docs per task)."""
    torch.set_num_threads(1)
    spec = Registry().resolve("e-exoformer-s42", preset="smoke", overrides=TINY)
    run_dir = tmp_path_factory.mktemp("runs") / spec.name / spec.hash12
    run_dir.mkdir(parents=True)
    (run_dir / "spec.yaml").write_text(json.dumps(spec.to_dict()))  # JSON is YAML
    RunDir(run_dir).write_identity(identity_for(Registry(), spec, TINY))
    train(spec.model, spec.train, run_dir)
    ctx = StageContext(run_dir=run_dir, spec=spec, device="cpu", say=logging.getLogger("test_stage").info)
    return ctx, validate_stage(ctx), evaluate_stage(ctx)


def test_validate_stage_writes_validation_json_with_rows(staged):
    tiny_run, summary, _ = staged
    record = json.loads((tiny_run.run_dir / "eval" / "validation.json").read_text())
    assert summary["tokens"] == 1024 == record["tokens"]
    assert record["val_ppl"] == pytest.approx(math.exp(record["val_loss"]))
    assert record["val_ppl_ce"] < record["val_ppl"]  # the z terms
    rows = {r["metric"]: r for r in record["rows"]}
    assert set(rows) == {"ppl", "loss", "ppl_ce", "loss_ce"}
    assert rows["ppl"]["task"] == "validation" and rows["ppl"]["value"] == pytest.approx(record["val_ppl"])
    assert rows["ppl"]["spec"] == "e-exoformer-s42" and rows["ppl"]["seed"] == 42
    assert 1 < record["val_ppl"] < 2048 * 2  # a 3-step model is near uniform over the 2,048-id vocabulary


def test_evaluate_stage_writes_results_without_samples_and_long_rows(staged):
    tiny_run, _, summary = staged
    results = json.loads((tiny_run.run_dir / "eval" / "results.json").read_text())
    assert "samples" not in results
    assert set(results["results"]) == {f"smoke_{t}" for t in ("arc_challenge", "arc_easy", "hellaswag",
                                                              "openbookqa", "piqa", "winogrande")}
    lines = (tiny_run.run_dir / "eval" / "long.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == summary["rows"] == 11  # acc + acc_norm for five tasks, acc for WinoGrande
    assert all(set(r) == {"spec", "seed", "task", "metric", "value", "stderr", "n", "precision"} for r in rows)
    assert all(r["n"] == 3 and 0 <= r["value"] <= 1 and r["precision"] == "bf16" for r in rows)
    assert results["scoring_precision"] == summary["precision"] == "bf16"
    samples = json.loads((tiny_run.run_dir / "eval" / "samples.json").read_text())["tasks"]
    for row in rows:  # the per-sample values average to lm-eval's metric
        values = samples[row["task"]][row["metric"]]
        assert len(values) == 3 and sum(values) / 3 == pytest.approx(row["value"])


def test_the_reading_verbs_read_the_stage_outputs(staged):
    tiny_run = staged[0]
    root = tiny_run.run_dir.parent.parent
    assert [run.spec for run in find_runs(root)] == ["e-exoformer-s42"]
    frame = Selection.of_root(Registry(), root, preset="smoke").pick("e-exoformer-s42").rows
    assert {"validation", "arc_easy", "winogrande"} <= set(frame["task"])
    assert set(frame["spec"]) == {"e-exoformer-s42"}


def author_estimate_loss(model, batches, z_loss_weight: float) -> float:
    """estimate_loss as docs/official_code.md 4.4-4.5 describe it, written from the text: per batch, flash-attn's
    per-token losses (CE + weight * lse^2) averaged over the tokens, plus the separately returned z term once
    more; then the plain mean over batches."""
    losses = []
    with torch.no_grad():
        for batch in batches:
            logits = model(batch.x, batch.doc_starts).double()
            lse = torch.logsumexp(logits, dim=-1).flatten()
            ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.y.flatten(), reduction="none")
            per_token = ce + z_loss_weight * lse ** 2
            losses.append(float(per_token.mean() + z_loss_weight * (lse ** 2).mean()))
    return sum(losses) / len(losses)


def test_val_ppl_is_the_authors_estimate_loss_on_the_same_model_and_data(staged):
    from exoformer.data.loader import validation_batches
    from exoformer.train.checkpoint import load_model_from_run
    from exoformer.train.loop import batch_criteria, eot_id_for, resolve_data_dir
    from exoformer.train.loss import validation_conventions

    ctx, record, _ = staged
    spec = ctx.spec
    model, _ = load_model_from_run(ctx.run_dir, steps=spec.train.steps)
    data = resolve_data_dir(spec.train.data)

    def batches(n_seqs: int, per_batch: int):
        return list(validation_batches(data, seq_len=256, batch_seqs=per_batch, max_seqs=n_seqs,
                                       vocab_size=spec.model.vocab_size, eot=eot_id_for(data)))

    expected = math.exp(author_estimate_loss(model, batches(4, 4), spec.train.z_loss))
    assert record["val_ppl"] == pytest.approx(expected, rel=1e-6)
    # uneven batches (4 + 2 sequences): the mean is over batches, not tokens; the CE perplexity is its own metric
    uneven = validation_conventions(batch_criteria(model, batches(6, 4), device="cpu", precision="fp32",
                                                   doc_masking=True), spec.train.z_loss)
    assert uneven["val_ppl"] == pytest.approx(math.exp(author_estimate_loss(model, batches(6, 4), spec.train.z_loss)),
                                              rel=1e-6)
    assert uneven["val_ppl_ce"] < uneven["val_ppl"]
    written = json.loads(ctx.files.validation.read_text())
    assert written["val_ppl_ce"] == pytest.approx(math.exp(written["val_loss_ce"]))
