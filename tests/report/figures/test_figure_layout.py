"""Every figure of the registry, drawn from synthetic smoke runs: no text over a legend or another note, the
comparability footnote under everything, shared y ranges, chance lines, diverging colourbar ticks, subset notes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest


from synthetic import make_run, registry, smoke_runs, uniform

from exoformer.report.figures import draw as figures

FOOTNOTE = "not comparable with the paper"


@dataclass
class Layout:
    """A saved figure with the display boxes of its texts, notes, legends and panels, measured when written."""

    fig: Any
    texts: list[tuple[str, Any, bool]]
    """(text, box, a figure-level note?) of every visible, non-empty text: the notes under the figure and its
    footnote, titles, and the texts of its axes."""
    legends: list[Any]
    panels: list[Any]


def _measure(fig) -> Layout:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = list(fig.texts) + ([fig._suptitle] if fig._suptitle is not None else [])
    for ax in fig.axes:
        if ax.get_visible():
            texts += [*ax.texts, ax.title, ax._left_title, ax._right_title]
    texts = list({id(t): t for t in texts}.values())  # the suptitle is one of fig.texts too
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]

    return Layout(fig=fig, texts=[(t.get_text(), t.get_window_extent(renderer), t in fig.texts) for t in texts
                                  if t.get_visible() and t.get_text().strip()],
                  legends=[legend.get_window_extent(renderer) for legend in legends],
                  panels=[ax.get_tightbbox(renderer) for ax in fig.axes if ax.get_visible()])


@pytest.fixture(scope="module")
def drawn(tmp_path_factory) -> dict[str, list[Layout]]:
    """figure id -> the figures it saved, measured as they were when written (every text placed)."""
    from matplotlib.figure import Figure

    base = tmp_path_factory.mktemp("layout")
    runs = smoke_runs(base / "runs")
    for i, row in enumerate(("base", "gated", "resformer")):  # val-loss-1b: three of its seven models
        curve = [(t, 3 + 4 / (1 + t * (1 + 0.2 * i) / 1000)) for t in range(0, 20001, 2000)]
        make_run(runs, f"1b-{row}", preset="smoke", accuracies=uniform(0.3), curve=curve)
    seen: list[Layout] = []
    original = Figure.savefig

    def recording(self, fname, *args, **kwargs):
        result = original(self, fname, *args, **kwargs)
        if kwargs.get("format") == "png":
            seen.append(_measure(self))
        return result

    patch = pytest.MonkeyPatch()
    patch.setattr(Figure, "savefig", recording)
    out: dict[str, list[Layout]] = {}
    try:
        for fid in registry().figures:
            seen.clear()
            figures.draw(registry(), fid, runs_root=runs, out_dir=base / "figures", preset="smoke")
            out[fid] = list(seen)
    finally:
        patch.undo()
    return out


def _overlap(a, b) -> bool:
    """Strict overlap of two display boxes (touching edges is not overlapping)."""
    return a.x0 < b.x1 - 0.5 and b.x0 < a.x1 - 0.5 and a.y0 < b.y1 - 0.5 and b.y0 < a.y1 - 0.5


def test_every_figure_of_the_registry_was_drawn(drawn):
    assert set(drawn) == set(registry().figures)
    assert all(drawn.values()), [fid for fid, figs in drawn.items() if not figs]


def test_no_text_overlaps_a_legend_or_another_note(drawn):
    problems = []
    for fid, layouts in drawn.items():
        for layout in layouts:
            for i, (text, box, note) in enumerate(layout.texts):
                problems += [f"{fid}: {text[:40]!r} over a legend" for legend in layout.legends
                             if _overlap(box, legend)]
                if not note:
                    continue
                problems += [f"{fid}: note {text[:40]!r} over {other[:40]!r}" for j, (other, other_box, _)
                             in enumerate(layout.texts) if j != i and _overlap(box, other_box)]
                problems += [f"{fid}: note {text[:40]!r} over a panel" for panel in layout.panels
                             if _overlap(box, panel)]
    assert not problems, "\n".join(problems)


def test_the_footnote_is_the_lowest_text_of_every_figure(drawn):
    for fid, layouts in drawn.items():
        for layout in layouts:
            (low,) = [box.y0 for text, box, _ in layout.texts if text.startswith(FOOTNOTE)]
            others = [box for text, box, _ in layout.texts if not text.startswith(FOOTNOTE)]
            assert all(box.y0 > low for box in others + layout.legends + layout.panels), fid


def test_pca_panels_share_their_y_range(drawn):
    fig = drawn["pca-components"][0].fig
    limits = {ax.get_ylim() for ax in fig.axes if ax.get_visible() and ax.lines}
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 3 and len(limits) == 1


def test_accuracy_bars_draw_each_tasks_chance_level(drawn):
    fig = drawn["accuracy-bars-table1"][0].fig
    ax = fig.axes[0]
    columns = [t.get_text() for t in ax.get_xticklabels()]
    (chance,) = [c for c in ax.collections if c.get_label() == "chance (uniform guess)"]
    levels = {}
    for segment in chance.get_segments():
        (x0, y), (x1, _) = segment
        levels[columns[round((x0 + x1) / 2)]] = y
    assert levels == pytest.approx({"arc_challenge": 25.0, "arc_easy": 25.0, "hellaswag": 25.0, "openbookqa": 25.0,
                                    "piqa": 50.0, "winogrande": 50.0, "avg6": 100 / 3})


def test_lambda_colourbars_have_ticks_on_both_sides_of_one(drawn):
    for layout in drawn["lambda-heatmaps"]:
        bars = [ax for ax in layout.fig.axes if ax.get_label() == "<colorbar>"]
        assert bars
        for bar in bars:
            ticks = [t for t in bar.get_yticks() if bar.get_ylim()[0] <= t <= bar.get_ylim()[1]]
            assert 1.0 in ticks and min(ticks) < 1.0 < max(ticks), ticks
            assert sum(t < 1.0 for t in ticks) >= 2 and sum(t > 1.0 for t in ticks) >= 2, ticks


def test_figures_of_a_subset_say_which_models_they_show(drawn):
    def note(fid: str) -> str:
        (layout,) = drawn[fid]
        return " ".join(text for text, _, note in layout.texts if note and text.startswith("shows ")).replace("\n", " ")

    similarity = note("layer-similarity")
    assert similarity.startswith("shows 5 of the 9 models of table1: Base Transformer, Gated Attention, ")
    assert "not in this figure: ResFormer, Gating + ResFormer, H-ExoFormer, S-ExoFormer" in similarity
    assert "not run: " in note("val-loss-1b") and note("val-loss-1b").startswith("shows 3 of the 7 models")
    # every Table 1 model with a run is drawn; the synthetic runs have none of the static H-/S-ExoFormer rows
    assert note("attention-sink").endswith("Dynamic E-ExoFormer (not run: H-ExoFormer, S-ExoFormer)")


@pytest.mark.parametrize("low,high", [(0.6, 1.9), (0.93, 3.2), (0.2, 1.05), (-2.0, 1.2)])
def test_diverging_ticks_straddle_the_neutral_value(low, high):
    ticks = figures.diverging_ticks(low, 1.0, high)
    assert 1.0 in ticks and all(low <= t <= high for t in ticks)
    assert len([t for t in ticks if t < 1.0]) == 2 and len([t for t in ticks if t > 1.0]) == 2
