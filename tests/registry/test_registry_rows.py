"""Registry rows as the sources describe them: 1B ungated rows deeper at equal size, the H5 fc2-init ablation,
and Table 1's static H- and S-ExoFormer rows."""

from __future__ import annotations

import pytest
import torch

from exoformer.budget.cost import compute_params
from exoformer.registry.registry import Registry
from exoformer.model import ExoTransformer


@pytest.fixture(scope="module")
def registry():
    return Registry()


def test_1b_ungated_rows_are_deeper_at_about_the_gated_size(registry):
    for ungated, gated in (("1b-base", "1b-gated"), ("1b-resformer", "1b-gated-resformer"),
                           ("ladder-1b-base-s42", "ladder-1b-gated-s42")):
        u, g = registry.resolve(ungated), registry.resolve(gated)
        assert u.model.n_layer > g.model.n_layer and not u.model.gated and g.model.gated
        assert abs(compute_params(u) - compute_params(g)) / compute_params(g) < 0.01


def test_table1_holds_the_static_h_and_s_exoformer_rows(registry):
    rows = {r.id: r for r in registry.tables["table1"].rows}
    assert {"h-exoformer", "s-exoformer"} <= set(rows)
    assert registry.resolve(rows["h-exoformer"].specs[0]).model.granularity == "headwise"
    assert registry.resolve(rows["s-exoformer"].specs[0]).model.granularity == "scalar"
    assert "[WEB]" in registry.tables["table1"].paper_ref


def test_the_h5_ablation_draws_the_dynamic_fc2_weight_as_the_official_code(registry):
    spec = registry.resolve("dynamic-e-exoformer-fc2-official-s42", preset="smoke")
    ours = registry.resolve("dynamic-e-exoformer-s42", preset="smoke")
    assert spec.model.dynamic_fc2_init == "official" and ours.model.dynamic_fc2_init == "zero"
    assert spec.hash != ours.hash
    rows = {r.id for r in registry.tables["dynamic-fc2-init"].rows}
    assert rows == {"dynamic-e-exoformer", "fc2-official"}
    torch.manual_seed(0)
    official = ExoTransformer(spec.model)
    zero = ExoTransformer(ours.model)
    fc2 = [m.fc2 for m in official.modules() if type(m).__name__ == "DynamicCoefficients"]
    assert fc2 and all(0.015 < float(f.weight.detach().std()) < 0.025 and not f.bias.any() for f in fc2)
    assert all(not m.fc2.weight.any() for m in zero.modules() if type(m).__name__ == "DynamicCoefficients")
