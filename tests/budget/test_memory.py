"""The budget's model figures (exoformer/budget/module_figures.py) against what torch allocates on real tensors:
parameters name by name with dtype and optimiser group, the tensors autograd saves for backward per variant and
precision, FLOPs against the cost model, the probe-depth extrapolation against full depth, and the cache; then the
memory estimate (exoformer/budget/memory.py) built on them."""

from __future__ import annotations

import json

import pytest
import torch

from exoformer.budget import module_figures
from exoformer.budget.cost import flops_per_token
from exoformer.budget.memory import estimate_memory
from exoformer.model import ExoTransformer, variant_config
from exoformer.train.config import STEP_PRECISIONS
from exoformer.train.loop import autocast_for, to_official_pure_bf16
from exoformer.train.loss import lm_loss
from exoformer.train.optim import param_groups

B, T, D, V = 2, 24, 64, 512
VARIANTS = ["gated", "base", "resformer", "e-nuresformer", "dynamic-h-exoformer", "s-exoformer", "e-exoformer-vg",
            "e-exoformer-postnorm-qkv", "dynamic-e-exoformer-from-h2"]
"""Every kind of block: plain, internal anchor (raw and normed), exogenous from h0 and h2, dynamic, scalar and
headwise coefficients, a partial mix, post-mix norms."""


def small(variant: str, **kw):
    return variant_config(variant, "tiny", **{"n_layer": 5, "d_model": D, "n_head": 4, "vocab_size": V, **kw})


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EXOFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(module_figures, "_MEMO", {})


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("precision", STEP_PRECISIONS)
def test_parameters_match_the_model_name_shape_dtype_and_optimizer_group(variant, precision):
    cfg = small(variant)
    model = ExoTransformer(cfg)
    if precision == "official-pure-bf16":
        to_official_pure_bf16(model)
    ours = module_figures.parameters(cfg)
    theirs = list(model.named_parameters())
    assert [(p.name, p.shape) for p in ours] == [(n, tuple(t.shape)) for n, t in theirs]
    assert [p.nbytes(precision) for p in ours] == [t.numel() * t.element_size() for _, t in theirs]
    groups = {n: g for g, members in param_groups(model).items() for n, _ in members}
    assert {p.name: p.group for p in ours} == groups
    assert sum(p.numel for p in ours) == cfg.num_parameters()  # the closed form the limits check uses
    assert module_figures.buffer_bytes(cfg) == sum(b.numel() * b.element_size() for b in model.buffers())


def saved_bytes(cfg, precision: str, batch: int) -> int:
    """Bytes of the distinct storages autograd saves in a real forward + loss on CPU, other than parameters and
    buffers and the loss's fp32 logits (those belong to the logits term of the estimate)."""
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

    x, y = torch.randint(0, V, (batch, T)), torch.randint(0, V, (batch, T))
    starts = torch.zeros(batch, T, dtype=torch.bool)
    starts[:, 0] = starts[0, 10] = True
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with autocast_for(precision, torch.device("cpu")):
            logits = model(x, starts)
        lm_loss(logits, y, 1e-5)
    return sum(seen.values()) - batch * T * V * 4


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("precision", STEP_PRECISIONS)
def test_traced_activations_match_what_autograd_saves_on_real_tensors(variant, precision):
    cfg = small(variant)
    traced = module_figures.saved_activations(cfg, precision=precision, seq_len=T, micro_batch=3,  # not a traced
                                              dense_mask=True, chunked_loss=False)  # batch size: the affine fit
    assert sum(traced.values()) == pytest.approx(saved_bytes(cfg, precision, 3), rel=0.005)


@pytest.mark.parametrize("variant", ["e-nuresformer", "dynamic-h-exoformer", "dynamic-e-exoformer-from-h2", "base"])
def test_probe_depth_extrapolates_exactly_to_the_full_depth(variant, monkeypatch):
    cfg = small(variant, n_layer=7)
    assert module_figures.probe_depth(cfg) < cfg.n_layer
    probed_flops = module_figures.flops_per_token(cfg, T)
    probed = module_figures.saved_activations(cfg, precision="bf16-autocast", seq_len=T, micro_batch=2,
                                              dense_mask=True, chunked_loss=True)
    monkeypatch.setattr(module_figures, "_MEMO", {})
    monkeypatch.setattr(module_figures, "probe_depth", lambda c: c.n_layer)
    monkeypatch.setattr(module_figures, "_code_hash", lambda: "full-depth")  # other cache files
    assert module_figures.flops_per_token(cfg, T) == probed_flops
    assert module_figures.saved_activations(cfg, precision="bf16-autocast", seq_len=T, micro_batch=2,
                                            dense_mask=True, chunked_loss=True) == probed


def test_traced_flops_agree_with_the_cost_model():
    for variant in ("gated", "base", "dynamic-e-exoformer"):
        cfg = variant_config(variant, "450m")
        assert module_figures.flops_per_token(cfg, 2048) == pytest.approx(flops_per_token(cfg, 2048), rel=1e-3)


def test_flops_count_the_linear_weights_and_causal_attention():
    """Known truth for a model without mixing: 2 FLOPs per weight and token for every matmul (projections, MLP,
    LM head), QK^T and AV over the causal half, x3 for forward and backward."""
    cfg = small("gated")
    with torch.device("meta"):
        model = ExoTransformer(cfg)
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    attention = cfg.n_layer * 2 * (2 * T * cfg.d_model) / 2
    assert module_figures.flops_per_token(cfg, T) == pytest.approx(3 * (2 * weights + attention), rel=1e-12)


def test_figures_are_cached_and_read_back_without_measuring(monkeypatch, tmp_path):
    cfg = small("e-exoformer-vg")
    first = module_figures.saved_activations(cfg, precision="fp32", seq_len=T, micro_batch=2, dense_mask=False,
                                             chunked_loss=True)
    files = sorted((tmp_path / "cache" / "module_figures").glob("activations-*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["model"] == cfg.to_dict()
    monkeypatch.setattr(module_figures, "_MEMO", {})

    def no_measuring(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(module_figures, "_measure_activations", no_measuring)
    assert module_figures.saved_activations(cfg, precision="fp32", seq_len=T, micro_batch=2, dense_mask=False,
                                            chunked_loss=True) == first
    other = small("e-exoformer-vg", d_model=2 * D)  # another config is another question
    with pytest.raises(AssertionError, match="measured again"):
        module_figures.saved_activations(other, precision="fp32", seq_len=T, micro_batch=2, dense_mask=False,
                                         chunked_loss=True)
    files[0].write_text("{not json")  # a damaged cache file is measured again
    monkeypatch.setattr(module_figures, "_MEMO", {})
    with pytest.raises(AssertionError, match="measured again"):
        module_figures.saved_activations(cfg, precision="fp32", seq_len=T, micro_batch=2, dense_mask=False,
                                         chunked_loss=True)


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
    masks = full.activations - flex.activations  # sdpa with document masks: a (B, 1, T, T) bf16 mask per layer
    assert masks == pytest.approx(cfg.n_layer * 16 * 2048 ** 2 * 2, rel=0.05)
    with torch.device("meta"):
        model = ExoTransformer(cfg)
    to_official_pure_bf16(model)
    assert full.weights == sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    assert full.gradients == sum(p.numel() * p.element_size() for p in model.parameters())
    replicated = estimate_memory(cfg, precision="fp32", micro_batch=2, seq_len=2048, ranks=8)
    assert replicated.ddp_buckets == replicated.gradients
