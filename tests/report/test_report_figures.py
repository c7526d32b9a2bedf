"""`figure`: PNG + PDF from synthetic run directories; data-efficiency ratios; lambda ratios; dispatch."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from synthetic import make_run, registry, uniform  # noqa: E402

from exoformer.cli import main  # noqa: E402
from exoformer.errors import UserError  # noqa: E402
from exoformer.report import figures  # noqa: E402
from exoformer.train.checkpoint import save_checkpoint  # noqa: E402

ROWS = ("base", "gated", "resformer", "gated-resformer", "e-nuresformer", "e-exoformer", "dynamic-e-exoformer")


def _curve(scale: float) -> list[tuple[int, float]]:
    """loss(t) = 3 + 4 / (1 + t * scale / 1000): a model with scale s reaches any loss s times sooner."""
    return [(t, 3 + 4 / (1 + t * scale / 1000)) for t in range(0, 20001, 1000)]


def test_tokens_to_reach_interpolates():
    assert figures.tokens_to_reach([0, 10, 20], [5.0, 4.0, 3.0], 3.5) == pytest.approx(15.0)
    assert figures.tokens_to_reach([0, 10], [5.0, 4.0], 3.0) is None


def test_efficiency_ratio_recovers_a_known_speed_up():
    def curve(scale):
        pts = _curve(scale)
        return [p[0] for p in pts], [p[1] for p in pts]

    ratios = figures.efficiency_ratios({"base": curve(1.0), "fast": curve(1.84)})
    assert ratios["base"]["base"] == pytest.approx(1.0)
    assert ratios["base"]["fast"] == pytest.approx(1.84, rel=0.03)  # linear interpolation between log points


def test_curves_and_bars_written_as_png_and_pdf(tmp_path, capsys):
    runs = tmp_path / "runs"
    for i, row in enumerate(ROWS):
        make_run(runs, f"{row}-s42", preset="smoke", accuracies=uniform(0.3 + 0.02 * i), curve=_curve(1 + 0.1 * i))
    out = tmp_path / "figs"
    for name in ("val-loss-table1", "accuracy-bars-table1"):
        assert main(["figure", name, "--preset", "smoke", "--runs-dir", str(runs), "--out", str(out)]) == 0
        for suffix in ("png", "pdf"):
            path = out / f"{name}.{suffix}"
            assert path.is_file() and path.stat().st_size > 1000
    assert (out / "val-loss-table1.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "val-loss-table1.pdf").read_bytes()[:4] == b"%PDF"
    ratios = json.loads((out / "val-loss-table1.ratios.json").read_text())
    assert ratios["base"]["Dynamic E-ExoFormer"] == pytest.approx(1.6, rel=0.03)


def _lambda_run(root: Path, spec: str, *, mix_paths, granularity="elementwise", anchor="h0") -> Path:
    n_layer, n_head, d_model = 3, 2, 8
    run_dir = make_run(root, spec, preset="smoke", accuracies=None, ppl=None, state="RUNNING")
    shape = {"elementwise": (n_head, d_model // n_head), "headwise": (n_head,), "scalar": ()}[granularity]
    first = 1 if anchor == "internal" else 0
    state = {}
    for layer in range(first, n_layer):
        for path in mix_paths:
            state[f"blocks.{layer}.attn.mix.{path}.coef_anchor"] = torch.full(shape, 0.5 * (layer + 1))
            state[f"blocks.{layer}.attn.mix.{path}.coef_self"] = torch.full(shape, 0.5)
    config = {"n_layer": n_layer, "n_head": n_head, "d_model": d_model, "mix_paths": list(mix_paths),
              "granularity": granularity, "dynamic": False, "anchor": anchor}
    save_checkpoint(run_dir / "checkpoints", 10, {"model": state, "model_config": config}, keep=1)
    return run_dir


def test_lambda_ratios_shapes_nan_rows_and_unmixed_paths(tmp_path):
    run_dir = _lambda_run(tmp_path, "e-nuresformer-vg-s42", mix_paths=("v", "g"), anchor="internal")
    state = torch.load(next((run_dir / "checkpoints").glob("*.pt")), weights_only=True)
    ratios = figures.lambda_ratios(state["model"], state["model_config"])
    assert ratios["q"] is None and ratios["k"] is None
    v = ratios["v"]
    assert v.shape == (3, 8)
    assert all(math.isnan(x) for x in v[0])  # layer 0 does not mix (internal anchor)
    assert v[2, 0] == pytest.approx(3.0)


def test_lambda_heatmaps_written_for_each_run(tmp_path):
    runs = tmp_path / "runs"
    _lambda_run(runs, "e-exoformer-s42", mix_paths=("q", "k", "v", "g"))
    _lambda_run(runs, "h-exoformer-s42", mix_paths=("q", "k", "v", "g"), granularity="headwise")
    _lambda_run(runs, "s-exoformer-s42", mix_paths=("v", "g"), granularity="scalar")
    written = figures.draw(registry(), "lambda-heatmaps", runs_root=runs, out_dir=tmp_path / "f", preset="smoke")
    names = sorted(p.name for p in written)
    assert names == sorted(f"lambda-heatmaps-{s}-s42.{x}" for s in ("e-exoformer", "h-exoformer", "s-exoformer")
                           for x in ("png", "pdf"))


def test_colour_limits_are_percentiles_of_finite_values():
    import numpy as np

    values = np.array([[np.nan, *range(100)], [np.nan, 1e9, *range(99)]], dtype=float)
    lo, hi = figures.colour_limits(values)
    assert lo == pytest.approx(np.percentile(values[np.isfinite(values)], 1))
    assert hi < 1e9


def test_figure_without_runs_and_unknown_figure_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="no runs for figure"):
        figures.draw(registry(), "val-loss-table1", runs_root=tmp_path, out_dir=tmp_path / "f", preset="smoke")
    with pytest.raises(UserError, match="did you mean"):
        figures.draw(registry(), "val-loss-tabel1", runs_root=tmp_path, out_dir=tmp_path / "f")


def test_analysis_kinds_dispatch_to_analysis_plots(tmp_path, monkeypatch):
    calls = []

    class Fake:
        @staticmethod
        def plot_attention_sink(declaration, runs, out_dir):
            calls.append((declaration["id"], [r[0] for r in runs], out_dir))
            return []

    monkeypatch.setitem(sys.modules, "exoformer.report.analysis_plots", Fake)
    make_run(tmp_path, "base-s42", preset="smoke", accuracies=uniform(0.3))
    figures.draw(registry(), "attention-sink", runs_root=tmp_path, out_dir=tmp_path / "f", preset="smoke")
    assert calls == [("attention-sink", ["base-s42"], tmp_path / "f")]
    with pytest.raises(UserError, match="figure kind token-similarity not available"):
        figures.draw(registry(), "token-similarity", runs_root=tmp_path, out_dir=tmp_path / "f", preset="smoke")


def test_report_table_gives_the_table_and_its_curve_and_bar_figures(tmp_path):
    from exoformer.report.summary import report_table, table_figures

    assert set(table_figures(registry(), "table1")) == {"val-loss-table1", "accuracy-bars-table1"}
    runs = tmp_path / "runs"
    make_run(runs, "base-s42", preset="smoke", accuracies=uniform(0.4), curve=_curve(1.0))
    text, written = report_table(registry(), "table1", runs_root=runs, preset="smoke", figures_dir=tmp_path / "f")
    assert "| Base Transformer |" in text and "not run" in text
    assert {p.name for p in written} >= {"val-loss-table1.png", "accuracy-bars-table1.pdf"}
