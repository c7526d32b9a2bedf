import math

import pytest
import torch
from torch import nn
from train_tiny import tiny_model

from exoformer.model import ExoTransformer
from exoformer.train.config import TrainConfig
from exoformer.train.optim import Muon, build_optimizers, param_groups, polar_express


@pytest.mark.parametrize("shape", [(96, 32), (32, 80)])
def test_polar_express_singular_values_in_narrow_band(shape):
    torch.manual_seed(0)
    s = torch.linalg.svdvals(polar_express(torch.randn(*shape)))
    assert s.min() > 0.8 and s.max() < 1.2, (s.min(), s.max())


@pytest.mark.parametrize("shape", [(96, 32), (32, 80)])
def test_one_muon_step_update(shape):
    """Update = lr * sqrt(max(1, rows/cols)) * O', with ||O'||_F = ||O||_F ~ sqrt(min(rows, cols))."""
    torch.manual_seed(1)
    rows, cols = shape
    weight = nn.Parameter(torch.randn(shape) * 0.02)
    before = weight.detach().clone()
    weight.grad = torch.randn(shape)
    lr, mu = 0.01, 0.9
    Muon([weight], lr=lr, momentum=mu, weight_decay=0.0).step()
    update = (before - weight.detach()) / lr
    scale = math.sqrt(max(1.0, rows / cols))
    # Nesterov with a zero buffer: U = (1-mu)(1+mu) G; orthogonalisation ignores the scale.
    ortho = polar_express((1 - mu) * (1 + mu) * weight.grad)
    torch.testing.assert_close(update.norm(), scale * ortho.norm(), rtol=1e-4, atol=0)
    assert update.norm() / scale == pytest.approx(math.sqrt(min(rows, cols)), rel=0.1)
    s = torch.linalg.svdvals(update / scale)
    assert s.min() > 0.6 and s.max() < 1.4, (s.min(), s.max())


def test_cautious_weight_decay_only_where_update_agrees():
    """The same step with and without decay differs by exactly lr * wd * W where the update O' and W agree in
    sign, and not at all where they disagree."""
    torch.manual_seed(3)
    start = torch.randn(6, 4)
    grad = torch.randn(6, 4)
    lr, wd = 0.1, 0.5

    def step(weight_decay: float) -> torch.Tensor:
        weight = nn.Parameter(start.clone())
        weight.grad = grad.clone()
        Muon([weight], lr=lr, momentum=0.0, weight_decay=weight_decay).step()
        return weight.detach()

    plain, decayed = step(0.0), step(wd)
    update = (start - plain) / lr  # O', the same in both steps
    agree = (update * start) >= 0
    assert agree.any() and (~agree).any()  # both kinds of entries are tested
    assert (plain - decayed).abs().max() > 1e-3  # the decay did something
    torch.testing.assert_close(plain - decayed, lr * wd * start * agree, rtol=1e-5, atol=1e-6)


def test_param_groups_total_disjoint_by_rule():
    model = ExoTransformer(tiny_model())
    groups = param_groups(model)
    names = {g: {n for n, _ in ps} for g, ps in groups.items()}
    all_names = [n for n, p in model.named_parameters()]
    assert sorted(n for ns in names.values() for n in ns) == sorted(all_names)
    assert sum(len(ns) for ns in names.values()) == len(all_names)
    for name, p in model.named_parameters():
        short = name.rsplit(".", 1)[-1]
        if short.startswith("coef_"):
            assert name in names["coef"]
        elif name.startswith(("embed", "lm_head")) or p.ndim == 1:
            assert name in names["adam"], name
        else:
            assert name in names["muon"], name
    assert "anchor.proj.weight" in names["muon"]
    assert "blocks.0.attn.mix.dynamic.fc1.weight" in names["muon"]
    assert "blocks.0.attn.mix.dynamic.fc2.bias" in names["adam"]
    assert "lm_head.weight" in names["adam"] and "embed.weight" in names["adam"]


def test_param_groups_follow_the_rule_for_any_module():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Embedding(5, 4)  # an embedding under another name is still AdamW
            self.w = nn.Linear(4, 4, bias=True)
            self.coef_x = nn.Parameter(torch.ones(3, 4))  # 2-D coefficient: still the coef group
            self.frozen = nn.Parameter(torch.ones(4, 4), requires_grad=False)

    groups = {g: [n for n, _ in ps] for g, ps in param_groups(Odd()).items()}
    assert groups == {"muon": ["w.weight"], "adam": ["table.weight", "w.bias"], "coef": ["coef_x"]}


def test_muon_state_dict_round_trips_exactly():
    torch.manual_seed(0)
    model = ExoTransformer(tiny_model())
    muon, adamw = build_optimizers(model, TrainConfig())
    x = torch.randint(0, 64, (2, 16))
    for _ in range(2):
        model(x).float().square().mean().backward()
        muon.step()
        adamw.step()
    state = muon.state_dict()
    clone_model = ExoTransformer(tiny_model())
    clone_model.load_state_dict(model.state_dict())
    clone, _ = build_optimizers(clone_model, TrainConfig())
    clone.load_state_dict(state)
    for a, b in zip(muon.param_groups[0]["params"], clone.param_groups[0]["params"]):
        for key in ("momentum_buffer", "second_moment"):
            assert torch.equal(muon.state[a][key], clone.state[b][key])
    model(x).float().square().mean().backward()
    clone_model(x).float().square().mean().backward()
    muon.step()
    clone.step()
    for a, b in zip(model.parameters(), clone_model.parameters()):
        if a in muon.state:
            assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_muon_second_moment_and_scaling_follow_the_parameter_dtype(dtype):
    """bf16 weights (official-pure-bf16) get a bf16 second moment and a bf16 update, as the official muon.py."""
    torch.manual_seed(2)
    weight = nn.Parameter((torch.randn(48, 16) * 0.02).to(dtype))
    weight.grad = torch.randn(48, 16).to(dtype)
    opt = Muon([weight], lr=0.01, momentum=0.9, weight_decay=0.1)
    before = weight.detach().clone()
    opt.step()
    assert opt.state[weight]["second_moment"].dtype == opt.state[weight]["momentum_buffer"].dtype == dtype
    # the expected update, written out in the parameter's dtype
    update = (0.1 * (1 + 0.9) * weight.grad).to(dtype)
    ortho = polar_express(update).to(dtype)
    v = (0.05 * ortho.square().mean(dim=1, keepdim=True)).to(dtype)
    normed = ortho * v.clamp_min(1e-10).rsqrt()
    normed = normed * (ortho.norm() / normed.norm()) * math.sqrt(3.0)
    expected = before - 0.01 * 0.1 * before * ((normed * before) >= 0).to(dtype) - 0.01 * normed
    ulp = 2.5e-4 if dtype == torch.bfloat16 else 1e-7  # a bf16 step of a weight near 0.05; updates are ~1e-2
    torch.testing.assert_close(weight.detach(), expected, rtol=0, atol=2 * ulp)
