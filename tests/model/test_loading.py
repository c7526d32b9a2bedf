"""Official checkpoint import: synthetic checkpoints in the official key layout (docs/official_code.md section 2)."""

import re

import pytest
import torch

from exoformer.errors import UserError
from exoformer.model import ExoTransformer, load_official_checkpoint, variant_config

torch.set_num_threads(1)

_OFFICIAL_IN_LAYER = {
    "attn.qkv.weight": "attn.c_attn.weight", "attn.out.weight": "attn.c_proj.weight",
    **{f"attn.mix.{p}.coef_anchor": f"attn.lambda_{p}1" for p in "qkvg"},
    **{f"attn.mix.{p}.coef_self": f"attn.lambda_{p}2" for p in "qkvg"},
    **{f"attn.mix.dynamic.{n}": f"attn.dynamic_mixing.{n}" for n in ("fc1.weight", "fc2.weight", "fc2.bias")},
}


def to_official(state: dict, kind: str) -> dict:
    """Our state dict written backwards in the official layout (kind: model1..model4, model3-internal)."""
    out = {}
    for name, t in state.items():
        if name == "embed.weight":
            key = "transformer.wte.weight"
        elif name == "final_norm.weight":
            key = "transformer.final_norm.weight"
        elif name == "anchor.proj.weight":
            key = "anchor_proj.weight"
        elif m := re.fullmatch(r"anchor\.norms\.(\w)\.weight", name):
            key = f"anchor_{m.group(1)}_norm.weight"
        elif m := re.fullmatch(r"blocks\.(\d+)\.(.+)", name):
            layer, rest = m.groups()
            if am := re.fullmatch(r"attn\.anchor_norms\.(\w)\.weight", rest):
                rest = f"attn.{am.group(1)}_{'res_' if kind == 'model3-internal' else ''}norm.weight"
            key = f"transformer.layers.{layer}.{_OFFICIAL_IN_LAYER.get(rest, rest)}"
        else:
            key = name
        out[key] = t.clone()
    if kind == "model2":  # dead v_norm / g_norm in every layer >= 1
        n_layer = 1 + max(int(k.split(".")[2]) for k in out if k.startswith("transformer.layers."))
        for layer in range(1, n_layer):
            for p in "vg":
                out[f"transformer.layers.{layer}.attn.{p}_norm.weight"] = torch.randn(16)
    return out


def official_args(cfg, **flags) -> dict:
    args = dict(block_size=cfg.seq_len, vocab_size=cfg.vocab_size, n_layer=cfg.n_layer, n_head=cfg.n_head,
                n_embd=cfg.d_model, mlp_ratio=4, act_type="swiglu", norm_pos="before", smear_gate_enabled=False,
                per_layer_backout=False, residual_mode=cfg.granularity, gated_attention_enabled=cfg.gated,
                init_cutoff_factor=3, dynamic_mixing_enabled=cfg.dynamic, decouple_anchor=cfg.anchor == "h0",
                flash_attention=True, value_res_enabled=True, query_res_enabled=True, key_res_enabled=True,
                gate_res_enabled=True, value_res_lambda_init=0.5)
    return {**args, **flags}


def random_model(cfg, seed=0):
    torch.manual_seed(seed)
    model = ExoTransformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


CASES = [  # (our variant, overrides, official file kind, flags)
    ("base", {}, "model1", {}),
    ("gated", {}, "model1", {}),
    ("resformer", {}, "model1", {}),
    ("gated-resformer", {}, "model1", {}),
    ("e-nuresformer-qknorm", {"anchor_norm_paths": ()}, "model1", {}),  # raw q,k,v,g internal
    ("e-nuresformer-vg", {"anchor_norm_paths": ()}, "model1", {}),  # the NKQR reading
    ("e-nuresformer", {}, "model2", {}),
    ("h-nuresformer", {}, "model2", {}),
    ("e-nuresformer", {}, "model3-internal", {"q_residual_norm_enabled": True}),
    ("e-exoformer", {}, "model3", {}),
    ("h-exoformer", {}, "model3", {}),
    ("s-exoformer", {}, "model3", {}),
    ("e-exoformer-no-anchor-norm", {}, "model3", {f"{p}_residual_norm_enabled": False for p in "qkvg"}),
    ("dynamic-e-exoformer", {}, "model4", {}),
]


@pytest.mark.parametrize("variant,overrides,kind,flags", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_round_trip_official_layout(variant, overrides, kind, flags):
    cfg = variant_config(variant, "tiny", n_layer=3, **overrides)
    source = random_model(cfg)
    ckpt = {"model": to_official(source.state_dict(), kind), "model_args": official_args(cfg, **flags)}
    loaded, loaded_cfg = load_official_checkpoint(ckpt)
    assert loaded_cfg == cfg
    idx = torch.randint(0, cfg.vocab_size, (2, 20))
    torch.testing.assert_close(loaded.eval()(idx), source(idx), rtol=1e-5, atol=1e-5)


def test_file_with_compile_prefix_and_bf16(tmp_path):
    cfg = variant_config("dynamic-e-exoformer", "tiny", vocab_size=57601)
    source = random_model(cfg)
    state = {f"_orig_mod.{k}": v.to(torch.bfloat16) for k, v in to_official(source.state_dict(), "model4").items()}
    path = tmp_path / "ckpt_step:38146.pt"
    torch.save({"model": state, "model_args": official_args(cfg), "step": 38146}, path)
    loaded, loaded_cfg = load_official_checkpoint(path)
    assert loaded_cfg.vocab_size == 57601 and loaded.embed.weight.dtype == torch.float32
    idx = torch.randint(0, 57601, (1, 12))
    ref = source(idx)
    assert (loaded(idx) - ref).norm() / ref.norm() < 0.02  # bf16 round-off only


def _ckpt(variant="e-exoformer"):
    cfg = variant_config(variant, "tiny")
    return cfg, {"model": to_official(ExoTransformer(cfg).state_dict(), "model3"), "model_args": official_args(cfg)}


def test_unexpected_key_is_listed():
    _, ckpt = _ckpt()
    ckpt["model"]["transformer.layers.0.attn.smear.weight"] = torch.zeros(3)
    with pytest.raises(UserError, match=r"1 unexpected tensors: transformer\.layers\.0\.attn\.smear\.weight"):
        load_official_checkpoint(ckpt)


def test_missing_key_is_listed():
    _, ckpt = _ckpt()
    del ckpt["model"]["transformer.layers.1.attn.c_proj.weight"]
    with pytest.raises(UserError, match=r"missing 1 tensors.*blocks\.1\.attn\.out\.weight"):
        load_official_checkpoint(ckpt)


@pytest.mark.parametrize("flag,value", [("smear_gate_enabled", True), ("per_layer_backout", True),
                                        ("norm_pos", "after"), ("act_type", "gelu"), ("anchor_delta_enabled", True)])
def test_unsupported_flags_are_rejected(flag, value):
    _, ckpt = _ckpt()
    ckpt["model_args"][flag] = value
    with pytest.raises(UserError, match=f"model_args.{flag}"):
        load_official_checkpoint(ckpt)


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(UserError, match="needs the keys 'model' and 'model_args'"):
        load_official_checkpoint({"state_dict": {}})
    with pytest.raises(UserError, match="file not found"):
        load_official_checkpoint(tmp_path / "nope.pt")
