"""The claims table's cross-run cells: tokens-to-loss ratios interpolated on the validation curves, and the
attention-sink ratio against gated attention."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synthetic import make_run, read_table, registry, uniform


def curve(final: float, slope: float, n: int = 20) -> list[tuple[int, float]]:
    """A straight validation curve: loss = final + slope * (n - i) at tokens 100 * i."""
    return [(100 * i, final + slope * (n - i)) for i in range(1, n + 1)]


def with_sink(run: Path, value: float) -> None:
    rows = [{"spec": run.parent.name, "seed": 42, "task": "analysis", "metric": "first_token_attention_layer_mean",
             "value": value, "stderr": None, "n": 4}]
    (run / "analysis").mkdir(exist_ok=True)
    (run / "analysis" / "long.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_claims_cells_are_computed_from_the_runs(tmp_path):
    # base reaches its final 3.0 at 2,000 tokens; dynamic passes 3.0 between two logged points
    make_run(tmp_path, "base-s42", accuracies=uniform(0.5), curve=curve(3.0, 0.05))
    gated = make_run(tmp_path, "gated-s42", accuracies=uniform(0.5), curve=curve(2.9, 0.05))
    make_run(tmp_path, "dynamic-e-exoformer-s42", accuracies=uniform(0.5), curve=curve(2.58, 0.04))
    exo = make_run(tmp_path, "e-exoformer-s42", accuracies=uniform(0.5), curve=curve(2.7, 0.05))
    with_sink(Path(gated), 0.30)
    with_sink(Path(exo), 0.12)
    reg = registry()
    built = read_table(tmp_path, "claims", reg=reg)
    rows = {r.id: r for r in built.table.rows}
    ratio = built.cell(rows["dynamic-e-exoformer"], "tokens_to_base_loss_ratio").value
    # dynamic: loss 2.58 + 0.04 (20 - i) = 3.0 at i = 9.5 -> 950 tokens; base reaches 3.0 at 2,000
    assert ratio == pytest.approx(2000 / 950)
    assert built.cell(rows["exoformer"], "attention_sink_ratio_vs_gated").value == pytest.approx(0.30 / 0.12)
    assert any("running median of 3" in note and "geometric mean" in note for note in built.notes)
    # gated reaches its final 2.9 at 2,000 tokens, dynamic at i = 12 (1,200 tokens)
    assert built.cell(rows["dynamic-e-exoformer"], "tokens_to_gated_loss_ratio").value == pytest.approx(2000 / 1200)


def test_smoke_curves_have_at_least_20_points():
    spec = registry().resolve("dynamic-e-exoformer-s42", preset="smoke")
    points = len({s for s in range(1, spec.train.steps + 1) if s % spec.train.val_every == 0 or s == spec.train.steps})
    assert points >= 20
