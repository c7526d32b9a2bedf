"""Merging order, typed --set overrides, sweep expansion and line-tracking YAML, on small local inputs."""

import pytest

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.registry.registry import Registry
from exoformer.records import check
from exoformer.registry.spec import Entry
from exoformer.registry.sweeps import expand
from exoformer.yaml_lines import load_yaml_with_lines


@pytest.fixture(scope="module")
def registry():
    return Registry()


def test_merge_order_defaults_preset_variant_spec_cli(registry):
    spec = registry.resolve("ladder-250m-gated-s42")
    assert spec.model.n_layer == 13  # the spec's shape for 450m beats the preset's shape
    assert spec.model.gated is True and spec.model.mix_paths == ()  # variant fields
    assert spec.train.steps == 38_147 and spec.train.muon_lr == 0.01  # preset, then dataclass default
    cli = registry.resolve("ladder-250m-gated-s42", overrides=["train.muon_lr=2e-2", "model.n_layer=3", "seed=9"])
    assert (cli.train.muon_lr, cli.model.n_layer, cli.seed, cli.train.seed) == (0.02, 3, 9, 9)


@pytest.mark.parametrize("override, expect", [
    ("train.stepz=3", "did you mean 'train.steps'"),
    ("train.steps=abc", "must be an integer"),
    ("model.gated=maybe", "true or false"),
    ("train.seed=3", "top-level `seed:`"),
    ("nokey", "has no '='"),
    ("model.mix_paths=q", "list of strings"),
    ("shape=[a]", "shape name"),
    ("shape=nope", "unknown shape"),
])
def test_cli_overrides_are_typed_one_line_errors(capsys, override, expect):
    assert main(["show", "e-exoformer-s42", "--set", override]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and expect in err and "--set" in err


def test_bad_command_line_is_one_line_exit_2(capsys):
    assert main(["plan"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert main(["frobnicate"]) == 2


def test_layer_values_normalise_floats_and_lists():
    assert check(1, "float", where="x", yaml=True) == 1.0 and isinstance(check(1, "float", where="x", yaml=True), float)
    assert check("1e-5", "float", where="x", yaml=True) == 1e-5  # YAML 1.1 reads 1e-5 as a string
    assert check(["q"], "tuple[str, ...]", where="x") == ("q",)
    assert check(None, "int | None", where="x") is None
    with pytest.raises(UserError, match="must be an integer"):
        check(True, "int", where="x")


def test_sweep_expands_the_cartesian_product_in_order():
    sweep = {"name": "{variant}-{paths}-s{seed}",
             "grid": {"variant": ["base", "gated"], "paths": {"qk": {"model.mix_paths": ["q", "k"]}, "v": {}},
                      "seed": [1, 2]}}
    points = expand(sweep, {}, file="f.yaml", line=1)
    assert [p.name for p in points] == ["base-qk-s1", "base-qk-s2", "base-v-s1", "base-v-s2",
                                        "gated-qk-s1", "gated-qk-s2", "gated-v-s1", "gated-v-s2"]
    assert points[0].layer["model.mix_paths"].value == ("q", "k") and "model.mix_paths" not in points[2].layer


def test_sweep_uses_shared_keys_in_the_template():
    points = expand({"name": "{variant}-s{seed}", "grid": {"seed": [3]}}, {"variant": Entry("base", "f:1")},
                    file="f.yaml", line=1)
    assert [p.name for p in points] == ["base-s3"]


def test_yaml_loader_tracks_lines_and_rejects_duplicates(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("a: 1\nb:\n  c: [x, y]\n")
    data = load_yaml_with_lines(path)
    assert data == {"a": 1, "b": {"c": ["x", "y"]}}
    assert data.key_lines == {"a": 1, "b": 2} and data["b"].line_of("c") == 3
    path.write_text("a: 1\nb: 2\na: 3\n")
    with pytest.raises(UserError, match=r"a.yaml:3: duplicate key 'a'"):
        load_yaml_with_lines(path)
