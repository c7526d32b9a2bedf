"""The variant table, shapes, config errors and parameter counts (docs/official_code.md section 2)."""

import subprocess
import sys

import pytest
import torch

from exoformer.errors import UserError
from exoformer.model import ModelConfig, list_shapes, list_variants, resolve_shape, variant_config, variant_fields

EXPECTED_NAMES = {
    "base", "gated", "resformer", "gated-resformer", "e-nuresformer", "h-nuresformer", "s-nuresformer",
    "e-nuresformer-qknorm", "h-nuresformer-qknorm", "s-nuresformer-qknorm", "e-exoformer", "h-exoformer",
    "s-exoformer", "dynamic-e-exoformer", "dynamic-h-exoformer", "dynamic-s-exoformer",
    "e-exoformer-no-anchor-norm", "e-exoformer-postnorm-qkv", "e-exoformer-postnorm-qkvg",
    "static-e-exoformer-from-h1", "static-e-exoformer-from-h2", "dynamic-e-exoformer-from-h1",
    "dynamic-e-exoformer-from-h2", "e-nuresformer-vg", "e-exoformer-vg", "dynamic-e-exoformer-fc2-official",
}

# docs/official_code.md section 2, counted by the author's code at vocab 57,601.
OFFICIAL_COUNTS = [
    ("gated", "450m-gated", 452_526_720),
    ("base", "450m-gated", 422_118_016),
    ("e-exoformer", "450m", 456_958_848),
    ("h-exoformer", "450m", 456_724_992),
    ("s-exoformer", "450m", 456_721_512),
    ("dynamic-e-exoformer", "450m", 457_437_928),
    ("dynamic-e-exoformer", "1b", 1_018_150_016),
    ("base", "450m", 453_581_824),  # ungated alias -> 32 layers
    ("gated-resformer", "450m", 452_584_064),
    ("resformer", "450m-gated", 422_175_360),
    ("e-exoformer", "1b", 1_017_359_232),
    ("gated", "1b", 1_007_528_448),
]


def test_every_paper_variant_is_named():
    assert set(list_variants()) == EXPECTED_NAMES
    assert {"450m-gated", "450m-ungated", "1b-gated", "1b-ungated", "smoke", "tiny", "proxy"} <= set(list_shapes())


@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_every_variant_builds_a_valid_config(name):
    cfg = variant_config(name, "smoke")
    assert cfg.n_layer == 4 and cfg.vocab_size == 2048 and cfg.seq_len == 256


def test_resformer_definition():
    r, g = variant_fields("resformer"), variant_config("gated-resformer", "tiny")
    assert r == {"gated": False, "mix_paths": ["v"], "anchor": "internal"}
    assert g.gated and g.mix_paths == ("v",) and g.anchor_norm_paths == () and g.granularity == "elementwise"


def test_450m_alias_resolves_by_gating():
    assert resolve_shape("450m", "base") == "450m-ungated"
    assert resolve_shape("450m", "dynamic-e-exoformer") == "450m-gated"
    assert variant_config("base", "450m").n_layer == 32
    assert variant_config("gated", "450m").n_layer == 29


@pytest.mark.parametrize("variant,shape,count", OFFICIAL_COUNTS)
def test_parameter_counts_match_official_code(variant, shape, count):
    cfg = variant_config(variant, shape, vocab_size=57601)
    assert cfg.num_parameters() == count
    from exoformer.model import ExoTransformer

    with torch.device("meta"):
        model = ExoTransformer(cfg)
    assert sum(p.numel() for p in model.parameters()) == count


def test_unknown_names_suggest():
    with pytest.raises(UserError, match="did you mean 'e-exoformer'"):
        variant_config("e-exoformr")
    with pytest.raises(UserError, match="unknown shape 'smok'.*smoke"):
        variant_config("gated", "smok")
    with pytest.raises(UserError, match="unknown model field 'n_layers'"):
        variant_config("gated", "tiny", n_layers=3)


@pytest.mark.parametrize("overrides,field", [
    ({"gated": False, "mix_paths": ("g",), "anchor": "h0"}, "model.mix_paths"),
    ({"d_model": 30, "n_head": 4}, "model.d_model"),
    ({"anchor": "h3", "mix_paths": ("v",)}, "model.anchor"),
    ({"granularity": "rowwise"}, "model.granularity"),
])
def test_bad_configs_give_one_line_errors(overrides, field):
    with pytest.raises(UserError) as info:
        ModelConfig(**overrides)
    assert str(info.value).startswith(field) and "\n" not in str(info.value)


def test_package_import_is_torch_free():
    code = ("import sys, exoformer.model as m; m.variant_config('dynamic-e-exoformer', '450m'); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
