"""Figures say what the runs used and show what they found (issue 41): titles from the runs' preset, few-shot count
and seeds, never the paper's setting; the paper's values on our axes only in its own setting, else in a panel of
their own; several seeds drawn as the mean with its 95% Student t interval, one seed said so; legible heatmap values;
per-layer axes zoomed to the differences and saying so."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy import stats

from synthetic import make_run, probes, registry, smoke_runs, uniform

from exoformer.report.figures import analysis_plots, canvas, style
from exoformer.report.figures import draw as figures
from exoformer.rundir import RunDir

PAGE_PX = 1400 - 48
"""The width the report shows a figure at in a 1,400 px window (body margin 1.5em each side)."""


def _drawn(monkeypatch, runs: Path, out: Path, fid: str, preset: str | None = "smoke") -> list:
    """The matplotlib figures `fid` saves, each drawn as written (with the PNG's width in pixels)."""
    seen = []
    original = canvas.write

    def keep(fig, path, fmt):
        written = original(fig, path, fmt)
        if fmt == "png":
            from PIL import Image

            with Image.open(written) as image:
                seen.append((fig, image.width))
        return written

    monkeypatch.setattr(canvas, "write", keep)
    figures.draw(registry(), fid, runs_root=runs, out_dir=out, preset=preset)
    return seen


def _texts(fig) -> str:
    parts = [t.get_text() for t in fig.texts] + [ax.get_title() for ax in fig.axes]
    return "\n".join(parts + ([fig._suptitle.get_text()] if fig._suptitle is not None else []))


# ------------------------------------------------------------------------------------------ the runs' setting

@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> Path:
    return smoke_runs(tmp_path_factory.mktemp("settings") / "runs")


def test_bars_title_says_the_runs_shots_preset_and_one_seed_never_the_papers(smoke, tmp_path, monkeypatch):
    (fig, _), = _drawn(monkeypatch, smoke, tmp_path, "accuracy-bars-table1")
    assert registry().figures["accuracy-bars-table1"].title.startswith("Six-task 5-shot")  # the declaration
    title = fig.axes[0].get_title()
    assert title.startswith("Six-task 2-shot accuracy per Table 1 model\nruns: preset smoke, 2-shot evaluation, "
                            "1 seed: no interval"), title
    assert "5-shot" not in title and "whiskers" not in title
    ours = fig.axes[0]
    assert not [c for c in ours.collections if c.get_label() == "paper's value"]  # no 450m marks on smoke bars
    assert ours.containers and all(bars.errorbar is None for bars in ours.containers)  # one seed: no whiskers
    paper = fig.axes[1]  # the paper's values: a panel of their own, saying why
    assert paper.get_title().startswith("the paper's values (preset 450m, 5-shot; table1), a different setting")
    reported = {round(p.get_height(), 2) for p in paper.patches}
    drawn = {round(p.get_height(), 2) for p in ours.patches}
    assert reported and not reported & drawn


def test_the_papers_values_share_the_axes_when_the_runs_used_its_setting(tmp_path, monkeypatch):
    for i, row in enumerate(("base", "gated")):
        make_run(tmp_path / "runs", f"{row}-s42", accuracies=uniform(0.45 + 0.01 * i))  # preset 450m: the paper's
    (fig, _), = _drawn(monkeypatch, tmp_path / "runs", tmp_path / "f", "accuracy-bars-table1", preset=None)
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 1
    title = fig.axes[0].get_title()
    assert "5-shot accuracy" in title and "runs: preset 450m, 5-shot evaluation, 1 seed" in title
    assert [c for c in fig.axes[0].collections if c.get_label() == "paper's value"]


def test_figure_titles_name_the_preset_and_seeds_of_the_runs(smoke, tmp_path, monkeypatch):
    (fig, _), = _drawn(monkeypatch, smoke, tmp_path, "attention-sink")
    assert fig._suptitle.get_text() == ("Mean first-token attention per layer (attention sink)\nruns: preset smoke, "
                                        "1 seed: no interval")
    (fig, _), = _drawn(monkeypatch, smoke, tmp_path, "val-loss-table1")
    assert "\nruns: preset smoke, 1 seed: no interval" in fig._suptitle.get_text()
    assert not [c for ax in fig.axes for c in ax.collections]  # one seed: no band


# ------------------------------------------------------------------------------------------ several seeds

def t_half(values: list[float]) -> float:
    n = len(values)
    sd = math.sqrt(sum((v - sum(values) / n) ** 2 for v in values) / (n - 1))
    return float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def test_seed_interval_is_the_students_t_interval_of_the_mean():
    values = [0.30, 0.34, 0.35]
    mean, low, high = style.seed_interval(values)
    assert mean == pytest.approx(0.33) and high - mean == pytest.approx(t_half(values)) == mean - low
    assert style.seed_interval([0.3]) is None and style.seed_half_width(0.02, 1) is None
    assert style.seed_count([1, 1]) == "1 seed" and style.seed_count([3, 3]) == "3 seeds"
    assert style.seed_count([1, 3]) == "1-3 seeds per model"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    """base and gated with three seeds each (smoke): accuracies, curves and probes that differ by seed."""
    root = tmp_path_factory.mktemp("seeds") / "runs"
    for i, row in enumerate(("base", "gated")):
        for k, seed in enumerate((42, 1337, 2027)):
            curve = [(t, 3 + 4 / (1 + t * (1 + 0.2 * i + 0.05 * k) / 1000)) for t in range(0, 20001, 2000)]
            path = make_run(root, f"{row}-s{seed}", preset="smoke", accuracies=uniform(0.30 + 0.05 * i + 0.01 * k),
                            curve=curve, task_prefix="smoke_")
            run = RunDir(path)
            run.analysis_dir.mkdir(parents=True, exist_ok=True)
            run.probes.write_text(json.dumps(probes(4, i + k, row == "gated", False)))
    return root


def test_bars_of_several_seeds_show_the_t_interval_and_say_how_many(seeded, tmp_path, monkeypatch):
    (fig, _), = _drawn(monkeypatch, seeded, tmp_path, "accuracy-bars-table1")
    ax = fig.axes[0]
    assert "runs: preset smoke, 2-shot evaluation, 3 seeds (mean with its 95% t interval over seeds)" in ax.get_title()
    assert "whiskers: 95% t interval over seeds" in ax.get_title()
    half = t_half([30.0, 31.0, 32.0])
    from matplotlib.container import BarContainer

    bars = next(c for c in ax.containers if isinstance(c, BarContainer))  # base: each bar the mean of three seeds
    assert bars.patches[0].get_height() == pytest.approx(31.0)
    (whiskers,) = bars.errorbar.lines[2]
    low, high = sorted(whiskers.get_segments()[0][:, 1])
    assert high - 31.0 == pytest.approx(half) and 31.0 - low == pytest.approx(half)


def test_curves_of_several_seeds_are_the_mean_with_a_t_band(seeded, tmp_path, monkeypatch):
    (fig, _), = _drawn(monkeypatch, seeded, tmp_path, "val-loss-table1")
    whole = fig.axes[0]
    assert "Base Transformer (mean of 3 seeds)" in [t.get_text() for t in whole.get_legend().get_texts()]
    assert "3 seeds (mean with its 95% t interval over seeds)" in fig._suptitle.get_text()
    tokens, mean, low, high, seeds = figures.mean_curve(
        [RunDir(p).val_curve() for p in sorted((seeded / "base-s42").parent.glob("base-s*/*"))])
    assert seeds == 3
    at = [3 + 4 / (1 + tokens[5] * (1 + 0.05 * k) / 1000) for k in range(3)]
    assert mean[5] == pytest.approx(sum(at) / 3) and high[5] - mean[5] == pytest.approx(t_half(at))
    bands = [c for ax in fig.axes for c in ax.collections if c.get_paths()]
    assert len(bands) == 4  # two models, each in the zoom and the whole run


def test_per_layer_lines_of_several_seeds_have_a_t_band(seeded, tmp_path, monkeypatch):
    (fig, _), = _drawn(monkeypatch, seeded, tmp_path, "attention-sink")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[0] == "Base Transformer (mean of 3 seeds, band: 95% t interval over seeds)"
    runs = [(f"base-s{s}", "B", p) for s, p in ((s, next((seeded / f"base-s{s}").iterdir())) for s in (42, 1337, 2027))]
    figure = {"id": "attention-sink", "title": "t", "series": ["analysis.first_token_attention"]}
    (panel,) = analysis_plots.per_layer_panels(figure, runs)
    (line,) = panel.lines
    values = [0.1 + 0.03 * k for k in range(3)]  # block 0 of the three seeds
    assert line.high[0] - line.mean[0] == pytest.approx(t_half(values))


# ------------------------------------------------------------------------------------------ legible, zoomed

def test_layer_similarity_values_are_legible_in_the_report_or_left_to_the_colour_scale(smoke, tmp_path, monkeypatch):
    (fig, width), = _drawn(monkeypatch, smoke, tmp_path, "layer-similarity")
    shown = min(1.0, PAGE_PX / width)  # the page shows the PNG at most at its content width
    values = [t for ax in fig.axes for t in ax.texts if t.get_text()[:2] in ("0.", "1.")]
    assert values  # a 5 x 5 smoke matrix: the numbers themselves
    for text in values:
        assert text.get_fontsize() * canvas.DPI / 72 * shown >= 11, (text.get_fontsize(), width)
    assert analysis_plots.value_font_size(5) >= analysis_plots.VALUE_PT
    assert analysis_plots.value_font_size(25) is None  # too many cells: the colour scale alone


def test_a_narrow_attention_sink_axis_is_zoomed_and_says_so(tmp_path, monkeypatch):
    """The main job's first-token attention lies within 0.018-0.025: from zero, every line sat in the top quarter."""
    runs = tmp_path / "runs"
    for i, row in enumerate(("base", "gated", "resformer")):
        run = RunDir(make_run(runs, f"{row}-s42", preset="smoke", accuracies=uniform(0.3)))
        run.analysis_dir.mkdir(parents=True, exist_ok=True)
        record = probes(4, i, row == "gated", row == "resformer")
        record["ablations"]["none"]["first_token_attention"] = [0.018 + 0.001 * i, 0.023, 0.021 - 0.001 * i, 0.025]
        run.probes.write_text(json.dumps(record))
    (fig, _), = _drawn(monkeypatch, runs, tmp_path / "f", "attention-sink")
    (ax,) = [ax for ax in fig.axes if ax.get_visible() and ax.get_lines()]
    low, high = ax.get_ylim()
    assert low > 0 and (0.025 - 0.018) / (high - low) >= 0.5  # the lines fill the axis, not its top quarter
    assert ax.get_ylabel().endswith(f"({analysis_plots.AXIS_CUT})") and "not from 0" in analysis_plots.AXIS_CUT
