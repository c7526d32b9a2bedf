import math

import torch
from train_tiny import tiny_model, tiny_train

from exoformer.train.checkpoint import latest_checkpoint, load_checkpoint
from exoformer.train.loop import resolve_precision, train


def test_auto_precision_is_fp32_on_cpu_and_bf16_autocast_on_cuda():
    assert resolve_precision("auto", torch.device("cpu")) == "fp32"
    assert resolve_precision("auto", torch.device("cuda", 0)) == "bf16-autocast"
    assert resolve_precision("official-pure-bf16", torch.device("cpu")) == "official-pure-bf16"


def test_official_pure_bf16_keeps_matrices_bf16_and_norms_fp32(tiny_data, tmp_path):
    result = train(tiny_model(), tiny_train(tiny_data, steps=2, val_every=2, precision="official-pure-bf16"), tmp_path)
    assert math.isfinite(result.final_train_loss)
    state = load_checkpoint(latest_checkpoint(tmp_path / "checkpoints"))
    model = state["model"]
    assert model["embed.weight"].dtype == model["blocks.0.attn.qkv.weight"].dtype == torch.bfloat16
    assert model["lm_head.weight"].dtype == torch.bfloat16
    assert model["final_norm.weight"].dtype == model["blocks.0.attn.mix.q.coef_anchor"].dtype == torch.float32
    muon_buffers = [s["momentum_buffer"] for s in state["muon"]["state"].values()]
    assert muon_buffers and all(b.dtype == torch.bfloat16 for b in muon_buffers)  # no fp32 master, as H4
