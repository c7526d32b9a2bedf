"""`figure NAME`: draw a declared figure (experiments/figures.yaml) from run directories into PNG and PDF.

Dispatch is by the figure's declared `kind` only (PLOTTERS; exoformer/registry/figure_kinds.py says what each
kind draws and `validate` checks it), so a figure's id is just its name. `curves`, `bars` and `heatmap` are drawn
here, the analysis kinds by exoformer.report.figures.analysis_plots. A figure drawn from runs that differ from the
paper's recipe (report/reading/recipe.py) carries a footnote "not comparable with the paper: <what differs>", and
one that shows fewer models than its table holds says which (`shown_note`); canvas.save places both under
everything else. Every model keeps its look in every figure (style.py), and a panel with nothing to draw says why
in it (style.explain_empty). matplotlib only (Agg); never imports torch.
"""

from __future__ import annotations

import math
import os
import re
import textwrap
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from exoformer.errors import UserError, did_you_mean
from exoformer.eval.task_facts import TASK_FACTS, mean_chance
from exoformer.registry.registry import Registry
from exoformer.registry.claims_schema import DeclaredClaim, Derived
from exoformer.registry.tables import Figure, Metric, TableRow
from exoformer.runs.run_index import CHECKPOINT
from exoformer.report import NOT_REPORTED, NOT_RUN
from exoformer.report.figures import analysis_plots
from exoformer.report.figures import style
from exoformer.report.figures.canvas import add_below, file_name, notes, pyplot, save
from exoformer.report.tables.claims import paper_values
from exoformer.report.tables.derived import reference_specs, row_derived
from exoformer.report.reading.recipe import shorten
from exoformer.report.reading.selection import Selection
from exoformer.report.tables.build import AVERAGE, build_table
from exoformer.rundir import RunDir

DEFAULT_OUT = "figures"
PATH_NAMES = {"q": "Query", "k": "Key", "v": "Value", "g": "Gate"}

RunRef = tuple[str, str, Path]
"""(spec name, display label, run directory)."""
FOOTNOTE_WIDTH = 130
FOOTNOTE_LINES = 4


def comparability_footnote(selection: Selection, refs: list[RunRef]) -> str:
    """"not comparable with the paper: <what differs>" for the runs that differ from the paper's recipe, and the
    stale-run notes of the runs drawn."""
    whys: dict[str, list[str]] = {}
    stale = []
    for name, label, _ in refs:
        picked = selection.pick(name, results=False)
        items = picked.differs if picked is not None else []
        if picked is not None and picked.note:
            stale.append(picked.note)
        if items:
            whys.setdefault(shorten(items), []).append(label)
    parts = []
    if len(whys) == 1 and sum(map(len, whys.values())) == len(refs):
        parts = [f"all runs: {next(iter(whys))}"]
    elif whys:
        parts = [f"{', '.join(labels)}: {why}" for why, labels in whys.items()]
    text = ("not comparable with the paper: " + "; ".join(parts) if parts else "")
    text = "; ".join(t for t in (text, *stale) if t)
    if not text:
        return ""
    lines = textwrap.wrap(text, width=FOOTNOTE_WIDTH)
    return "\n".join(lines[:FOOTNOTE_LINES] + (["..."] if len(lines) > FOOTNOTE_LINES else []))


# ------------------------------------------------------------------------------------------ what the runs used

@dataclass(kw_only=True, slots=True, frozen=True)
class RunSetting:
    """What the runs a figure draws used (never the paper's setting): their presets, few-shot counts and seeds."""

    presets: tuple[str, ...]
    shots: tuple[int, ...]
    """eval.num_fewshot of the runs (their identity's scoring, written from their spec at launch)."""
    seeds: tuple[int, ...]
    """How many seeds (runs) each model has, in the order the models are drawn."""
    paper_presets: tuple[str, ...] = ()
    """The presets of the paper's recipe of the same specs (their own preset)."""
    paper_shots: tuple[int, ...] = ()

    @property
    def like_the_paper(self) -> bool:
        """The runs' preset and few-shot count are the paper's: its values share our axes only then."""
        return bool(self.presets) and self.presets == self.paper_presets and self.shots == self.paper_shots


def _listed(values: tuple) -> str:
    """"2", or "2/5" for runs that differ."""
    return "/".join(f"{v}" for v in values)


def run_setting(selection: Selection, refs: list[RunRef]) -> RunSetting:
    """The setting of the runs `refs` (their picks in `selection`) beside the paper's recipe of their specs."""
    presets, shots, paper_presets, paper_shots = set(), set(), set(), set()
    for name, _, _ in refs:
        picked = selection.pick(name, results=False)
        if picked is None:
            continue
        presets.add(picked.run.preset)
        scoring = picked.run.identity.scoring if picked.run.identity is not None else {}
        if isinstance(scoring.get("num_fewshot"), int):
            shots.add(scoring["num_fewshot"])
        reference = selection.reference(picked.run.spec)
        if reference is not None:
            paper_presets.add(reference.preset)
            paper_shots.add(reference.eval.num_fewshot)
    seeds: dict[str, int] = {}
    for _, label, _ in refs:
        seeds[label] = seeds.get(label, 0) + 1
    return RunSetting(presets=tuple(sorted(p for p in presets if p)), shots=tuple(sorted(shots)),
                      seeds=tuple(seeds.values()), paper_presets=tuple(sorted(paper_presets)),
                      paper_shots=tuple(sorted(paper_shots)))


SHOTS = re.compile(r"\b\d+-shot\b")
SEEDS_SHOWN = {"curves": "seeds", "bars": "seeds", "per-layer": "seeds", "matrix": "the first seed of each model",
               "heatmap": "one file per run"}
"""How a figure kind shows a model's seeds (`seeds`: the mean with its 95% t interval over seeds as a band)."""


def runs_title(figure: Figure, setting: RunSetting) -> str:
    """The figure's title as the runs it draws make it true: a few-shot count in the declared title (the paper's
    setting) becomes the runs' own, and a second line says what the runs used: preset, few-shot count (figures of
    evaluation results), seeds and how they are shown. Never the paper's setting."""
    if figure.kind == "table":  # the spike-score table: its rows say each run's steps and scores
        return figure.title
    evaluated = any(series.startswith("eval.") for series in figure.series)
    shots = f"{_listed(setting.shots)}-shot" if setting.shots else ""
    title = SHOTS.sub(shots, figure.title) if shots else " ".join(SHOTS.sub("", figure.title).split())
    parts = [f"preset {_listed(setting.presets)}" if setting.presets else ""]
    if evaluated and shots:
        parts.append(f"{shots} evaluation")
    shown = SEEDS_SHOWN.get(figure.kind, "")
    if shown == "seeds" and setting.seeds:
        count = style.seed_count(setting.seeds)
        several = max(setting.seeds) > 1
        parts.append(count + (f" (mean with its {style.SEED_LEVEL:.0%} t interval over seeds)" if several
                              else ": no interval"))
    elif shown:
        parts.append(shown)
    line = ", ".join(p for p in parts if p)
    return f"{title}\nruns: {line}" if line else title


# ------------------------------------------------------------------------------------------ run selection

def figure_runs(registry: Registry, figure: Figure, runs_root: str | os.PathLike, *,
                preset: str | None = None, overrides: list[str] | tuple[str, ...] = (),
                selection: Selection | None = None) -> list[RunRef]:
    """(spec, label, run_dir) of the figure's specs that have a run directory, in declaration order.

    Every spec is labelled with its model's label (exoformer/report/figures/style.py; a model it does not list keeps
    its `table:ID` row label), the same for all seeds of a model, so the analysis plots draw a model's seeds
    as one line. Its run is the selection's pick among our runs of that spec and preset, results or not (with
    `overrides`, exactly the run of that variant's hash).
    """
    selection = selection or Selection.of_root(registry, runs_root, preset=preset, overrides=overrides, check=False)
    labels = {}
    for item in figure.specs:
        if item.startswith("table:") and item[6:] in registry.tables:
            for row in registry.tables[item[6:]].rows:
                for name in row.specs:
                    labels.setdefault(name, style.label_of(registry, row.id, row.label))
    out = []
    for name in registry.figure_specs(figure):
        picked = selection.pick(name, results=False)
        if picked is not None:
            out.append((name, labels.get(name) or style.label_of(registry, name), picked.path))
    return out


def _model_labels(registry: Registry, table_id: str) -> list[str]:
    return list(dict.fromkeys(style.label_of(registry, row.id, row.label) for row in registry.tables[table_id].rows))


def shown_note(registry: Registry, figure: Figure, refs: list[RunRef]) -> str:
    """Which models the figure shows, when it is fewer than it could: the declared models without a run, and,
    for a figure that names its specs, the models of the table they come from that it leaves out.

    "shows 5 of the 7 models of table1: A, B, C, D, E (not in this figure: F, G)"; "" when it shows them all.
    """
    tables = [item[6:] for item in figure.specs if item.startswith("table:")]
    names = registry.figure_specs(figure)
    if tables:
        parent, declared = tables[0], list(dict.fromkeys(m for t in tables for m in _model_labels(registry, t)))
    else:
        parent = next((tid for tid, table in registry.tables.items()
                       if set(names) <= {n for row in table.rows for n in row.specs}), None)
        labels = {n: style.label_of(registry, row.id, row.label) for row in registry.tables[parent].rows
                  for n in row.specs} if parent else {}
        declared = list(dict.fromkeys(labels.get(n) or style.label_of(registry, n) for n in names))
    universe = _model_labels(registry, parent) if parent else declared
    drawn = list(dict.fromkeys(label for _, label, _ in refs))
    left_out = [m for m in universe if m not in declared]
    not_run = [m for m in declared if m not in drawn]
    if not left_out and not not_run:
        return ""
    of = f"the {len(universe)} models of {parent}" if parent else f"its {len(universe)} models"
    text = f"shows {len(drawn)} of {of}: {', '.join(drawn)}"
    extra = ([f"not in this figure: {', '.join(left_out)}"] if left_out else []) + \
        ([f"{NOT_RUN}: {', '.join(not_run)}"] if not_run else [])
    return "\n".join(textwrap.wrap(f"{text} ({'; '.join(extra)})", width=FOOTNOTE_WIDTH))


def seeds_per_row(registry: Registry, figure: Figure, refs: list[RunRef]) -> list[tuple[str, list[RunRef]]]:
    """For table figures: every run of each row (its specs with a run: its seeds), keyed by row id, rows without a
    run left out."""
    by_name = {r[0]: r for r in refs}
    picked = []
    for item in figure.specs:
        if item.startswith("table:"):
            for row in registry.tables[item[6:]].rows:
                runs = [by_name[n] for n in row.specs if n in by_name]
                if runs:
                    picked.append((row.id, runs))
        elif item in by_name:
            picked.append((item, [by_name[item]]))
    return picked


def mean_curve(curves: list[tuple[list[float], list[float]]]
               ) -> tuple[list[float], list[float], list[float] | None, list[float] | None, int]:
    """(tokens, mean, low, high, seeds) of one model's validation curves, one per seed: the mean over the seeds
    with a curve and its style.seed_interval band (None, None with one seed), at the tokens of the first such
    seed that every other one covers (a seed's loss between its logged points: linear interpolation)."""
    import numpy as np

    drawn = [(t, v) for t, v in curves if t]
    if len(drawn) < 2:
        tokens, losses = drawn[0] if drawn else ([], [])
        return list(tokens), list(losses), None, None, len(drawn)
    end = min(t[-1] for t, _ in drawn)
    start = max(t[0] for t, _ in drawn)
    tokens = [x for x in drawn[0][0] if start <= x <= end]
    at = [np.interp(tokens, t, v) for t, v in drawn]
    mean, low, high = [], [], []
    for k in range(len(tokens)):
        values = [float(a[k]) for a in at]
        finite = [v for v in values if math.isfinite(v)]
        band = style.seed_interval(finite)  # None where fewer than two seeds have a finite loss: no band there
        m = band[0] if band else (finite[0] if finite else math.nan)
        mean.append(m)
        low.append(band[1] if band else m)
        high.append(band[2] if band else m)
    return tokens, mean, low, high, len(drawn)


def first_per_row(registry: Registry, figure: Figure, refs: list[RunRef]) -> list[tuple[str, RunRef]]:
    """For table figures: one run per row (its first spec with a run), keyed by row id."""
    by_name = {r[0]: r for r in refs}
    picked = []
    for item in figure.specs:
        if item.startswith("table:"):
            for row in registry.tables[item[6:]].rows:
                ref = next((by_name[n] for n in row.specs if n in by_name), None)
                if ref is not None:
                    picked.append((row.id, ref))
        elif item in by_name:
            picked.append((item, by_name[item]))
    return picked


# ------------------------------------------------------------------------------------------ curves

def efficiency_ratios(selection: Selection, figure: Figure) -> dict[str, dict[str, float | None]]:
    """reference row -> row -> data efficiency against it (report/tables/derived.py: the mean over seed pairs), for the
    figure's `against` rows."""
    tables = selection.registry.tables
    rows = {row.id: row for item in figure.specs if item.startswith("table:") and item[6:] in tables
            for row in tables[item[6:]].rows}
    out: dict[str, dict[str, float | None]] = {}
    for ref in figure.against:
        if ref in rows:
            how = Derived(estimator="tokens_to_loss", table="", row=ref)
            out[ref] = {rid: row_derived(selection, how, row.specs, rows[ref].specs).value for rid, row in rows.items()}
    return out


def efficiency_claims(registry: Registry, figure: Figure) -> list[tuple[DeclaredClaim, Metric, TableRow]]:
    """The paper's data-efficiency claims about this figure's runs (experiments/claims.yaml: a claim that reads a
    `tokens_to_loss` metric of a row whose specs the figure draws), with the metric and the row."""
    drawn = set(registry.figure_specs(figure))
    out = []
    for claim in registry.claims.values():
        for read in claim.reads:
            metric = registry.metrics.get(read.metric)
            if metric is None or metric.derived is None or metric.derived.estimator != "tokens_to_loss":
                continue
            row = next(r for r in registry.tables[read.table].rows if r.id == read.row)
            if set(row.specs) & drawn:
                out.append((claim, metric, row))
    return out


def efficiency_title_lines(selection: Selection, figure: Figure, label: Callable[[str], str]) -> list[str]:
    """One line per claim: the paper's ratio and ours (the claims table's value) side by side."""
    registry = selection.registry
    lines = []
    for claim, metric, row in efficiency_claims(registry, figure):
        ref = metric.derived
        ours_text = row_derived(selection, ref, row.specs, reference_specs(selection, metric)).text
        paper = paper_values(registry, claim)[0]
        paper_text = NOT_REPORTED if paper is None else f"{'~' if claim.approximate else ''}{paper:g}x"
        lines.append(f"{label(row.id)} reaches {label(ref.row)}'s final loss with fewer tokens: "
                     f"paper {paper_text}, ours {ours_text}")
    return lines


def _legend_outside(ax: Any, **kwargs: Any) -> None:
    """The legend to the right of the axes, never over the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False, **kwargs)


ZOOM_FROM = 0.5
"""The zoomed loss panel shows training from this fraction of the longest run's tokens on: the first steps' loss
(ln(vocab) and down) would otherwise set the y range and flatten every difference between models."""
MARKERS_PER_CURVE = 8


def zoom_window(curves: list[tuple[list[float], list[float]]]) -> tuple[float, float, float, float] | None:
    """(x0, x1, y0, y1) of the zoomed loss panel: tokens from ZOOM_FROM of the longest run on, the loss range the
    curves cover there with a 5% margin; None without a curve."""
    drawn = [(t, v) for tokens, losses in curves for t, v in zip(tokens, losses)]
    if not drawn:
        return None
    x1 = max(t for t, _ in drawn)
    starts = [next((t for t in tokens if t >= ZOOM_FROM * x1), None) for tokens, _ in curves if tokens]
    x0 = min((t for t in starts if t is not None), default=ZOOM_FROM * x1)  # a curve enters at a logged point
    inside = [v for t, v in drawn if t >= x0] or [v for _, v in drawn]
    low, high = min(inside), max(inside)
    margin = 0.05 * (high - low) or 0.05 * abs(high) or 0.05
    return x0, x1, low - margin, high + margin


def _mark_every(points: int, index: int) -> tuple[int, int]:
    """About MARKERS_PER_CURVE markers along a curve, shifted per model so markers of close curves do not pile up."""
    step = max(1, points // MARKERS_PER_CURVE)
    return (index % step, step)


def plot_curves(selection: Selection, figure: Figure, refs: list[RunRef], out_dir: str | os.PathLike) -> list[Path]:
    """Validation loss vs tokens: a zoomed panel (from ZOOM_FROM of training on, labelled as such) where models
    differ, and the whole run beside it with the zoomed window shaded, so nothing is cut without being shown.
    A model with several seeds is the mean of their curves with its 95% t interval over seeds as a band."""
    registry = selection.registry
    plt = pyplot()
    rows = seeds_per_row(registry, figure, refs)
    damaged: list[str] = []  # metrics lines that could not be read: the figure says so, with file:line
    means = {rid: mean_curve([RunDir(ref[2]).val_curve(problems=damaged) for ref in runs]) for rid, runs in rows}
    curves = {rid: (m[0], m[1]) for rid, m in means.items()}
    labels = {rid: runs[0][1] for rid, runs in rows}
    looks = style.model_styles(registry, list(curves), labels)
    ratios = {ref: {rid: r for rid, r in by_row.items() if rid in labels}
              for ref, by_row in efficiency_ratios(selection, figure).items() if ref in labels and curves[ref][0]}
    fig = plt.figure(figsize=(10.5, 4.8), layout="constrained")
    grid = fig.add_gridspec(1, 2, width_ratios=[2.6, 1.0])
    whole = fig.add_subplot(grid[0, 1])  # first: the legend sits right of it, outside all data
    ax = fig.add_subplot(grid[0, 0])
    bands = [(m[0], edge) for m in means.values() if m[2] is not None for edge in (m[2], m[3])]
    window = zoom_window([*curves.values(), *bands])  # the bands fit the zoom too
    for index, (rid, (tokens, losses)) in enumerate(curves.items()):
        if tokens:
            line = dict(looks[rid].line(), markersize=4, linewidth=1.4, markevery=_mark_every(len(tokens), index))
            seeds = means[rid][4]
            ax.plot(tokens, losses, **line)
            whole.plot(tokens, losses, label=labels[rid] + (f" (mean of {seeds} seeds)" if seeds > 1 else ""),
                       **(line | {"markersize": 2.5, "linewidth": 1.0}))
            if means[rid][2] is not None:
                for panel in (ax, whole):
                    panel.fill_between(tokens, means[rid][2], means[rid][3], color=looks[rid].colour, alpha=0.18,
                                       linewidth=0)
    claims = efficiency_title_lines(selection, figure, lambda rid: labels.get(rid) or style.label_of(registry, rid))
    fig.suptitle("\n".join([figure.title, *claims]), fontsize=9, x=0.01, ha="left")
    if window is None:
        style.explain_empty(ax, f"no validation loss: none of the {len(rows)} runs has logged one yet (its metrics "
                                "'val' lines, written every train.val_every steps while a run trains)")
        whole.set_visible(False)
    else:
        x0, x1, y0, y1 = window
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        ax.set_xlabel("training tokens")
        ax.set_ylabel(f"validation loss\n(zoom: from {ZOOM_FROM:.0%} of the tokens on; y not from 0)")
        ax.grid(alpha=0.3)
        from matplotlib.patches import Rectangle

        whole.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, facecolor="0.88", edgecolor="0.45", linewidth=0.8,
                                  zorder=0))
        whole.set_title("whole run (grey box: the zoom)", fontsize=8)
        whole.set_xlabel("training tokens", fontsize=8)
        whole.set_ylabel("validation loss", fontsize=8)
        whole.set_ylim(bottom=0.0)  # the overview is the uncut axis
        whole.tick_params(labelsize=7)
        style.count_axis(ax.xaxis)
        style.count_axis(whole.xaxis)
        whole.grid(alpha=0.3)
        _legend_outside(whole, fontsize=7)
    lines = []
    for ref, by_model in ratios.items():
        parts = [f"{labels.get(m, m)} {r:.2f}x" for m, r in by_model.items() if r is not None and m != ref]
        if parts:
            lines += textwrap.wrap(f"data efficiency vs {labels.get(ref, ref)} (its tokens / a model's tokens to "
                                   "reach its final val loss): " + ", ".join(parts), width=120)
    if damaged:
        lines += textwrap.wrap(f"damaged metrics lines left out ({len(damaged)}): " + "; ".join(damaged[:3])
                               + (" ..." if len(damaged) > 3 else ""), width=120)
    add_below(fig, "\n".join(lines), fontsize=6, color="black")
    written = save(fig, out_dir, figure.id)
    from exoformer.io import atomic_write_json

    written.append(atomic_write_json(Path(out_dir) / file_name(figure.id, "ratios.json"),
                                     {ref: {labels[m]: r for m, r in d.items()} for ref, d in ratios.items()}))
    return written


# ------------------------------------------------------------------------------------------ bars

def plot_accuracy_bars(selection: Selection, figure: Figure, refs: list[RunRef], out_dir: str | os.PathLike
                       ) -> list[Path]:
    """Grouped bars: one group per task (and avg6), one bar per table row, the mean over its seeds with the 95% t
    interval over seeds as whiskers (one seed: none). The paper's values share the axes only when the runs used
    the paper's preset and few-shot count; otherwise they get a panel of their own below, titled as such."""
    registry = selection.registry
    table_ids = [s[6:] for s in figure.specs if s.startswith("table:")]
    if not table_ids:
        raise UserError(f"figure {figure.id!r}: an accuracy bar chart needs a table (specs: [table:ID])",
                        where=figure.source, fix="write specs: [table:table1]")
    built = build_table(registry, table_ids[0], preset=selection.preset, runs_root=selection.runs_root or "",
                        selection=selection)
    columns = [s.split(".", 1)[1] for s in figure.series if s.startswith("eval.")]
    setting = run_setting(selection, refs)
    plt = pyplot()
    from matplotlib import patheffects

    rows = built.table.rows
    width_in = min(16.0, max(7.0, 0.22 * len(columns) * max(1, len(rows))))
    paper_apart = not setting.like_the_paper and any(
        built.cell(row, column).reported is not None for row in rows for column in columns)
    if paper_apart:  # the paper's values in a panel of their own: a different setting, never on our axes
        fig, (ax, paper_ax) = plt.subplots(2, 1, figsize=(width_in, 7.2), height_ratios=[1.0, 0.5], sharey=True)
    else:
        fig, ax = plt.subplots(figsize=(width_in, 4.5))
        paper_ax = None
    width = 0.8 / max(1, len(rows))
    paper_marked = interval_drawn = False
    for i, row in enumerate(rows):
        xs, ys, errs, reported = [], [], [], []
        for j, column in enumerate(columns):
            cell = built.cell(row, column)
            x = j + (i - (len(rows) - 1) / 2) * width
            if cell.reported is not None and (cell.value is not None or paper_apart):
                reported.append((x, cell.reported.value))  # on our axes: beside our bar only
            if cell.value is None:
                continue
            xs.append(x)
            ys.append(cell.value)
            errs.append(style.seed_half_width(cell.seed_sd, len(cell.seeds)) or 0.0)
        look = style.style_of(registry, row.id, row.label)
        if xs:
            interval_drawn |= any(errs)
            ax.bar(xs, ys, width=width, yerr=errs if any(errs) else None, capsize=2, label=look.label,
                   color=look.colour)
        if reported and paper_ax is not None:
            paper_ax.bar([m[0] for m in reported], [m[1] for m in reported], width=width, color=look.colour,
                         alpha=0.55, hatch="//", edgecolor="0.3", linewidth=0.5)
        elif reported and xs:
            ax.scatter([m[0] for m in reported], [m[1] for m in reported], marker="_", s=120, color="black",
                       linewidths=1.5, zorder=3, label=None if paper_marked else "paper's value")
            paper_marked = True
    ckpt_marks = [(j + (i - (len(rows) - 1) / 2) * width, cell.value) for i, row in enumerate(rows)
                  for j, column in enumerate(columns)
                  if (cell := built.cell(row, column, CHECKPOINT)).value is not None]
    if ckpt_marks:
        ax.scatter([c[0] for c in ckpt_marks], [c[1] for c in ckpt_marks], marker="x", s=30, color="black",
                   linewidths=1.0, zorder=4, label="checkpoint evaluated as the row")
    chance = [(j, 100 * level) for j, column in enumerate(columns) if (level := chance_level(column)) is not None]
    for panel in (ax, paper_ax):
        if panel is None:
            continue
        if chance:
            panel.hlines([c[1] for c in chance], [c[0] - 0.45 for c in chance], [c[0] + 0.45 for c in chance],
                         colors="black", linestyles=":", linewidth=1.6, zorder=2.5,
                         label="chance (uniform guess)" if panel is ax else None,
                         path_effects=[patheffects.withStroke(linewidth=3.0, foreground="white")])
        panel.set_xticks(range(len(columns)), columns, rotation=20, fontsize=8)
        panel.set_ylabel("accuracy (%)")
        panel.set_ylim(bottom=0.0)  # bars from zero: a bar's height is its accuracy, the dotted lines mark chance
        panel.grid(axis="y", alpha=0.3)
    sources = "; ".join(part for part in (
        f"whiskers: {style.SEED_LEVEL:.0%} t interval over seeds" if interval_drawn else "",
        "dashes: paper" if paper_marked else "", "dotted: chance",
        "crosses: checkpoint evaluated as the row" if ckpt_marks else "") if part)
    ax.set_title(f"{figure.title}\n({sources})", fontsize=8)
    if paper_ax is not None:
        paper_setting = ", ".join(part for part in (
            f"preset {_listed(setting.paper_presets)}" if setting.paper_presets else "",
            f"{_listed(setting.paper_shots)}-shot" if setting.paper_shots else "") if part)
        paper_ax.set_title(f"the paper's values ({paper_setting}; {table_ids[0]}), a different setting from the runs "
                           "above: not comparable with them (same y scale)", fontsize=8)
    if ax.get_legend_handles_labels()[0]:
        _legend_outside(ax, fontsize=7)
    if paper_ax is not None:
        fig.tight_layout()
    return save(fig, out_dir, figure.id)


def chance_level(column: str) -> float | None:
    """A uniform guess's accuracy (fraction) on a task column, from its number of choices; avg6: the mean of
    the six; None for other columns."""
    if column in TASK_FACTS:
        return TASK_FACTS[column].chance
    return mean_chance() if column == AVERAGE else None


# ------------------------------------------------------------------------------------------ lambda heatmaps

def lambda_ratios(record: dict[str, Any], *, where: str = "coefficients") -> dict[str, Any]:
    """path -> (n_layer x C) array of coef_anchor / coef_self, NaN in non-mixing layers; None for unmixed paths.

    `record` is what the analyse stage writes to RunDir.coefficients. C = n_head * d_head (elementwise),
    n_head (headwise) or 1 (scalar). Static coefficients only: a dynamic model's per-token scales multiply
    them at run time (paper Eq. 12) and are not stored.
    """
    import numpy as np

    try:
        n_layer, granularity = int(record["n_layer"]), str(record["granularity"])
        width = {"elementwise": int(record["d_model"]), "headwise": int(record["n_head"]), "scalar": 1}[granularity]
        paths, mixed, per_path = list(record["paths"]), set(record["mix_paths"]), record["coefficients"]
    except (KeyError, TypeError, ValueError):
        raise UserError("not a coefficients record of the analyse stage", where=where,
                        fix="re-run its analysis: reproduce.py run TARGET --force") from None
    out: dict[str, Any] = {}
    for path in paths:
        if path not in mixed:
            out[path] = None
            continue
        grid = np.full((n_layer, width), np.nan)
        for layer, pair in enumerate((per_path.get(path) or [])[:n_layer]):
            if pair is None:
                continue
            anchor, own = np.asarray(pair["anchor"], dtype=float), np.asarray(pair["self"], dtype=float)
            if anchor.shape != (width,) or own.shape != (width,):
                raise UserError(f"layer {layer} path {path}: {anchor.size} / {own.size} coefficients, expected "
                                f"{width} ({granularity})", where=where,
                                fix="re-run its analysis: reproduce.py run TARGET --force")
            with np.errstate(divide="ignore", invalid="ignore"):
                grid[layer] = anchor / own
        out[path] = grid
    return out


def colour_limits(values: Any) -> tuple[float, float] | None:
    """1st-99th percentile of the finite values (a few huge ratios, where coef_self ~ 0, would wash out the rest)."""
    import numpy as np

    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    lo, hi = np.percentile(finite, [1, 99])
    return (float(lo), float(hi)) if hi > lo else (float(lo) - 0.5, float(hi) + 0.5)


def ratio_norm(limits: tuple[float, float] | None) -> Any:
    """A colour norm that puts style.NEUTRAL_RATIO at the centre of the diverging map, whatever the data's range.

    The range is the 1-99th percentile widened to include the neutral ratio; the two halves are stretched
    separately (TwoSlopeNorm), so white always means anchor and self weigh the same.
    """
    from matplotlib.colors import TwoSlopeNorm

    centre = style.NEUTRAL_RATIO
    lo, hi = limits if limits else (centre - 0.5, centre + 0.5)
    span = max(hi - lo, 1e-6)
    lo, hi = min(lo, centre - 0.05 * span), max(hi, centre + 0.05 * span)
    return TwoSlopeNorm(vcenter=centre, vmin=lo, vmax=hi)


def diverging_ticks(low: float, centre: float, high: float, per_side: int = 2) -> list[float]:
    """Colourbar ticks of a diverging map: the neutral value and `per_side` evenly spaced ticks on each side of it
    (a TwoSlopeNorm stretches the two halves, so a plain locator can leave the shorter half without a tick).

    The outermost ticks are the range's ends rounded inwards to three significant digits, so every tick is inside.
    """
    import numpy as np

    def inwards(value: float, up: bool) -> float:
        if value == 0:
            return 0.0
        step = 10.0 ** (math.floor(math.log10(abs(value))) - 2)
        return (math.ceil(value / step - 1e-9) if up else math.floor(value / step + 1e-9)) * step

    lo, hi = inwards(low, up=True), inwards(high, up=False)
    lo, hi = (lo if lo < centre else low), (hi if hi > centre else high)
    lower = np.linspace(lo, centre, per_side + 1)[:-1]
    upper = np.linspace(centre, hi, per_side + 1)[1:]
    return [float(f"{v:.3g}") for v in (*lower, centre, *upper)]


def shared_ratio_norm(runs: list[list[Any]]) -> Any:
    """One diverging norm for every panel of every run of a λ figure (`runs`: each run's ratio grids): the widest of
    the runs' 1-99th percentile ranges (each run's four panels pooled), so one colour means one ratio wherever it
    appears and no run's bulk is clipped by another's narrower range."""
    import numpy as np

    limits = []
    for grids in runs:
        finite = [g[np.isfinite(g)] for g in grids if g is not None]
        if finite and (found := colour_limits(np.concatenate(finite))) is not None:
            limits.append(found)
    if not limits:
        return ratio_norm(None)
    return ratio_norm((min(lo for lo, _ in limits), max(hi for _, hi in limits)))


def _extend(grids: list[Any], norm: Any) -> str:
    """Which ends of the colourbar get an arrow: values beyond the range are drawn in its end colours."""
    import numpy as np

    values = np.concatenate([g[np.isfinite(g)] for g in grids if g is not None] or [np.array([])])
    low, high = bool((values < norm.vmin).any()), bool((values > norm.vmax).any())
    return {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[(low, high)]


LAMBDA_X = {"elementwise": "channel (head-major; lines: head boundaries)", "headwise": "head",
            "scalar": "one coefficient per layer"}


def _lambda_axes(ax: Any, grid: Any, record: dict[str, Any]) -> None:
    """Integer layer and head / channel ticks (never 0.5 of a head), head boundaries on a channel axis."""
    from matplotlib.ticker import MaxNLocator

    granularity = record["granularity"]
    ax.set_xlabel(LAMBDA_X[granularity], fontsize=8)
    ax.set_ylabel("layer", fontsize=8)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if granularity == "scalar":
        ax.set_xticks([])
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 4, 5, 8, 10]))
    if granularity == "elementwise":
        n_head = int(record.get("n_head") or 1)
        d_head = grid.shape[1] // max(n_head, 1)
        if 1 < n_head <= 16 and d_head > 1:  # a tick at each head's first channel, a line between heads
            ax.set_xticks(range(0, grid.shape[1], d_head))
            for head in range(1, n_head):
                ax.axvline(head * d_head - 0.5, color="black", linewidth=1.0)
    ax.tick_params(labelsize=7)


def plot_lambda_run(name: str, label: str, record: dict[str, Any], out_dir: str | os.PathLike, stem: str,
                    title: str, *, where: str, norm: Any = None) -> list[Path]:
    """The 2 x 2 λ ratio maps of one run (Value, Key, Query, Gate, the paper's order) on one colour scale (`norm`:
    shared with the figure's other runs; default: this run's four panels) with one labelled colourbar."""
    ratios = lambda_ratios(record, where=where)
    plt = pyplot()
    from matplotlib.cm import ScalarMappable

    norm = norm or shared_ratio_norm([list(ratios.values())])
    cmap = plt.get_cmap(style.DIVERGING_MAP).with_extremes(bad=style.MISSING_COLOUR)  # NaN: a non-mixing layer
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.8), layout="constrained")
    mixed = ", ".join(PATH_NAMES[p] for p in ("v", "k", "q", "g") if ratios.get(p) is not None) or "none"
    for ax, path in zip(axes.flat, ("v", "k", "q", "g")):
        grid = ratios.get(path)
        ax.set_title(f"{PATH_NAMES[path]}: λ_anchor / λ_self", fontsize=9)
        if grid is None:
            style.explain_empty(ax, f"not applicable: this model does not mix its {PATH_NAMES[path]} path\n"
                                    f"(paths it mixes: {mixed})", width=40)
            continue
        ax.imshow(grid, aspect="auto", interpolation="nearest", cmap=cmap, norm=norm)
        _lambda_axes(ax, grid, record)
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=list(axes.flat), shrink=0.85, format="%.3g",
                       ticks=diverging_ticks(norm.vmin, norm.vcenter, norm.vmax),
                       extend=_extend(list(ratios.values()), norm))
    bar.set_label(f"λ_anchor / λ_self (white: {style.NEUTRAL_RATIO:g}, equal weights)", fontsize=8)
    dynamic = " (static coefficients; per-token scales not included)" if record.get("dynamic") else ""
    who = name if label == name else f"{label} [{name}]"
    about = (f"{who}{dynamic}; {record['granularity']} coefficients; one colour scale for all panels and runs (the "
             "widest 1-99th percentile range of a run; arrows: values beyond it); grey: non-mixing layer")
    fig.suptitle("\n".join([title, *textwrap.wrap(about, width=120)]), fontsize=9)
    return save(fig, out_dir, stem)


def plot_lambda_heatmaps(selection: Selection, figure: Figure, refs: list[RunRef], out_dir: str | os.PathLike
                         ) -> list[Path]:
    """One 2 x 2 figure per run whose analysis wrote its coefficients (runs still without them are left out), all
    on one colour scale, so a ratio has one colour in every file of the figure."""
    found = []
    for name, label, run_dir in refs:
        run = RunDir(run_dir)
        record = run.read_json(run.coefficients)
        if record is not None:
            found.append((name, label, record, str(run.coefficients)))
    if not found:
        raise UserError(f"figure {figure.id!r}: none of its runs has analysed coefficients yet",
                        where=", ".join(str(ref[2]) for ref in refs),
                        fix=f"run them first (the analyse stage writes them): reproduce.py run {figure.id}")
    norm = shared_ratio_norm([list(lambda_ratios(record, where=where).values()) for _, _, record, where in found])
    written = []
    for name, label, record, where in found:
        written += plot_lambda_run(name, label, record, out_dir, f"{figure.id}-{name}", figure.title, where=where,
                                   norm=norm)
    return written


# ------------------------------------------------------------------------------------------ dispatch

Plotter = Callable[..., list[Path]]
"""fn(selection, figure, refs, out_dir) -> written paths."""


def _analysis_plot(fn: Callable[..., list[Path]]) -> Plotter:
    """An analysis_plots function (declaration dict, runs, out_dir) as a Plotter."""

    def plot(selection: Selection, figure: Figure, refs: list[RunRef], out_dir: str | os.PathLike) -> list[Path]:
        declaration = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(figure).items()}
        declaration["looks"] = style.model_styles(selection.registry, [name for name, _, _ in refs],
                                                  {name: label for name, label, _ in refs})
        if fn is analysis_plots.plot_spike_scores:  # the paper's values from this registry's table
            tables = [s[6:] for s in figure.specs if s.startswith("table:")]
            reported = analysis_plots.reported_spike_rows(tables[0], selection.registry) if tables else []
            own = selection.registry.resolve(refs[0][0]).preset  # the scale the spec is declared at
            declaration["longer_preset"] = own if own != selection.preset else None
            return list(fn(declaration, refs, Path(out_dir), reported=reported))
        return list(fn(declaration, refs, Path(out_dir)))

    return plot


PLOTTERS: dict[str, Plotter] = {
    "curves": plot_curves,
    "bars": plot_accuracy_bars,
    "heatmap": plot_lambda_heatmaps,
    **{kind: _analysis_plot(fn) for kind, fn in analysis_plots.KIND_PLOTS.items()},
}
"""Figure kind (exoformer/registry/figure_kinds.py) -> its plot function: the only dispatch of `figure`."""


def draw(registry: Registry, figure_id: str, *, runs_root: str | os.PathLike, out_dir: str | os.PathLike = DEFAULT_OUT,
         preset: str | None = None, overrides: list[str] | tuple[str, ...] = (),
         selection: Selection | None = None) -> list[Path]:
    """Draw one declared figure by its kind from the runs `selection` picks (default: those of `runs_root` under
    `preset` and `overrides`); returns the written paths."""
    if figure_id not in registry.figures:
        raise UserError(f"unknown figure {figure_id!r}", where="FIGURE", fix=did_you_mean(figure_id, registry.figures))
    figure = registry.figures[figure_id]
    plot = PLOTTERS.get(figure.kind)
    if plot is None:
        raise UserError(f"figure kind {figure.kind} not available", where=figure.source,
                        fix=f"kinds drawn: {', '.join(PLOTTERS)}")
    selection = selection or Selection.of_root(registry, runs_root, preset=preset, overrides=overrides, check=False)
    refs = figure_runs(registry, figure, runs_root, selection=selection)
    if not refs:
        of_preset = f" (preset {preset})" if preset else ""
        raise UserError(f"no runs for figure {figure_id!r} under {runs_root}{of_preset}",
                        where="FIGURE", fix=f"run them first: reproduce.py run {figure_id}"
                        + (f" --preset {preset}" if preset else ""))
    shown = "" if figure.kind == "heatmap" else shown_note(registry, figure, refs)  # heatmaps: one run per file
    drawn = replace(figure, title=runs_title(figure, run_setting(selection, refs)))  # the runs' setting, never the
    # paper's
    with notes(shown=shown, footnote=comparability_footnote(selection, refs)):
        return plot(selection, drawn, refs, out_dir)
