"""The importer's report: what a checkpoint file says about itself (layout, shape, vocab, steps, flags)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from exoformer.errors import UserError
from exoformer.model import variant_config
from exoformer.model.official_info import describe_checkpoint, format_checkpoint_info

sys.path.insert(0, str(Path(__file__).parent))
from test_loading import official_args, random_model, to_official  # noqa: E402

torch.set_num_threads(1)


@pytest.mark.parametrize("variant,kind,layout", [
    ("gated", "model1", "model1 (no mixing)"), ("resformer", "model1", "model1 (raw internal anchor)"),
    ("e-nuresformer", "model2", "model2 (normed internal anchor)"),
    ("e-nuresformer", "model3-internal", "model3 (internal anchor, decouple_anchor=False)"),
    ("e-exoformer", "model3", "model3 (exogenous anchor)"),
    ("dynamic-e-exoformer", "model4", "model4/model.py (dynamic mixing)"),
])
def test_layout_and_config_are_reported(tmp_path, variant, kind, layout):
    cfg = variant_config(variant, "tiny", n_layer=3)
    flags = {"q_residual_norm_enabled": True} if kind == "model3-internal" else {}
    path = tmp_path / "ckpt_step:38146.pt"
    torch.save({"model": to_official(random_model(cfg).state_dict(), kind), "model_args": official_args(cfg, **flags),
                "step": 38146, "tokens_processed": 10_000_000, "config": {"max_steps": 38147, "other": [1]}}, path)
    info = describe_checkpoint(path)
    assert info["layout"] == layout and info["kind"] == "official"
    assert info["model_config"] == cfg.to_dict() and info["params"] == cfg.num_parameters()
    assert info["shape"]["n_layer"] == 3 and info["vocab_size"] == cfg.vocab_size
    assert (info["step"], info["tokens"]) == (38146, 10_000_000)
    assert info["training"]["config"] == {"max_steps": 38147}
    text = format_checkpoint_info(info)
    assert f"layout     {layout}" in text and "step 38146, tokens 10,000,000" in text


def test_model3_lambda_doubling_and_bf16_are_flagged(tmp_path):
    cfg = variant_config("e-exoformer", "tiny")
    state = {k: v.to(torch.bfloat16) if v.dim() == 2 else v
             for k, v in to_official(random_model(cfg).state_dict(), "model3").items()}
    path = tmp_path / "c.pt"
    torch.save({"model": state, "model_args": official_args(cfg, dynamic_mixing_enabled=True)}, path)
    info = describe_checkpoint(path)
    assert info["lambda_init_doubled"] is True and info["flags"]["dynamic_mixing_enabled"] is True
    assert info["training"]["precision"].startswith("pure bf16")
    assert "doubled the lambda init (hazard H6)" in format_checkpoint_info(info)
    torch.save({"model": state, "model_args": official_args(cfg, dynamic_mixing_enabled=False)}, path)
    assert describe_checkpoint(path)["lambda_init_doubled"] is False


def test_our_run_checkpoint_is_described(tmp_path):
    cfg = variant_config("gated", "tiny")
    path = tmp_path / "step_00000010.pt"
    torch.save({"model": random_model(cfg).state_dict(), "model_config": cfg.to_dict(), "step": 10, "tokens": 640,
                "train_config": {"precision": "fp32", "doc_masking": True, "steps": 10}}, path)
    info = describe_checkpoint(path)
    assert info["kind"] == "ours" and info["step"] == 10 and info["model_config"] == cfg.to_dict()


def test_unexpressible_vocab_is_refused(tmp_path):
    cfg = variant_config("gated", "tiny")
    path = tmp_path / "c.pt"
    torch.save({"model": to_official(random_model(cfg).state_dict(), "model1"),
                "model_args": official_args(cfg, vocab_size=0)}, path)
    with pytest.raises(UserError, match="vocab_size"):
        describe_checkpoint(path)
