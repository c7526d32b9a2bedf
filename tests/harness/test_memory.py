"""The memory model (exoformer/budget/memory.py) against what torch allocates: parameters name by name, the
tensors autograd saves for backward per variant and precision, and FLOPs against the cost model."""

from __future__ import annotations

import pytest
import torch

from exoformer.budget.cost import flops_per_token
from exoformer.budget.memory import (
    MEMORY_PRECISIONS,
    _numerics,
    _saved_per_layer,
    estimate_memory,
    matmul_flops_per_token,
    param_bytes,
    parameter_tensors,
)
from exoformer.model import ExoTransformer, list_variants, variant_config
from exoformer.train.loop import autocast_for, to_official_pure_bf16
from exoformer.train.loss import lm_loss
from exoformer.train.optim import param_groups

B, T, D, V = 2, 24, 64, 512


def small(variant: str, **kw):
    return variant_config(variant, "tiny", **{"n_layer": 3, "d_model": D, "n_head": 4, "vocab_size": V, **kw})


@pytest.mark.parametrize("variant", ["gated", "base", "e-nuresformer", "dynamic-h-exoformer", "e-exoformer-vg",
                                     "e-exoformer-postnorm-qkv", "dynamic-e-exoformer-from-h2"])
@pytest.mark.parametrize("precision", MEMORY_PRECISIONS)
def test_parameters_match_the_model_name_shape_dtype_and_optimizer_group(variant, precision):
    cfg = small(variant)
    model = ExoTransformer(cfg)
    if precision == "official-pure-bf16":
        to_official_pure_bf16(model)
    ours = parameter_tensors(cfg)
    theirs = list(model.named_parameters())
    assert [(p.name, p.shape) for p in ours] == [(n, tuple(t.shape)) for n, t in theirs]
    assert [param_bytes(p, precision) for p in ours] == [t.element_size() for _, t in theirs]
    groups = {n: g for g, members in param_groups(model).items() for n, _ in members}
    assert {p.name: p.group for p in ours} == groups
    assert sum(p.numel for p in ours) == cfg.num_parameters()


def saved_bytes(cfg, precision: str) -> int:
    """Bytes of the distinct storages autograd saves in forward + loss, other than parameters and buffers and
    the loss's fp32 logits (those belong to the logits term of the model)."""
    torch.manual_seed(0)
    model = ExoTransformer(cfg)
    if precision == "official-pure-bf16":
        to_official_pure_bf16(model)
    kept = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in kept:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    x = torch.randint(0, V, (B, T))
    starts = torch.zeros(B, T, dtype=torch.bool)
    starts[:, 0] = starts[0, 10] = True
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with autocast_for(precision, torch.device("cpu")):
            logits = model(x, starts)
        lm_loss(logits, x, 1e-5)
    return sum(seen.values()) - B * T * V * 4


@pytest.mark.parametrize("variant", sorted(list_variants()))
@pytest.mark.parametrize("precision", MEMORY_PRECISIONS)
def test_saved_activations_match_what_autograd_saves(variant, precision):
    cfg = small(variant)
    per, shared = _saved_per_layer(cfg, _numerics(precision), B, T, doc_masking=True, compiled=False)
    assert sum(per.values()) + shared == pytest.approx(saved_bytes(cfg, precision), rel=0.03)


def test_the_cost_model_describes_the_training_code():
    from exoformer.budget import cost
    from exoformer.train.loss import CHUNK_TOKENS

    assert cost.LOSS_LOGITS_CHUNK == CHUNK_TOKENS


def test_flops_from_module_shapes_agree_with_the_cost_model():
    for variant in ("gated", "base", "dynamic-e-exoformer"):
        cfg = variant_config(variant, "450m")
        assert matmul_flops_per_token(cfg, 2048) == pytest.approx(flops_per_token(cfg, 2048), rel=1e-3)


def test_the_estimate_moves_the_way_the_code_does():
    cfg = variant_config("dynamic-e-exoformer", "450m")
    full = estimate_memory(cfg, precision="official-pure-bf16", micro_batch=16, seq_len=2048)
    half = estimate_memory(cfg, precision="official-pure-bf16", micro_batch=8, seq_len=2048, accumulation=2)
    chunked = estimate_memory(cfg, precision="official-pure-bf16", micro_batch=16, seq_len=2048, logits_chunk=2048)
    ckpt = estimate_memory(cfg, precision="official-pure-bf16", micro_batch=16, seq_len=2048,
                           activation_checkpointing=True)
    flex = estimate_memory(variant_config("dynamic-e-exoformer", "450m", attention="flex"),
                           precision="official-pure-bf16", micro_batch=16, seq_len=2048)
    assert half.total < full.total and chunked.total < full.total and ckpt.total < full.total
    assert flex.activations < full.activations  # no (B, 1, T, T) additive mask per layer
    with torch.device("meta"):
        model = ExoTransformer(cfg)
    to_official_pure_bf16(model)
    assert full.weights == sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    assert full.gradients == sum(p.numel() * p.element_size() for p in model.parameters())
    replicated = estimate_memory(cfg, precision="fp32", micro_batch=2, seq_len=2048, ranks=8)
    assert replicated.ddp_buckets == replicated.gradients
