"""Figures fit for the report and a paper: one label and colour per model, λ maps centred at ratio 1, legends
outside the data, the paper's data-efficiency claim beside ours in the title."""

from __future__ import annotations


import pytest


from synthetic import make_run, registry, smoke_runs, uniform

from exoformer.report.figures import analysis_plots
from exoformer.report.figures import draw as figures
from exoformer.report.figures import style
from exoformer.report.reading.selection import Selection


def test_one_label_and_colour_per_model_whatever_the_seed():
    reg = registry()
    assert style.style_of(reg, "e-exoformer-s42") == style.style_of(reg, "e-exoformer-s1337") == \
        style.style_of(reg, "e-exoformer")
    assert style.label_of(reg, "gated-s42") == "Gated Attention"
    colours = [m.colour for m in style.models(reg).values()]
    assert len(colours) == 11 and len(set(colours)) == len(colours)
    assert style.colour_of(reg, "some-new-model-s42") == style.colour_of(reg, "some-new-model-s7")  # by name
    assert style.label_of(reg, "some-new-model", "Its row label") == "Its row label"


@pytest.mark.parametrize("limits", [(0.6, 1.9), (1.2, 3.0), (0.1, 0.4), (-2.0, 0.5), None])
def test_lambda_colour_map_is_centred_at_ratio_one(limits):
    norm = figures.ratio_norm(limits)
    assert float(norm(style.NEUTRAL_RATIO)) == pytest.approx(0.5)
    if limits:
        assert norm.vmin <= limits[0] and norm.vmax >= limits[1]


def test_figures_label_specs_by_model_not_by_spec_id(tmp_path):
    runs = tmp_path / "runs"
    for spec in ("gated-s42", "e-exoformer-s42", "base-s42", "base-s1337"):
        make_run(runs, spec, preset="smoke", accuracies=uniform(0.3))
    reg = registry()
    gate = {spec: label for spec, label, _ in figures.figure_runs(reg, reg.figures["gate-sparsity"], runs,
                                                                   preset="smoke")}
    assert gate == {"gated-s42": "Gated Attention", "e-exoformer-s42": "E-ExoFormer"}
    sink = {spec: label for spec, label, _ in figures.figure_runs(reg, reg.figures["attention-sink"], runs,
                                                                   preset="smoke")}
    assert sink["base-s42"] == sink["base-s1337"] == "Base Transformer"  # seeds of one model: one line


def test_the_papers_efficiency_claims_and_ours_share_the_title(tmp_path):
    reg = registry()
    figure = reg.figures["val-loss-table1"]
    claimed = [(claim.id, metric.id, row.id) for claim, metric, row in figures.efficiency_claims(reg, figure)]
    assert claimed == [("data-efficiency-vs-base", "tokens_to_base_loss_ratio", "dynamic-e-exoformer"),
                       ("data-efficiency-vs-gated", "tokens_to_gated_loss_ratio", "dynamic-e-exoformer")]
    assert figures.efficiency_claims(reg, reg.figures["val-loss-1b"]) == []  # claimed of the 450M runs
    # base reaches its final 3.0 at 2,000 tokens, dynamic at 950 (linear between logged points): 2.11x; no gated run
    make_run(tmp_path, "base-s42", accuracies=uniform(0.5),
             curve=[(100 * i, 3.0 + 0.05 * (20 - i)) for i in range(1, 21)])
    make_run(tmp_path, "dynamic-e-exoformer-s42", accuracies=uniform(0.5),
             curve=[(100 * i, 2.58 + 0.04 * (20 - i)) for i in range(1, 21)])
    lines = figures.efficiency_title_lines(Selection.of_root(reg, tmp_path), figure, lambda n: style.label_of(reg, n))
    assert lines == ["Dynamic E-ExoFormer reaches Base Transformer's final loss with fewer tokens: paper 1.84x, "
                     "ours 2.11x whole run, 2.11x stable phase (one seed: no interval)",
                     "Dynamic E-ExoFormer reaches Gated Attention's final loss with fewer tokens: paper ~1.5x, "
                     "ours not run"]
    assert "1.84" not in figure.title  # the claim is data, not title text


def _captured(monkeypatch, module, name):
    """Run a plot with its save function replaced, returning the matplotlib figure it would have written."""
    seen = []

    def keep(fig, out_dir, stem):
        fig.canvas.draw()
        seen.append(fig)
        return []

    monkeypatch.setattr(module, name, keep)
    return seen


def _outside(legend_box, ax_box) -> bool:
    return legend_box.x0 >= ax_box.x1 - 1 or legend_box.y1 <= ax_box.y0 + 1


def test_legends_sit_outside_the_data(tmp_path, monkeypatch):
    runs = smoke_runs(tmp_path / "runs")
    reg = registry()
    seen = _captured(monkeypatch, figures, "save")
    for fid in ("accuracy-bars-table1", "val-loss-table1"):
        figures.draw(reg, fid, runs_root=runs, out_dir=tmp_path / "f", preset="smoke")
    analysis = _captured(monkeypatch, analysis_plots, "save")
    figures.draw(reg, "pca-components", runs_root=runs, out_dir=tmp_path / "f", preset="smoke")
    for fig in seen:
        ax = fig.axes[0]
        assert ax.get_legend() is not None
        assert _outside(ax.get_legend().get_window_extent(), ax.get_window_extent())
    (fig,) = analysis
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    legend = fig.legends[0].get_window_extent()
    assert all(_outside(legend, ax.get_window_extent()) for ax in fig.axes if ax.get_visible())
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[0] == "Base Transformer" and len(labels) == len(set(labels)) == 7
    from matplotlib.colors import to_hex

    colours = [to_hex(h.get_color()) for h in fig.legends[0].legend_handles]
    assert colours[0] == style.colour_of(reg, "base").lower() == "#666666"
    assert colours[-1] == style.colour_of(reg, "dynamic-e-exoformer").lower()
