import math
import shutil

import torch
from same_state import assert_same_tensors
from train_tiny import tiny_model, tiny_train

from exoformer.train.checkpoint import latest_checkpoint, load_checkpoint
from exoformer.train.loop import autocast_for, resolve_precision, train


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


def _state_dtypes(tree, prefix=""):
    """{path: dtype} of every tensor in a nested state dict."""
    if isinstance(tree, torch.Tensor):
        return {prefix: tree.dtype}
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _state_dtypes(sub, f"{prefix}.{key}").items()}
    if isinstance(tree, (list, tuple)):
        return {k: v for i, sub in enumerate(tree) for k, v in _state_dtypes(sub, f"{prefix}[{i}]").items()}
    return {}


def test_official_pure_bf16_resume_is_bitwise_equal_to_an_uninterrupted_run(tiny_data, tmp_path):
    recipe = tiny_train(tiny_data, steps=4, val_every=0, checkpoint_every=2, keep_checkpoints=3,
                        precision="official-pure-bf16")
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    train(tiny_model(), recipe, reference)
    shutil.copytree(reference, resumed)
    for path in (resumed / "checkpoints").glob("step_00000004.pt*"):
        path.unlink()  # as if the job had stopped after step 2
    result = train(tiny_model(), recipe, resumed)
    assert result.step == 4 and not result.interrupted
    ours = load_checkpoint(resumed / "checkpoints" / "step_00000004.pt")
    theirs = load_checkpoint(reference / "checkpoints" / "step_00000004.pt")
    saved = load_checkpoint(reference / "checkpoints" / "step_00000002.pt")
    for key in ("muon", "adamw"):
        assert _state_dtypes(ours[key]) == _state_dtypes(theirs[key]) == _state_dtypes(saved[key])
    for key in ("model", "muon", "adamw", "loader", "final_train_loss"):
        assert_same_tensors(ours[key], theirs[key], key)


def test_official_pure_bf16_runs_without_autocast_and_bf16_autocast_with_it():
    cpu = torch.device("cpu")
    with autocast_for("official-pure-bf16", cpu):
        assert not torch.is_autocast_enabled("cpu")  # the official code has no autocast (docs/official_code.md 1.1)
    with autocast_for("bf16-autocast", cpu):
        assert torch.is_autocast_enabled("cpu")
