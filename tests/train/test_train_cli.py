import json
import shutil
from pathlib import Path

import numpy as np

from exoformer.data.shards import write_shard
from exoformer.harness.registry import DEFAULT_REGISTRY, Registry
from exoformer.harness.smoke_recipe import smoke_train_fields
from exoformer.train.__main__ import build_configs, main, parse_args

TINY = ["--variant", "e-exoformer", "--shape", "tiny", "--steps", "3", "--batch-tokens", "128", "--seq-len", "32"]


def test_cli_trains_then_does_nothing_when_finished(tiny_data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TINY, "--data", str(tiny_data), "--out", str(out)]) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if line["kind"] == "train"] == [1, 2, 3]
    assert "done: 3 steps, 384 tokens" in capsys.readouterr().out
    assert main([*TINY, "--data", str(tiny_data), "--out", str(out)]) == 0
    assert "already finished" in capsys.readouterr().out


def test_missing_data_directory_is_exit_2_one_line(tmp_path, capsys):
    assert main([*TINY, "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "nowhere" in err and "\n" not in err
    assert not (tmp_path / "run").exists()


def test_vocab_smaller_than_largest_token_is_exit_2(tmp_path, capsys):
    data = tmp_path / "data"
    rng = np.random.default_rng(0)
    write_shard(data / "x_train_000000.bin", rng.integers(0, 300, 2000))  # shape tiny has vocab 256
    write_shard(data / "x_val_000000.bin", rng.integers(0, 200, 500))
    assert main([*TINY, "--data", str(data), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "vocab_size 256" in err and "x_train_000000.bin" in err and err.count("\n") == 1
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_checkpoint_of_another_variant_is_exit_2_and_kept(tiny_data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TINY, "--data", str(tiny_data), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in (out / "checkpoints").iterdir()}
    metrics = (out / "metrics.jsonl").read_bytes()
    other = ["--variant", "gated", *TINY[2:]]
    assert main([*other, "--data", str(tiny_data), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "checkpoint was made for a different run: model." in err and err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in (out / "checkpoints").iterdir()} == before
    assert (out / "metrics.jsonl").read_bytes() == metrics


SMOKE_ARGS = ["--variant", "gated", "--shape", "smoke", "--data", "smoke", "--out", "x"]


def test_smoke_shape_defaults_come_from_one_place():
    smoke = smoke_train_fields()
    assert smoke["steps"] == 150 and smoke["data"] == "smoke"  # read from experiments/presets.yaml
    model, recipe = build_configs(parse_args(SMOKE_ARGS))
    assert model.n_layer == 4 and model.d_model == 128 and model.vocab_size == 2048
    assert all(getattr(recipe, k) == v for k, v in smoke.items())
    _, longer = build_configs(parse_args([*SMOKE_ARGS, "--steps", "50", "--seed", "3"]))
    assert longer.steps == 50 and longer.seed == 3 and longer.batch_tokens == smoke["batch_tokens"]


def test_smoke_cli_trains_exactly_what_the_smoke_preset_resolves_to():
    spec = Registry().resolve("gated-s42", preset="smoke")
    model, recipe = build_configs(parse_args(SMOKE_ARGS))
    assert recipe == spec.train and model == spec.model


def test_smoke_cli_follows_an_edited_preset(tmp_path, monkeypatch):
    registry = tmp_path / "experiments"
    shutil.copytree(DEFAULT_REGISTRY, registry)
    presets = registry / "presets.yaml"
    text = presets.read_text()
    assert text.count("      steps: 150\n") == 1
    presets.write_text(text.replace("      steps: 150\n", "      steps: 77\n"))
    monkeypatch.setenv("EXOFORMER_REGISTRY", str(registry))
    _, recipe = build_configs(parse_args(SMOKE_ARGS))
    assert recipe.steps == 77


def test_smoke_cli_without_a_smoke_preset_is_exit_2(tmp_path, monkeypatch, capsys):
    registry = tmp_path / "experiments"
    registry.mkdir()
    (registry / "registry.yaml").write_text("presets:\n  tiny:\n    why: x\n    shape: tiny\n")
    shutil.copy(Path(__file__).resolve().parents[2] / "experiments" / "variants.yaml", registry)
    monkeypatch.setenv("EXOFORMER_REGISTRY", str(registry))
    assert main(["--variant", "gated", "--shape", "smoke", "--data", "smoke", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no 'smoke' preset" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_unknown_variant_is_exit_2(tmp_path, capsys):
    assert main(["--variant", "exoformr", "--shape", "tiny", "--data", "smoke", "--out", str(tmp_path)]) == 2
    assert "did you mean" in capsys.readouterr().err
