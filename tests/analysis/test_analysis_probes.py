"""run_probes on a hand-built fake model (known values) and on tiny real models (shapes, ablations, streaming)."""

import json
import weakref
from dataclasses import dataclass, field

import pytest
import torch
from torch import nn

from exoformer.analysis import probes
from exoformer.errors import UserError
from exoformer.model.config import ModelConfig

torch.set_num_threads(1)


# --- a fake model whose every probe value is known -------------------------------------------------


@dataclass
class FakeTrace:
    layer: int
    hidden: torch.Tensor
    attn_probs: torch.Tensor | None
    gate: torch.Tensor | None
    coefficients: dict = field(default_factory=dict)


@dataclass
class FakeInspection:
    embeddings: torch.Tensor
    layers: list
    logits: torch.Tensor


class FakeModel(nn.Module):
    """Layer i outputs (i + 2) * the embeddings; uniform causal attention; gates 0.1; lambda1 = 1, lambda2 = 2.

    It also checks the streaming contract: when it builds a layer's attention, the previous layer's
    matrix must already be freed by the consumer.
    """

    def __init__(self, n_layer=3, heads=2, d=4):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d))
        self.n_layer, self.heads, self.d = n_layer, heads, d
        self.max_alive = 0

    def inspect(self, idx, doc_starts=None, *, on_layer=None, ablate=None, attention=True):
        b, t = idx.shape
        emb = self.weight * (idx[..., None].float() + 1.0)  # every token along the same direction
        result = FakeInspection(embeddings=emb, layers=[], logits=emb)
        alive: list[weakref.ref] = []
        for i in range(self.n_layer):
            self.max_alive = max(self.max_alive, 1 + sum(r() is not None for r in alive))
            rows = torch.tril(torch.ones(t, t))
            attn = (rows / rows.sum(-1, keepdim=True)).expand(b, self.heads, t, t).clone()
            alive.append(weakref.ref(attn))
            anchor = torch.full((self.heads, self.d // self.heads), 0.0 if ablate == "anchor" else 1.0)
            trace = FakeTrace(layer=i, hidden=emb * (i + 2), attn_probs=attn,
                              gate=torch.full((b, self.heads, t, self.d // self.heads), 0.1),
                              coefficients={"v": (anchor[None, :, None], torch.full_like(anchor, 2.0)[None, :, None])})
            if on_layer is None:
                result.layers.append(trace)
            else:
                on_layer(trace)
            del trace, attn
        return result


def test_fake_model_probes_have_the_known_values():
    model = FakeModel()
    out = probes.run_probes(model, torch.randint(0, 5, (2, 6)))
    base = out["ablations"]["none"]
    harmonic = sum(1 / (i + 1) for i in range(6)) / 6
    assert base["first_token_attention"] == pytest.approx([harmonic] * 3)
    assert base["gate_mean"] == pytest.approx([0.1] * 3) and base["gate_sparsity"] == [1.0] * 3
    assert base["token_similarity_mean"] == pytest.approx([1.0] * 4) and len(base["token_similarity_std"]) == 4
    assert base["similarity_to_embeddings"] == pytest.approx([1.0] * 4)
    assert base["pca_components"] == [1] * 4  # one direction, scaled per token
    assert base["massive_activation"][1:] == pytest.approx([base["massive_activation"][0] * k for k in (2, 3, 4)])
    assert base["coefficients"]["v"]["ratio_of_means"] == pytest.approx([0.5] * 3, rel=1e-5)
    assert out["ablations"]["anchor"]["coefficients"]["v"]["anchor_mean"] == [0.0] * 3
    assert out["gated"] and out["mixing"] and out["n_layer"] == 3
    assert model.max_alive == 1  # streaming: never two attention matrices at once


def test_fake_model_non_streaming_path_keeps_every_matrix_and_gives_the_same_numbers():
    model = FakeModel()
    idx = torch.randint(0, 5, (2, 6))
    streamed = probes.run_probes(model, idx)
    model.max_alive = 0
    assert probes.run_probes(model, idx, stream=False) == streamed
    assert model.max_alive == 3


# --- tiny real models ----------------------------------------------------------------------------


def tiny(**variant):
    from exoformer.model import ExoTransformer

    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=3, n_head=2, d_model=16, vocab_size=64, seq_len=32, **variant)
    model = ExoTransformer(cfg)
    with torch.no_grad():  # the zero-initialised layers would make every block an identity
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


EXO = dict(gated=True, mix_paths=("q", "k", "v", "g"), anchor="h0", anchor_norm_paths=("q", "k", "v", "g"),
           dynamic=True)
TOKENS = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))


def test_base_model_results_have_per_layer_lengths_and_no_ablations():
    out = probes.run_probes(tiny(), TOKENS)
    base = out["ablations"]["none"]
    for key in ("first_token_attention", "attention_entropy"):
        assert len(base[key]) == 3
    for key in ("token_similarity_mean", "token_similarity_std", "similarity_to_embeddings", "pca_components",
                "pca_fraction", "massive_activation"):
        assert len(base[key]) == 4
    assert len(base["layer_similarity"]) == 4 and all(len(row) == 4 for row in base["layer_similarity"])
    assert base["similarity_to_embeddings"][0] == pytest.approx(1.0)
    assert base["gate_mean"] == probes.NO_GATE and base["coefficients"] == probes.NO_MIXING
    assert out["ablations"]["anchor"] == out["ablations"]["self"] == probes.NO_MIXING
    assert out["static_coefficients"] == probes.NO_MIXING
    json.dumps(out, allow_nan=False)
    no_attention = probes.run_probes(tiny(), TOKENS, attention=False)["ablations"]["none"]
    assert no_attention["first_token_attention"] == probes.NO_ATTENTION
    assert no_attention["token_similarity_mean"] == pytest.approx(base["token_similarity_mean"])


def test_exoformer_ablations_change_the_numbers_and_results_are_strict_json():
    model = tiny(**EXO)
    out = probes.run_probes(model, TOKENS)
    json.dumps(out, allow_nan=False)
    none, anchor, self_ = (out["ablations"][k] for k in ("none", "anchor", "self"))
    assert out["gated"] and out["mixing"]
    assert anchor["token_similarity_mean"] != pytest.approx(none["token_similarity_mean"])
    assert self_["first_token_attention"] != pytest.approx(none["first_token_attention"])
    assert none["similarity_to_embeddings"][0] == pytest.approx(1.0)
    assert set(none["coefficients"]) == {"q", "k", "v", "g"}
    assert all(len(v) == 3 for v in none["coefficients"]["v"].values())
    assert len(none["coefficients"]["v"]["ratio"][0]) == 16  # elementwise: H * d_head
    assert len(none["gate_sparsity"]) == 3
    static = out["static_coefficients"]["v"]
    lam1, lam2 = (c.detach() for c in (model.blocks[2].attn.mix.v.coef_anchor, model.blocks[2].attn.mix.v.coef_self))
    assert static["anchor_mean"][2] == pytest.approx(float(lam1.mean()))
    assert static["ratio"][2] == pytest.approx((lam1 / (lam2 + 1e-12)).reshape(-1).tolist())
    # effective = static x the dynamic scale in (0, 1), so it differs from the parameter itself
    assert 0 < none["coefficients"]["v"]["anchor_mean"][2] < static["anchor_mean"][2]


def test_streaming_equals_non_streaming_and_holds_one_attention_matrix_at_a_time(monkeypatch):
    model = tiny(**EXO)
    idx = TOKENS
    alive_at_arrival: list[int] = []
    refs: list[weakref.ref] = []
    original = probes.LayerProbe.__call__

    def watching(self, trace):
        alive_at_arrival.append(sum(r() is not None for r in refs))
        refs.append(weakref.ref(trace.attn_probs))
        original(self, trace)

    monkeypatch.setattr(probes.LayerProbe, "__call__", watching)
    streamed = probes.run_probes(model, idx, ablations=("none",))
    assert alive_at_arrival == [0, 0, 0]
    non_streamed = probes.run_probes(model, idx, ablations=("none",), stream=False)
    assert non_streamed == streamed


def test_internal_anchor_layer_zero_has_no_coefficients():
    out = probes.run_probes(tiny(mix_paths=("v",), anchor="internal"), TOKENS, ablations=("none", "anchor"))
    v = out["ablations"]["none"]["coefficients"]["v"]
    assert v["anchor_mean"][0] is None and v["anchor_mean"][1] is not None
    assert out["static_coefficients"]["v"]["anchor_mean"][0] is None
    assert "self" not in out["ablations"]


def test_bad_inputs_are_one_line_errors():
    model = tiny()
    with pytest.raises(UserError, match="did you mean 'anchor'"):
        probes.run_probes(model, TOKENS, ablations=("anchr",))
    with pytest.raises(UserError, match="model.float"):
        probes.run_probes(tiny().to(torch.bfloat16), TOKENS)
    with pytest.raises(UserError, match="token ids"):
        probes.run_probes(model, TOKENS[0])
