"""Figures fit for a paper, checked on the matplotlib objects (Agg) of figures drawn from synthetic smoke runs of
all nine Table 1 models: no two models look alike, heatmap axes count whole layers and heads, compared panels share
one labelled colour scale, a figure without data says why in it, and bars and per-layer axes start at zero."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest


from synthetic import GATED, MIXING, make_run, probes, registry, uniform

from exoformer.report.figures import analysis_plots
from exoformer.report.figures import draw as figures
from exoformer.report.figures import style
from exoformer.rundir import RunDir

TABLE1 = [row.id for row in registry().tables["table1"].rows]
LAMBDA = {"e-exoformer": "elementwise", "h-exoformer": "headwise", "s-exoformer": "scalar"}
DRAWN = ("val-loss-table1", "accuracy-bars-table1", "lambda-heatmaps", "attention-sink", "pca-components",
         "layer-similarity", "spike-scores")


def _coefficients(granularity: str, n_layer: int = 4, n_head: int = 4, d_model: int = 16) -> dict:
    """Ratios that differ by path (value 0.5-1, gate 1-3), so a colour scale per panel would show it."""
    width = {"elementwise": d_model, "headwise": n_head, "scalar": 1}[granularity]
    scale = {"v": 0.5, "k": 0.8, "q": 1.2, "g": 3.0}
    per_path = {p: [{"anchor": [scale[p] * (0.5 + 0.5 * (layer + c) / (n_layer + width)) for c in range(width)],
                     "self": [1.0] * width} for layer in range(n_layer)] for p in "qkvg"}
    return {"n_layer": n_layer, "n_head": n_head, "d_model": d_model, "paths": list("qkvg"), "mix_paths": list("qkvg"),
            "granularity": granularity, "dynamic": False, "anchor": "h0", "coefficients": per_path}


def _table1_runs(root: Path, *, steps: int = 2000, curves: bool = True) -> Path:
    """One smoke run of each of the nine Table 1 models, with results, a val curve and every analysis record."""
    for i, row in enumerate(TABLE1):
        curve = [(t, 3 + 4 / (1 + t * (1 + 0.05 * i) / 1000)) for t in range(0, 20001, 1000)] if curves else None
        run = RunDir(make_run(root, f"{row}-s42", preset="smoke", accuracies=uniform(0.30 + 0.02 * i), curve=curve,
                              ppl=40.0 - i, task_prefix="smoke_"))
        run.analysis_dir.mkdir(parents=True, exist_ok=True)
        run.probes.write_text(json.dumps(probes(4, i, row in GATED, row in MIXING | set(LAMBDA))))
        scored = steps > 1000
        series = {"score_pct": 0.01 * (i + 1) if scored else None, "spikes": i if scored else 0, "values": steps,
                  "scored": max(0, steps - 1000), "dropped": 0}
        run.spikes.write_text(json.dumps({"window": 1000, "n_sigma": 7.0, "min_history": 1000,
                                          "grad_norm": series, "loss": series}))
        if row in LAMBDA:
            run.coefficients.write_text(json.dumps(_coefficients(LAMBDA[row])))
    return root


def _draw(runs: Path, out: Path, ids) -> dict[str, list[Any]]:
    """figure id -> the matplotlib figures it wrote (as PNG), drawn and kept open for inspection."""
    from matplotlib.figure import Figure

    seen: list[Any] = []
    original = Figure.savefig

    def recording(self, fname, *args, **kwargs):
        if kwargs.get("format") == "png":
            seen.append(self)
        return original(self, fname, *args, **kwargs)

    out_figs: dict[str, list[Any]] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Figure, "savefig", recording)
        for fid in ids:
            seen.clear()
            figures.draw(registry(), fid, runs_root=runs, out_dir=out, preset="smoke")
            out_figs[fid] = list(seen)
    return out_figs


@pytest.fixture(scope="module")
def drawn(tmp_path_factory) -> dict[str, list[Any]]:
    base = tmp_path_factory.mktemp("style")
    return _draw(_table1_runs(base / "runs"), base / "figures", DRAWN)


def _no_data_texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == style.NO_DATA_GID]


# ------------------------------------------------------------------------------------------ looks of models

def _lab(colour: str) -> np.ndarray:
    """CIE L*a*b* (D65) of an sRGB colour."""
    from matplotlib.colors import to_rgb

    rgb = np.array(to_rgb(colour))
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    f = np.cbrt(np.maximum(xyz / np.array([0.95047, 1.0, 1.08883]), (6 / 29) ** 3))
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_declared_model_colours_are_far_apart():
    """Every pair of declared colours differs by CIE76 delta-E >= 20 (the old three blues were 13-16 apart)."""
    declared = style.models(registry())
    close = [(a, b, round(float(np.linalg.norm(_lab(declared[a].colour) - _lab(declared[b].colour))), 1))
             for a, b in itertools.combinations(declared, 2)]
    assert [c for c in close if c[2] < 20] == []


def test_every_declared_model_differs_in_colour_and_in_line_style_with_marker():
    looks = list(style.models(registry()).values())
    assert len({(m.colour.lower(), m.linestyle) for m in looks}) == len(looks)
    assert len({(m.linestyle, m.marker) for m in looks}) == len(looks)  # apart in greyscale too


def test_model_styles_keep_one_look_per_model_and_separate_undeclared_clashes():
    reg = registry()
    looks = style.model_styles(reg, ["e-exoformer-s42", "e-exoformer-s1337", "gated-s42"])
    assert looks["e-exoformer-s42"] == looks["e-exoformer-s1337"] == style.style_of(reg, "e-exoformer")
    by_look: dict[tuple[str, str], str] = {}
    clash = None
    for i in range(2000):  # two undeclared names whose hashed looks coincide
        look = style.style_of(reg, f"new-model-{i}")
        key = (look.colour, look.linestyle)
        if key in by_look:
            clash = (by_look[key], f"new-model-{i}")
            break
        by_look[key] = f"new-model-{i}"
    assert clash is not None
    looks = style.model_styles(reg, list(clash))
    assert (looks[clash[0]].colour, looks[clash[0]].linestyle) != (looks[clash[1]].colour, looks[clash[1]].linestyle)


@pytest.mark.parametrize("count", [1, 9, 36])
def test_series_styles_give_distinct_looks(count):
    looks = style.series_styles(count)
    assert len(looks) == count and len({(s.colour, s.linestyle) for s in looks}) == count
    assert len({s.colour for s in looks[:9]}) == min(count, 9)


def test_count_labels_are_short():
    assert [style.count_label(v) for v in (0, 950, 61440, 1.5e6, 1e10)] == ["0", "950", "61.4k", "1.5M", "10B"]


# ------------------------------------------------------------------------------------------ the drawn figures

def _look(line) -> tuple[str, str]:
    from matplotlib.colors import to_hex

    return to_hex(line.get_color()), line.get_linestyle()


def test_nine_loss_curves_have_nine_distinct_looks_from_the_registry(drawn):
    (fig,) = drawn["val-loss-table1"]
    legend = next(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == [style.label_of(registry(), rid) for rid in TABLE1]
    for ax in fig.axes:
        curves = [line for line in ax.get_lines() if len(line.get_xdata()) > 2]
        assert len(curves) == 9 and len({_look(line) for line in curves}) == 9
        assert len({(line.get_linestyle(), line.get_marker()) for line in curves}) == 9
    expected = {(style.colour_of(registry(), rid).lower(), style.style_of(registry(), rid).linestyle) for rid in TABLE1}
    assert {_look(h) for h in legend.legend_handles} == expected


def test_the_zoomed_loss_axis_says_it_is_zoomed_and_the_overview_starts_at_zero(drawn):
    (fig,) = drawn["val-loss-table1"]
    zoom = next(ax for ax in fig.axes if "zoom" in ax.get_ylabel())
    assert "not from 0" in zoom.get_ylabel()
    overview = next(ax for ax in fig.axes if ax is not zoom and ax.get_visible())
    assert overview.get_ylim()[0] == 0.0
    assert overview.get_xlim()[0] <= 0.0 < zoom.get_xlim()[0]  # the zoom starts later; the overview shows it all


def test_per_layer_lines_of_nine_models_look_distinct(drawn):
    (fig,) = drawn["attention-sink"]
    (ax,) = [ax for ax in fig.axes if ax.get_visible()]
    assert len(ax.get_lines()) == 9 and len({_look(line) for line in ax.get_lines()}) == 9
    assert len({(line.get_linestyle(), line.get_marker()) for line in ax.get_lines()}) == 9


def _heatmap_axes(fig) -> list[Any]:
    return [ax for ax in fig.axes if ax.images]


def _integer_ticks(ax) -> bool:
    """The ticks shown inside the axes' range are whole numbers (no 0.5 of a head or a layer)."""
    for ticks, (low, high) in ((ax.get_xticks(), sorted(ax.get_xlim())), (ax.get_yticks(), sorted(ax.get_ylim()))):
        shown = [t for t in ticks if low <= t <= high]
        if any(abs(t - round(t)) > 1e-9 for t in shown):
            return False
    return True


def test_lambda_heatmaps_have_integer_layer_and_head_axes(drawn):
    figs = drawn["lambda-heatmaps"]
    assert len(figs) == 3  # elementwise, headwise, scalar
    for fig in figs:
        for ax in _heatmap_axes(fig):
            assert _integer_ticks(ax), (ax.get_title(), list(ax.get_xticks()), list(ax.get_yticks()))
            assert ax.get_ylabel() == "layer" and ax.get_xlabel()


def test_lambda_panels_share_one_norm_and_one_labelled_colourbar(drawn):
    norms = set()
    for fig in drawn["lambda-heatmaps"]:
        panels = _heatmap_axes(fig)
        assert len(panels) == 4
        bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
        assert len(bars) == 1 and "λ_anchor / λ_self" in bars[0].get_ylabel()
        norms |= {(im.norm.vmin, im.norm.vcenter, im.norm.vmax) for ax in panels for im in ax.images}
    assert len(norms) == 1  # one scale across the panels and the runs of the figure


def test_layer_similarity_panels_share_one_norm_and_have_integer_axes(drawn):
    (fig,) = drawn["layer-similarity"]
    panels = _heatmap_axes(fig)
    assert len(panels) == 5
    assert len({(im.norm.vmin, im.norm.vmax) for ax in panels for im in ax.images}) == 1
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(bars) == 1 and bars[0].get_ylabel()
    assert all(_integer_ticks(ax) for ax in panels)


def test_accuracy_bars_start_at_zero_with_chance_drawn(drawn):
    (fig,) = drawn["accuracy-bars-table1"]
    ax = fig.axes[0]
    assert ax.get_ylim()[0] == 0.0
    assert any(c.get_label() == "chance (uniform guess)" for c in ax.collections)
    colours = {p.get_facecolor() for p in ax.patches}
    assert len(colours) == 9


def test_linear_per_layer_axes_include_zero(drawn):
    for fid in ("attention-sink", "pca-components"):
        (fig,) = drawn[fid]
        for ax in fig.axes:
            if ax.get_visible() and ax.get_lines() and ax.get_yscale() == "linear":
                assert ax.get_ylim()[0] <= 0.0 <= ax.get_ylim()[1], (fid, ax.get_title(), ax.get_ylim())
                assert analysis_plots.AXIS_CUT not in ax.get_ylabel()


@pytest.mark.parametrize("low,high,expected", [
    (0.010, 0.027, (0.0, 0.027, False)),   # the data fill 63% of [0, 0.027]: from zero
    (0.015, 0.027, (0.015, 0.027, True)),  # 44%: the lines would share half the axis, so zoomed and said so
    (0.018, 0.025, (0.018, 0.025, True)),  # the main job's attention sink: 28%, every line in the top quarter
    (95.0, 105.0, (95.0, 105.0, True)),    # a sliver of [0, 105]: the data's range, said to be cut
    (-0.2, 0.6, (-0.2, 0.6, False)),       # zero already inside
    (-3.0, -1.0, (-3.0, 0.0, False)),      # negative data: up to zero
    (-3.0, -2.0, (-3.0, -2.0, True)),      # a third of [-3, 0]: zoomed
])
def test_linear_range_starts_at_zero_or_says_it_is_cut(low, high, expected):
    assert analysis_plots.linear_range(low, high) == expected


def test_a_cut_per_layer_axis_says_so(tmp_path):
    runs = tmp_path / "runs"
    for i, row in enumerate(("base", "gated")):
        run = RunDir(make_run(runs, f"{row}-s42", preset="smoke", accuracies=uniform(0.3)))
        run.analysis_dir.mkdir(parents=True, exist_ok=True)
        record = probes(4, i, row in GATED, False)
        record["ablations"]["none"]["pca_components"] = [99 + i, 86 + i, 91, 90, 105 - i]
        run.probes.write_text(json.dumps(record))
    (fig,) = _draw(runs, tmp_path / "f", ["pca-components"])["pca-components"]
    (ax,) = [ax for ax in fig.axes if ax.get_visible() and ax.get_lines()]
    assert ax.get_ylim()[0] > 0 and ax.get_ylabel().endswith(f"({analysis_plots.AXIS_CUT})")
    assert _integer_ticks(ax)  # components are whole numbers


def test_scored_spike_table_has_no_missing_data_note(drawn):
    (fig,) = drawn["spike-scores"]
    assert _no_data_texts(fig) == []


# ------------------------------------------------------------------------------------------ figures without data

def test_short_runs_spike_figure_says_why_it_has_no_scores(tmp_path):
    runs = _table1_runs(tmp_path / "runs", steps=150)
    (fig,) = _draw(runs, tmp_path / "f", ["spike-scores"])["spike-scores"]
    (why,) = _no_data_texts(fig)
    assert why.startswith("no spike scores: these runs log 150 steps, and a score needs more than 1000")
    assert "--preset 450m" in why


def test_loss_figure_without_curves_says_why_in_the_figure(tmp_path):
    runs = _table1_runs(tmp_path / "runs", curves=False)
    (fig,) = _draw(runs, tmp_path / "f", ["val-loss-table1"])["val-loss-table1"]
    (why,) = _no_data_texts(fig)
    assert why.startswith("no validation loss") and "train.val_every" in why.replace("\n", " ")
    assert all(not ax.get_lines() for ax in fig.axes)


def test_a_panel_without_lines_says_why_instead_of_an_empty_frame(tmp_path):
    runs = tmp_path / "runs"
    run = RunDir(make_run(runs, "base-s42", preset="smoke", accuracies=uniform(0.3)))
    run.analysis_dir.mkdir(parents=True, exist_ok=True)
    run.probes.write_text(json.dumps(probes(4, 0, gated=False, mixing=False)))
    (fig,) = _draw(runs, tmp_path / "f", ["pca-components"])["pca-components"]
    empty = [ax for ax in fig.axes if ax.get_visible() and not ax.get_lines()]
    assert len(empty) == 2  # the anchor / self ablations of a model that mixes nothing
    for ax in empty:
        (text,) = [t.get_text() for t in ax.texts if t.get_gid() == style.NO_DATA_GID]
        assert "Base Transformer" in text and "not applicable" in text


def test_lambda_scale_is_the_widest_run_range_so_no_run_is_clipped_by_another():
    wide = [np.linspace(0.5, 1.5, 101).reshape(1, -1), None]
    narrow = [np.full((2, 50), 1.02), np.linspace(0.95, 1.05, 50).reshape(1, -1)]
    norm = figures.shared_ratio_norm([narrow, wide])
    assert norm.vmin <= 0.52 and norm.vmax >= 1.48 and norm.vcenter == style.NEUTRAL_RATIO
