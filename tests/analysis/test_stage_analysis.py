"""The analyse stage: checkpoint -> fixed validation input -> probes.json, metrics.jsonl -> spikes.json."""

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from exoformer.analysis import probes as probes_mod
from exoformer.analysis import stage
from exoformer.data.shards import read_shard, write_shard
from exoformer.errors import UserError
from exoformer.registry.spec import PROBES, AnalysisConfig
from exoformer.model.config import ModelConfig
from exoformer.rundir import RunDir
from exoformer.train.checkpoint import save_checkpoint

torch.set_num_threads(1)

VOCAB, SEQ = 64, 16
METRIC_KEYS = ("first_token_attention", "attention_entropy", "token_similarity_mean", "token_similarity_std",
               "similarity_to_embeddings", "massive_activation", "pca_components", "pca_fraction",
               "layer_similarity", "gate_mean", "gate_sparsity", "coefficients")
"""The keys of one ablation's results of run_probes."""


def tiny_config(**overrides) -> ModelConfig:
    fields = dict(n_layer=2, n_head=2, d_model=16, vocab_size=VOCAB, seq_len=SEQ, gated=True,
                  mix_paths=("q", "k", "v", "g"), anchor="h0", anchor_norm_paths=("q", "k", "v", "g"))
    return ModelConfig(**(fields | overrides))


def make_run(tmp_path: Path, config: ModelConfig | None = None, *, checkpoint=True, val_tokens=200, spikes=(),
             steps=1100, **analysis) -> SimpleNamespace:
    """A run directory with a checkpoint of a randomly initialised model, tiny val shards and a metrics log."""
    from exoformer.model import ExoTransformer

    config = config or tiny_config()
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    write_shard(data / "t_train_000000.bin", rng.integers(0, VOCAB, 500))
    write_shard(data / "t_val_000000.bin", rng.integers(0, VOCAB, val_tokens))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if checkpoint:
        torch.manual_seed(0)
        model = ExoTransformer(config)
        save_checkpoint(run_dir / "checkpoints", 7, {"step": 7, "model": model.state_dict(),
                                                      "model_config": config.to_dict()}, keep=2)
    grad = 1.0 + 0.01 * rng.standard_normal(steps)
    for s in spikes:
        grad[s] += 5.0  # 500 sigma
    lines = [{"kind": "train", "step": s, "loss": 3.0 + 0.01 * float(rng.standard_normal()), "grad_norm": float(g)}
             for s, g in enumerate(grad)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    spec = SimpleNamespace(name="tiny-s42", hash12="0123456789ab", variant="tiny", shape="tiny",
                           train=SimpleNamespace(data=str(data), steps=7),
                           analysis=AnalysisConfig(**({"n_sequences": 3, "seq_len": SEQ} | analysis)))
    logged: list[str] = []
    return SimpleNamespace(run_dir=run_dir, spec=spec, device="cpu", say=logged.append, files=RunDir(run_dir),
                           logged=logged, data=data)


def test_probe_names_map_onto_run_probes_output():
    assert set(stage.PROBE_OUTPUTS) == set(PROBES)
    selected = [key for keys in stage.PROBE_OUTPUTS.values() for key in keys]
    assert sorted(selected) == sorted(METRIC_KEYS)  # every output selected exactly once


def test_stage_writes_probes_and_spikes(tmp_path):
    ctx = make_run(tmp_path, spikes=(1020, 1050, 1090))
    summary = stage.analyse_stage(ctx)
    probes = json.loads((ctx.run_dir / "analysis" / "probes.json").read_text())
    spikes = json.loads((ctx.run_dir / "analysis" / "spikes.json").read_text())

    assert probes["input"]["batch"] == 3 and probes["input"]["seq_len"] == SEQ
    assert probes["input"]["doc_masking"] is False
    assert probes["run"]["checkpoint"] == "step_00000007.pt" and probes["run"]["spec"] == "tiny-s42"
    assert set(probes["ablations"]) == {"none", "anchor", "self"}
    base = probes["ablations"]["none"]
    assert set(base) == set(METRIC_KEYS)
    assert len(base["first_token_attention"]) == 2 and len(base["pca_components"]) == 3
    assert all(0.0 < v <= 1.0 for v in base["first_token_attention"])
    assert len(base["gate_sparsity"]) == 2
    assert "static_coefficients" in probes
    # the same numbers as run_probes on the same model and input
    assert summary["first_token_attention_layer_mean"] == pytest.approx(sum(base["first_token_attention"]) / 2)

    assert spikes["grad_norm"]["spikes"] == 3
    assert spikes["grad_norm"]["score_pct"] == pytest.approx(100 * 3 / 1100)
    assert spikes["loss"]["spikes"] == 0
    assert summary["grad_spike_score_pct"] == pytest.approx(100 * 3 / 1100)
    assert summary["probes_json"] == "analysis/probes.json" and summary["spikes_json"] == "analysis/spikes.json"
    assert any("probes.json" in line for line in ctx.logged)

    rows = {r["metric"]: r for r in map(json.loads, (ctx.run_dir / "analysis" / "long.jsonl").read_text().splitlines())}
    assert rows["grad_spike_score"]["value"] == pytest.approx(100 * 3 / 1100) and rows["grad_spike_score"]["n"] == 1100
    anchor, own = probes["ablations"]["anchor"]["pca_components"], probes["ablations"]["self"]["pca_components"]
    assert rows["pca_final_anchor_removed"]["value"] == anchor[-1]
    assert rows["pca_mean_self_removed"]["value"] == pytest.approx(sum(own) / len(own))
    assert rows["token_similarity_max"]["value"] == max(base["token_similarity_mean"])
    assert all(r["task"] == "analysis" for r in rows.values())
    json.dumps(summary)  # the pipeline writes it as JSON


def test_fixed_input_is_the_first_validation_chunks(tmp_path):
    ctx = make_run(tmp_path)
    idx = stage.fixed_input(str(ctx.data), n_sequences=3, seq_len=SEQ, vocab_size=VOCAB)
    tokens = np.asarray(read_shard(ctx.data / "t_val_000000.bin"))
    assert idx.shape == (3, SEQ) and idx.dtype == torch.int64
    assert idx.reshape(-1).tolist() == tokens[: 3 * SEQ].tolist()


def test_probe_values_match_run_probes_directly(tmp_path):
    from exoformer.train.checkpoint import load_model_from_run

    ctx = make_run(tmp_path, probes=("pca_components", "token_similarity"), ablations=("none",))
    stage.analyse_stage(ctx)
    written = json.loads((ctx.run_dir / "analysis" / "probes.json").read_text())
    model, _ = load_model_from_run(ctx.run_dir)
    idx = stage.fixed_input(str(ctx.data), n_sequences=3, seq_len=SEQ, vocab_size=VOCAB)
    direct = probes_mod.run_probes(model, idx, ablations=("none",))["ablations"]["none"]
    assert set(written["ablations"]) == {"none"}
    assert set(written["ablations"]["none"]) == {"pca_components", "pca_fraction", "token_similarity_mean",
                                                 "token_similarity_std"}
    assert written["ablations"]["none"]["pca_components"] == direct["pca_components"]
    for ours, theirs in zip(written["ablations"]["none"]["token_similarity_mean"], direct["token_similarity_mean"]):
        assert math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-12)
    assert "static_coefficients" not in written
    assert not (ctx.run_dir / "analysis" / "spikes.json").exists()


def test_no_checkpoint_is_a_one_line_error(tmp_path):
    ctx = make_run(tmp_path, checkpoint=False)
    with pytest.raises(UserError) as err:
        stage.analyse_stage(ctx)
    assert "no complete checkpoint" in str(err.value) and "reproduce.py run tiny-s42" in str(err.value)
    assert "\n" not in str(err.value)


def test_spike_scores_alone_need_no_checkpoint_and_short_runs_have_no_score(tmp_path):
    ctx = make_run(tmp_path, checkpoint=False, steps=50, probes=("spike_scores",))
    summary = stage.analyse_stage(ctx)
    assert not (ctx.run_dir / "analysis" / "probes.json").exists()
    spikes = json.loads((ctx.run_dir / "analysis" / "spikes.json").read_text())
    assert spikes["grad_norm"]["score_pct"] is None and summary["grad_spike_score_pct"] is None
    assert any("not enough steps" in line for line in ctx.logged)


def test_ungated_and_unmixed_model_say_not_applicable(tmp_path):
    config = tiny_config(gated=False, mix_paths=(), anchor="none", anchor_norm_paths=())
    ctx = make_run(tmp_path, config, probes=("gate_stats", "coefficient_stats", "first_token_attention"))
    stage.analyse_stage(ctx)
    probes = json.loads((ctx.run_dir / "analysis" / "probes.json").read_text())
    assert probes["ablations"]["none"]["gate_sparsity"].startswith("not applicable")
    assert probes["ablations"]["none"]["coefficients"].startswith("not applicable")
    assert probes["ablations"]["anchor"].startswith("not applicable")
    assert probes["static_coefficients"].startswith("not applicable")


def test_too_little_validation_data_is_a_one_line_error(tmp_path):
    ctx = make_run(tmp_path, val_tokens=40)  # 2 chunks of 16, 3 wanted
    with pytest.raises(UserError, match="hold 2 sequences"):
        stage.analyse_stage(ctx)


def test_disabled_analysis_does_nothing(tmp_path):
    ctx = make_run(tmp_path, checkpoint=False)
    ctx.spec.analysis = replace(ctx.spec.analysis, enabled=False)
    assert "skipped" in stage.analyse_stage(ctx)
    assert not (ctx.run_dir / "analysis").exists()


def test_stage_accepts_a_resolved_registry_spec(tmp_path):
    """The attributes the stage reads exist on a real Spec (smoke preset, tiny shape overrides)."""
    from exoformer.registry.registry import Registry

    spec = Registry().resolve("e-exoformer-s42", preset="smoke")
    assert spec.analysis.seq_len == 256 and spec.analysis.n_sequences == 4
    assert set(spec.analysis.probes) <= set(stage.PROBE_OUTPUTS)
    assert isinstance(spec.hash12, str) and spec.train.data == "smoke"


@pytest.mark.parametrize("overrides", [{}, {"anchor": "internal", "mix_paths": ("v", "g"), "anchor_norm_paths": (),
                                            "granularity": "headwise"}])
def test_stage_writes_the_coefficients_the_lambda_heatmaps_draw(tmp_path, overrides):
    from exoformer.model import ExoTransformer
    from exoformer.report.figures.draw import lambda_ratios
    config = tiny_config(**overrides)
    ctx = make_run(tmp_path, config, checkpoint=False, probes=("coefficient_stats",))
    torch.manual_seed(1)
    model = ExoTransformer(config)
    with torch.no_grad():  # distinct values per layer, path and channel, so a mix-up cannot pass
        for name, param in model.named_parameters():
            if name.endswith(("coef_anchor", "coef_self")):
                param.copy_(torch.rand_like(param) + 0.5)
    save_checkpoint(ctx.run_dir / "checkpoints", 7, {"step": 7, "model": model.state_dict(),
                                                     "model_config": config.to_dict()}, keep=1)
    summary = stage.analyse_stage(ctx)
    run = RunDir(ctx.run_dir)
    assert summary["coefficients_json"] == run.display(run.coefficients)
    record = json.loads(run.coefficients.read_text())
    assert record["mix_paths"] == list(config.mix_paths) and record["granularity"] == config.granularity
    assert (record["n_layer"], record["dynamic"], record["checkpoint"]) == (2, False, "step_00000007.pt")
    ratios = lambda_ratios(record)
    params = dict(model.named_parameters())
    first = 1 if config.anchor == "internal" else 0
    for path in "qkvg":
        if path not in config.mix_paths:
            assert ratios[path] is None
            continue
        for layer in range(config.n_layer):
            if layer < first:
                assert record["coefficients"][path][layer] is None and np.isnan(ratios[path][layer]).all()
                continue
            anchor = params[f"blocks.{layer}.attn.mix.{path}.coef_anchor"].detach().reshape(-1)
            own = params[f"blocks.{layer}.attn.mix.{path}.coef_self"].detach().reshape(-1)
            assert record["coefficients"][path][layer]["anchor"] == pytest.approx(anchor.tolist())
            assert ratios[path][layer] == pytest.approx((anchor / own).numpy(), rel=1e-6)
