"""Model equivalences that can fail: the paper's definitions (section 3) against the code's behaviour."""

import pytest
import torch

from exoformer.model import ExoTransformer, variant_config
from exoformer.model.model import PathCoefficients

torch.set_num_threads(1)
VOCAB, T = 256, 24


def randomized(cfg, seed=0):
    """A model with every weight random (zero-init layers would hide most paths), coefficients kept."""
    torch.manual_seed(seed)
    model = ExoTransformer(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "coef_" not in name:
                p.copy_(torch.randn_like(p) * 0.2 + (1.0 if name.endswith("norm.weight") else 0.0))
    return model.eval()


def tokens(batch=2, seq=T, seed=1):
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def set_coefficients(model, anchor=None, own=None):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, PathCoefficients):
                if anchor is not None:
                    m.coef_anchor.fill_(anchor)
                if own is not None:
                    m.coef_self.fill_(own)


def copy_shared(src, dst):
    """Copy every tensor that `dst` has from `src` (same names); the rest of dst stays as is."""
    src_state = src.state_dict()
    dst.load_state_dict({k: src_state.get(k, v) for k, v in dst.state_dict().items()})


@pytest.mark.parametrize("variant", ["e-exoformer", "e-nuresformer", "gated-resformer", "e-exoformer-vg",
                                     "s-nuresformer-qknorm", "static-e-exoformer-from-h1"])
def test_anchor_zero_self_one_equals_unmixed(variant):
    mixed = randomized(variant_config(variant, "tiny", n_layer=3))
    plain = ExoTransformer(variant_config("gated", "tiny", n_layer=3))
    copy_shared(mixed, plain)
    set_coefficients(mixed, anchor=0.0, own=1.0)
    idx = tokens()
    torch.testing.assert_close(mixed(idx), plain.eval()(idx), rtol=1e-5, atol=1e-5)
    set_coefficients(mixed, anchor=0.3, own=1.0)  # and the test can fail: the anchor term changes logits
    assert (mixed(idx) - plain(idx)).abs().max() > 1e-3


def test_mixing_math_for_one_layer_by_hand():
    """Layer 0 of an exoformer: q~ = c1 * RMSNorm_a(E W_q) + c2 * X W_q, by hand."""
    cfg = variant_config("e-exoformer", "tiny", n_layer=1)
    model = randomized(cfg)
    with torch.no_grad():
        for p in ("q", "k", "v", "g"):
            getattr(model.blocks[0].attn.mix, p).coef_anchor.normal_()
            getattr(model.blocks[0].attn.mix, p).coef_self.normal_()
    idx = tokens(batch=1, seq=5)
    e = model.embed(idx)
    x = model.blocks[0].attn_norm(e)
    d, H, dh = cfg.d_model, cfg.n_head, cfg.d_head
    anchor_all = e @ model.anchor.proj.weight.T
    own_all = x @ model.blocks[0].attn.qkv.weight.T
    mix = model.blocks[0].attn.mix
    for i, p in enumerate("qkvg"):
        a = anchor_all[..., i * d:(i + 1) * d].view(1, 5, H, dh)
        a = a / torch.sqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * model.anchor.norms[p].weight
        s = own_all[..., i * d:(i + 1) * d].view(1, 5, H, dh)
        expected = getattr(mix, p).coef_anchor * a + getattr(mix, p).coef_self * s
        plain = mix(x, own_all.unflatten(-1, (4, H, dh)), model.anchor(e))[0][:, :, i]
        torch.testing.assert_close(plain, expected, rtol=1e-5, atol=1e-5)
        fused = mix.project_and_mix(x, model.blocks[0].attn.qkv.weight, model.anchor(e))[0][:, :, i]
        torch.testing.assert_close(fused, expected, rtol=1e-5, atol=1e-5)


def test_dynamic_at_init_equals_static_half():
    dyn = randomized(variant_config("dynamic-e-exoformer", "tiny", n_layer=3))
    for block in dyn.blocks:  # the MLP's last layer at its init (zero), its first layer random
        torch.nn.init.zeros_(block.attn.mix.dynamic.fc2.weight)
        torch.nn.init.zeros_(block.attn.mix.dynamic.fc2.bias)
    set_coefficients(dyn, anchor=1.0, own=1.0)  # dynamic init: 2 x coef_init
    static = ExoTransformer(variant_config("e-exoformer", "tiny", n_layer=3))
    copy_shared(dyn, static)
    set_coefficients(static, anchor=0.5, own=0.5)
    idx = tokens()
    torch.testing.assert_close(dyn(idx), static.eval()(idx), rtol=1e-5, atol=1e-5)
    fresh = ExoTransformer(variant_config("dynamic-e-exoformer", "tiny"))
    assert all(bool((m.coef_anchor == 1.0).all()) for m in fresh.modules() if isinstance(m, PathCoefficients))
    assert all(b.attn.mix.dynamic.fc2.weight.abs().sum() == 0 for b in fresh.blocks)  # not hazard H5


def test_nuresformer_with_identity_coefficients_equals_gated():
    nu = randomized(variant_config("e-nuresformer", "tiny", n_layer=3))
    set_coefficients(nu, anchor=0.0, own=1.0)
    gated = ExoTransformer(variant_config("gated", "tiny", n_layer=3))
    copy_shared(nu, gated)
    idx = tokens()
    torch.testing.assert_close(nu(idx), gated.eval()(idx), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["dynamic-e-exoformer", "e-nuresformer", "base"])
def test_causality(variant):
    model = randomized(variant_config(variant, "tiny", n_layer=3))
    idx = tokens()
    changed = idx.clone()
    changed[:, 10:] = (changed[:, 10:] + 7) % VOCAB
    a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10], rtol=1e-5, atol=1e-5)
    assert (a[:, 10:] - b[:, 10:]).abs().max() > 1e-3


@pytest.mark.parametrize("variant", ["dynamic-e-exoformer", "e-nuresformer"])
def test_document_masking(variant):
    model = randomized(variant_config(variant, "tiny", n_layer=3))
    idx = tokens()
    starts = torch.zeros_like(idx, dtype=torch.bool)
    starts[:, 0] = True
    starts[:, 9] = True  # document 2 = positions 9..23
    changed = idx.clone()
    changed[:, :9] = (changed[:, :9] + 5) % VOCAB  # change only the previous document
    a, b = model(idx, starts), model(changed, starts)
    torch.testing.assert_close(a[:, 9:], b[:, 9:], rtol=1e-5, atol=1e-5)
    assert (model(idx)[:, 9:] - model(changed)[:, 9:]).abs().max() > 1e-3  # without the mask it leaks
    # a document mask with a single document is plain causal attention
    one_doc = torch.zeros_like(starts)
    one_doc[:, 0] = True
    torch.testing.assert_close(model(idx, one_doc), model(idx), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("granularity,per_coef", [("elementwise", 32), ("headwise", 2), ("scalar", 1)])
def test_granularity_coefficient_counts(granularity, per_coef):
    cfg = variant_config("e-exoformer", "tiny", granularity=granularity)  # H=2, dh=16
    model = ExoTransformer(cfg)
    coefs = {n: p for n, p in model.named_parameters() if n.rsplit(".", 1)[-1].startswith("coef_")}
    assert len(coefs) == cfg.n_layer * 4 * 2
    assert all(p.numel() == per_coef for p in coefs.values())
    assert "blocks.1.attn.mix.v.coef_anchor" in coefs and "blocks.1.attn.mix.v.coef_self" in coefs


@pytest.mark.parametrize("variant,first", [("dynamic-e-exoformer", 0), ("static-e-exoformer-from-h2", 2)])
def test_gradients_reach_anchor_from_every_mixing_layer(variant, first):
    model = randomized(variant_config(variant, "tiny", n_layer=4))
    outputs = []
    hooks = [b.attn.register_forward_hook(lambda m, i, o: outputs.append(o[0])) for b in model.blocks]
    model(tokens())
    for h in hooks:
        h.remove()
    weight = model.anchor.proj.weight
    for layer, out in enumerate(outputs):
        (grad,) = torch.autograd.grad(out.sum(), weight, retain_graph=True, allow_unused=True)
        reached = grad is not None and grad.abs().sum() > 0
        assert reached == (layer >= first), layer


def test_bf16_autocast_agrees_with_fp32():
    torch.manual_seed(0)
    model = ExoTransformer(variant_config("dynamic-e-exoformer", "tiny", n_layer=3)).eval()
    with torch.no_grad():  # the init's zero layers made non-zero at the init scale, so every path counts
        for name, p in model.named_parameters():
            if p.abs().sum() == 0:
                p.normal_(0, 0.02 if p.dim() > 1 else 0.5)
    idx = tokens()
    ref = model(idx)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(idx)
    assert low.dtype == torch.bfloat16
    err = (low.float() - ref).norm() / ref.norm()
    assert 0 < err < 0.02, err


def test_meta_device_build_and_materialise():
    cfg = variant_config("dynamic-e-exoformer", "tiny")
    with torch.device("meta"):
        model = ExoTransformer(cfg)
    assert model.lm_head.weight.is_meta
    model.to_empty(device="cpu")
    model.init_weights()
    ref = ExoTransformer(cfg)
    torch.testing.assert_close(model.rope.cos, ref.rope.cos)
    assert torch.isfinite(model(tokens())).all()


# ----------------------------------------------------------------------------- inspection

@pytest.mark.parametrize("variant", ["dynamic-e-exoformer", "e-nuresformer", "base"])
def test_inspection_logits_equal_forward(variant):
    model = randomized(variant_config(variant, "tiny", n_layer=3))
    idx = tokens()
    starts = torch.zeros_like(idx, dtype=torch.bool)
    starts[:, 0] = starts[:, 12] = True
    for doc in (None, starts):
        ins = model.inspect(idx, doc)
        torch.testing.assert_close(ins.logits, model(idx, doc), rtol=1e-4, atol=1e-4)
        assert len(ins.layers) == 3 and ins.embeddings.shape == (2, T, 32)
        probs = ins.layers[1].attn_probs
        assert probs.dtype == torch.float32 and probs.shape == (2, 2, T, T)
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, 2, T))
        assert probs.triu(1).abs().sum() == 0
        if doc is not None:
            assert probs[:, :, 12:, :12].abs().sum() == 0


def test_inspection_traces_and_streaming():
    model = randomized(variant_config("dynamic-e-exoformer", "tiny", n_layer=3))
    idx = tokens()
    ins = model.inspect(idx)
    trace = ins.layers[2]
    assert trace.gate.shape == (2, 2, T, 16) and 0 < trace.gate.min() and trace.gate.max() < 1
    anchor_coef, self_coef = trace.coefficients["v"]
    assert torch.broadcast_shapes(anchor_coef.shape, (2, 2, T, 16)) == (2, 2, T, 16)
    assert anchor_coef.shape[2] == T  # dynamic: varies per token
    seen = []
    streamed = model.inspect(idx, on_layer=lambda t: seen.append((t.layer, t.hidden.clone())))
    assert streamed.layers == [] and [s[0] for s in seen] == [0, 1, 2]
    torch.testing.assert_close(seen[2][1], trace.hidden)
    no_probs = model.inspect(idx, attention=False)
    assert no_probs.layers[0].attn_probs is None
    torch.testing.assert_close(no_probs.logits, ins.logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", ["dynamic-e-exoformer", "e-nuresformer"])
def test_ablate_anchor_equals_zero_anchor_coefficients(variant):
    model = randomized(variant_config(variant, "tiny", n_layer=3))
    idx = tokens()
    ablated = model.inspect(idx, ablate="anchor").logits
    set_coefficients(model, anchor=0.0)
    torch.testing.assert_close(ablated, model(idx), rtol=1e-4, atol=1e-4)


def test_ablate_self_equals_zero_self_coefficients():
    model = randomized(variant_config("e-exoformer", "tiny", n_layer=3))
    idx = tokens()
    ablated = model.inspect(idx, ablate="self")
    assert float(ablated.layers[1].coefficients["q"][1].abs().sum()) == 0
    set_coefficients(model, own=0.0)
    torch.testing.assert_close(ablated.logits, model(idx), rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- plain vs fused mixing

@pytest.mark.parametrize("variant", ["dynamic-e-exoformer", "e-exoformer", "e-exoformer-vg", "e-nuresformer",
                                     "s-nuresformer-qknorm", "static-e-exoformer-from-h1"])
def test_fused_mixing_equals_plain_eq10_forward_and_gradients(variant):
    cfg = variant_config(variant, "tiny", n_layer=3)
    plain = ExoTransformer(cfg, fused_mixing=False)
    fused = ExoTransformer(cfg, fused_mixing=True)
    randomized_coefficients = randomized(cfg)
    with torch.no_grad():
        for p in randomized_coefficients.parameters():
            if p.requires_grad and p.dim() <= 2 and p.numel() <= 64:
                p.add_(torch.randn_like(p) * 0.3)  # coefficients and gains away from their init
    plain.load_state_dict(randomized_coefficients.state_dict())
    fused.load_state_dict(randomized_coefficients.state_dict())
    idx = tokens()
    starts = torch.zeros_like(idx, dtype=torch.bool)
    starts[:, 0] = starts[:, 11] = True
    out_plain, out_fused = plain(idx, starts), fused(idx, starts)
    torch.testing.assert_close(out_fused, out_plain, rtol=1e-5, atol=1e-5)
    out_plain.square().mean().backward()
    out_fused.square().mean().backward()
    grads_plain = dict(plain.named_parameters())
    for name, p in fused.named_parameters():
        g_plain, g_fused = grads_plain[name].grad, p.grad
        assert (g_plain is None) == (g_fused is None), name
        if g_plain is not None:
            torch.testing.assert_close(g_fused, g_plain, rtol=1e-4, atol=1e-6, msg=name)
    assert any("coef_" in n and p.grad.abs().sum() > 0 for n, p in fused.named_parameters())


@pytest.mark.parametrize("variant", ["dynamic-e-exoformer", "e-nuresformer"])
def test_fused_and_plain_inspection_agree(variant):
    cfg = variant_config(variant, "tiny", n_layer=3)
    plain = ExoTransformer(cfg, fused_mixing=False)
    plain.load_state_dict(randomized(cfg).state_dict())
    fused = ExoTransformer(cfg)
    fused.load_state_dict(plain.state_dict())
    idx = tokens()
    a, b = plain.inspect(idx), fused.inspect(idx)
    for la, lb in zip(a.layers, b.layers):
        assert la.coefficients.keys() == lb.coefficients.keys()
        for p in la.coefficients:
            for ca, cb in zip(la.coefficients[p], lb.coefficients[p]):
                torch.testing.assert_close(ca.expand(2, 2, T, 16), cb.expand(2, 2, T, 16))
    torch.testing.assert_close(a.logits, b.logits, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- hidden states

@pytest.mark.parametrize("variant", ["dynamic-e-exoformer", "base"])
def test_forward_is_the_head_of_the_final_normed_hidden_states(variant):
    model = randomized(variant_config(variant, "tiny", n_layer=3))
    idx = tokens()
    starts = torch.zeros_like(idx, dtype=torch.bool)
    starts[:, 0] = starts[:, 5] = True
    for doc in (None, starts):
        hidden = model.hidden_states(idx, doc)
        assert hidden.shape == (2, T, 32)
        torch.testing.assert_close(model(idx, doc), model.lm_head(hidden))
        last = model.inspect(idx, doc, attention=False).layers[-1].hidden
        torch.testing.assert_close(hidden, model.final_norm(last), rtol=1e-5, atol=1e-5)
    assert isinstance(model.lm_head, torch.nn.Linear)
