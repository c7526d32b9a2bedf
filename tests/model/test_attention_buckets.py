"""FlexAttention is the paper presets' kernel on CUDA ('auto'); its causal mask is built once per length, and
scoring pads batches to a few shapes so that the compiled kernel is not recompiled per request length."""

import random

import torch
from torch.nn.attention.flex_attention import flex_attention

from exoformer.eval.scoring import LENGTH_BUCKETS, Scorer, padded_length
from exoformer.registry.registry import Registry
from exoformer.model import ExoTransformer, variant_config
from exoformer.model import model as model_mod
from exoformer.model.config import resolve_attention


def test_paper_presets_attend_with_flex_on_cuda_and_sdpa_elsewhere():
    spec = Registry().resolve("e-exoformer-s42")  # the 450m preset
    assert spec.model.attention == "auto"
    assert resolve_attention("auto", "cuda") == "flex" and resolve_attention("auto", "cpu") == "sdpa"
    assert resolve_attention("sdpa", "cuda") == "sdpa"  # still selectable
    smoke = Registry().resolve("e-exoformer-s42", preset="smoke", overrides=["model.attention=sdpa"])
    assert smoke.hash != Registry().resolve("e-exoformer-s42", preset="smoke", overrides=["model.attention=flex"]).hash


def test_the_causal_block_mask_is_built_once_per_length():
    first = model_mod.build_mask(None, 64, torch.device("cpu"), "flex").block
    assert model_mod.build_mask(None, 64, torch.device("cpu"), "flex").block is first
    assert model_mod.build_mask(None, 128, torch.device("cpu"), "flex").block is not first


def test_bucket_widths_halve_from_the_context():
    assert [padded_length(n, 256) for n in (1, 8, 9, 100, 128, 129, 256)] == [8, 8, 16, 128, 128, 256, 256]


def test_flex_scoring_uses_a_few_shapes_and_padding_changes_no_log_likelihood(monkeypatch):
    torch.manual_seed(0)
    config = variant_config("e-exoformer", "tiny", seq_len=256, attention="flex")
    flex = ExoTransformer(config).eval()
    with torch.no_grad():
        for p in flex.parameters():
            p.normal_(0, 0.2)
    shapes = set()

    def recording_flex(q, k, v, block_mask):
        shapes.add(tuple(q.shape))
        return flex_attention(q, k, v, block_mask=block_mask)  # eager on CPU: the shapes are what matters

    monkeypatch.setattr(model_mod, "_compiled_flex", lambda: recording_flex)
    rng = random.Random(0)
    pairs = [([rng.randrange(1, 255) for _ in range(rng.randrange(1, 240))],
              [rng.randrange(1, 255) for _ in range(rng.randrange(1, 6))]) for _ in range(40)]
    bucketed = Scorer(flex, pad_id=0, device="cpu").score(pairs, batch_size=4)
    assert len(shapes) <= LENGTH_BUCKETS and all(shape[0] == 4 for shape in shapes), shapes
    lengths = {min(len(c) + len(t), 257) - 1 for c, t in pairs}
    assert len(lengths) > 3 * LENGTH_BUCKETS  # without buckets, one compiled shape per distinct batch width
    plain = Scorer(flex, pad_id=0, device="cpu")
    plain.bucketed = False
    unpadded = plain.score(pairs, batch_size=4)
    for (a, greedy_a), (b, greedy_b) in zip(bucketed, unpadded):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(b)) and greedy_a == greedy_b
