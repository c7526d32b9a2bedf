"""Spec identity: placement never changes the hash, every semantic field does, and hashes are stable."""

import json
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from exoformer.registry.hashing import canonical_json
from exoformer.registry.registry import DEFAULT_REGISTRY, Registry
from exoformer.registry.spec import AnalysisConfig, EvalConfig
from exoformer.model.config import ModelConfig
from exoformer.train.config import TrainConfig

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden_hashes.json")


@pytest.fixture(scope="module")
def registry():
    return Registry()


def test_canonical_json_is_order_free_and_uses_repr_floats():
    assert canonical_json({"b": 1e-5, "a": (1, 2)}) == canonical_json({"a": [1, 2], "b": 0.00001}) == '{"a":[1,2],"b":1e-05}'


def test_reordering_yaml_keys_keeps_the_hash(tmp_path, registry):
    reg_dir = tmp_path / "reg"
    shutil.copytree(DEFAULT_REGISTRY, reg_dir)
    presets = reg_dir / "presets.yaml"
    lines = presets.read_text().splitlines()
    # reverse the order of the smoke preset's train keys (a contiguous block of 'key: value' lines)
    start = lines.index("    train:") + 1
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("      "))
    lines[start:end] = reversed(lines[start:end])
    presets.write_text("\n".join(lines) + "\n")
    other = Registry(reg_dir)
    for name in ("base-s42", "dynamic-e-exoformer-s1337"):
        assert other.resolve(name, preset="smoke").hash == registry.resolve(name, preset="smoke").hash


@pytest.mark.parametrize("override", ["placement.partition=gpu-long", "placement.account=lab42",
                                      "placement.profile=a100",
                                      "placement.qos=high"])
def test_placement_never_changes_the_hash(registry, override):
    assert registry.resolve("e-exoformer-s42", overrides=[override]).hash == registry.resolve("e-exoformer-s42").hash


def _changed(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 2
    if isinstance(value, float):
        return value * 0.5 if value else 0.01
    return value


SEMANTIC = (
    [f"model.{f.name}" for f in fields(ModelConfig) if f.name in
     ("n_layer", "n_head", "d_model", "vocab_size", "seq_len", "rope_theta", "norm_eps", "init_std", "init_cutoff",
      "dynamic_hidden", "coef_init")]
    + [f"train.{f.name}" for f in fields(TrainConfig) if f.name != "seed" and f.type in ("int", "float", "bool")]
    + ["eval.num_fewshot", "eval.batch_size", "eval.enabled", "analysis.n_sequences", "analysis.enabled"]
)


@pytest.mark.parametrize("key", SEMANTIC)
def test_every_semantic_field_changes_the_hash(registry, key):
    spec = registry.resolve("dynamic-e-exoformer-s42")
    section, name = key.split(".")
    current = getattr(getattr(spec, section), name)
    new = _changed(current)
    if key in ("model.n_head",):
        new = 8
    if key in ("train.batch_tokens",):
        new = current * 2
    if key == "train.decay_fraction":
        new = 0.1
    if key == "train.seq_len":
        new = 1024
    if key == "model.seq_len":
        new = 4096
    value = json.dumps(new)
    assert registry.resolve("dynamic-e-exoformer-s42", overrides=[f"{key}={value}"]).hash != spec.hash, key


@pytest.mark.parametrize("override", ["seed=7", "variant=e-exoformer", "model.granularity=scalar",
                                      "model.post_mix_norm_paths=[q]", "model.anchor_norm_paths=[q,k]", "model.anchor=h1", "train.data=smoke", "train.precision=fp32",
                                      "eval.suite=smoke", "eval.limit=10", "eval.precision=fp32",
                                      "analysis.seq_len=512",
                                      "analysis.probes=[token_similarity]", "analysis.ablations=[none]"])
def test_identity_fields_change_the_hash(registry, override):
    assert registry.resolve("dynamic-e-exoformer-s42", overrides=[override]).hash != \
        registry.resolve("dynamic-e-exoformer-s42").hash


def test_sampled_fields_cover_every_dataclass_field():
    covered = {k.split(".")[1] for k in SEMANTIC}
    for cls in (EvalConfig, AnalysisConfig):
        for f in fields(cls):
            assert f.name in covered or f.name in ("suite", "limit", "precision", "probes", "ablations",
                                                   "seq_len"), f.name


def test_hashes_are_stable_across_processes_and_match_the_golden_file():
    code = ("import json; from exoformer.registry.registry import Registry; r = Registry();"
            "print(json.dumps({n: r.resolve(n).hash for n in r.specs}))")
    runs = [subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout for seed in ("1", "2")]
    assert runs[0] == runs[1]
    hashes = json.loads(runs[0])
    golden = json.loads(GOLDEN.read_text())
    for name, expected in golden.items():
        assert hashes[name] == expected, f"{name}: hash changed; if the schema change is intended, update {GOLDEN.name}"


def test_smoke_specs_hash_the_smoke_worlds_code(monkeypatch):
    """Runs on an older smoke corpus or older smoke tasks are never reused: the world's identity is hashed."""
    import exoformer.data as data

    reg = Registry()
    smoke, paper = reg.resolve("base-s42", preset="smoke"), reg.resolve("base-s42")
    assert smoke.semantic()["smoke_world"] == data.smoke_key() and "smoke_world" not in paper.semantic()
    smoke_hash, paper_hash = smoke.hash, paper.hash
    monkeypatch.setattr(data, "smoke_key", lambda: "v999-changed")
    monkeypatch.setattr("exoformer.registry.spec.smoke_key", data.smoke_key)
    assert Registry().resolve("base-s42", preset="smoke").hash != smoke_hash
    assert Registry().resolve("base-s42").hash == paper_hash
