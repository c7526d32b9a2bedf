"""The attention kernel is the explicit setting `ModelConfig.attention` (sdpa | flex), never a run-time guess.

FlexAttention runs on CPU without gradients, so its block mask and its numbers are checked here against SDPA
on the real kernel; training with flex needs CUDA, and CPU training with it is a one-line UserError.
"""

import pytest
import torch

from exoformer.errors import UserError
from exoformer.registry.hashing import semantic_hash
from exoformer.model import ExoTransformer, ModelConfig, variant_config
from exoformer.model import model as model_mod

torch.set_num_threads(1)
VOCAB, T = 256, 32  # (T = 24 gets wrong numbers from compiled CPU FlexAttention, torch 2.13)


def pair(variant="dynamic-e-exoformer"):
    """The same weights under both kernels; every zero-init layer made random so each path counts."""
    torch.manual_seed(0)
    sdpa = ExoTransformer(variant_config(variant, "tiny", n_layer=3)).eval()
    with torch.no_grad():
        for p in sdpa.parameters():
            p.normal_(0, 0.2)
    flex = ExoTransformer(variant_config(variant, "tiny", n_layer=3, attention="flex")).eval()
    flex.load_state_dict(sdpa.state_dict())
    return sdpa, flex


def inputs():
    idx = torch.randint(0, VOCAB, (2, T), generator=torch.Generator().manual_seed(1))
    starts = torch.zeros(2, T, dtype=torch.bool)
    starts[:, 0] = True
    starts[0, 7] = starts[1, 20] = True
    return idx, starts


def test_unknown_attention_is_a_user_error_naming_the_field():
    with pytest.raises(UserError) as e:
        ModelConfig(attention="flash")
    assert e.value.where == "model.attention" and "flash" in str(e.value)


def test_attention_enters_the_spec_hash():
    sdpa, flex = ModelConfig(), ModelConfig(attention="flex")
    assert sdpa.to_dict()["attention"] == "sdpa" and flex.to_dict()["attention"] == "flex"
    assert semantic_hash({"model": sdpa.to_dict()}) != semantic_hash({"model": flex.to_dict()})
    assert ModelConfig.from_dict(flex.to_dict()) == flex


@torch.no_grad()
def test_flex_equals_sdpa_with_and_without_documents():
    sdpa, flex = pair()
    idx, starts = inputs()
    for doc in (None, starts):
        torch.testing.assert_close(flex(idx, doc), sdpa(idx, doc), rtol=1e-4, atol=1e-4)
    # the test can fail: the document mask matters for these inputs
    assert (flex(idx, starts) - sdpa(idx)).abs().max() > 1e-3


def test_the_setting_decides_the_kernel(monkeypatch):
    """flex calls the FlexAttention kernel in every layer; sdpa never does, documents or not."""
    calls = []
    real = model_mod._compiled_flex()

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(model_mod, "_compiled_flex", lambda: counting)
    sdpa, flex = pair("e-exoformer")
    idx, starts = inputs()
    with torch.no_grad():
        sdpa(idx, starts)
        assert calls == []
        flex(idx, starts)
        assert len(calls) == 3


def test_flex_training_on_cpu_is_a_one_line_user_error():
    _, flex = pair("gated")
    idx, starts = inputs()
    with pytest.raises(UserError) as e:
        flex.train()(idx, starts).sum().backward()
    assert e.value.where == "model.attention" and "\n" not in str(e.value) and "sdpa" in e.value.fix
