"""Figures of the analysis stage: per-layer probe lines, layer-similarity heatmaps, spike-score table.

Every plot function has the signature `fn(figure, runs, out_dir) -> list[Path]`: `figure` is the declaration
from experiments/figures.yaml as a mapping (id, title, series, and each spec's model look under `looks`),
`runs` a list of (spec name, label, run_dir or None) and `out_dir` where the files go. Runs sharing a label are
seed replicates of one model: one line per label (the mean over seeds, with its 95% Student t interval over seeds
as a band when there are several; the title's second line says how many).
A run without analysis output is named "not run"; a probe the model cannot have (gates of an ungated model,
ablations of a model that mixes nothing) is written into the panel as "not applicable".

Runs of different depth (the paper's ungated models are deeper than its gated ones at equal size, docs/paper.md
2.1) share one axis: relative depth, hidden state i of a model with L blocks at i / L and block l at
(l + 1) / L (the hidden state it writes). Runs probed on different inputs (batch or sequence length) are not
comparable and are a one-line error. Panels of one quantity share their y range; a linear one starts at zero
unless the data would fill less than half of it, and is then zoomed to the data and says so (AXIS_CUT). Values
written into a heatmap's cells are legible at the page's width (at least VALUE_PT), or left out for the colour scale.
Each model keeps its look (style.py), and a panel without a line says why in its middle. Torch-free: reads the
analyse stage's probes and spikes records only (RunDir.probes, RunDir.spikes).
"""

from __future__ import annotations

import math
import os
import statistics
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from exoformer.errors import UserError
from exoformer.io import atomic_write_text
from exoformer.report import NOT_REPORTED, NOT_RUN
from exoformer.report.figures import style
from exoformer.report.figures.canvas import add_below, below, file_name, pyplot, save
from exoformer.rundir import RunDir

RunRef = tuple[str, str, "str | os.PathLike | None"]
"""(spec name, label, run directory or None when the run does not exist)."""

NOT_ENOUGH_STEPS = "not enough steps"
SPIKE_COLUMN = "grad_spike_score"
"""The metric of a spike-score table whose reported values the spike table shows beside ours."""
ABLATION_TITLES = {"none": "as trained", "anchor": "anchor term removed", "self": "own term removed"}


@dataclass(kw_only=True, slots=True, frozen=True)
class Panel:
    """One subplot: a run_probes key under one ablation."""

    key: str
    ylabel: str
    ablation: str = "none"
    log: bool = False
    count: bool = False
    """Whole numbers (components): integer y ticks."""


@dataclass(kw_only=True, slots=True, frozen=True)
class PerLayer:
    """How one registry probe is drawn: its panels and whether it is indexed by block or by hidden state."""

    panels: tuple[Panel, ...]
    by_block: bool
    """True: one value per block 0..L-1 (attention, gates); False: per hidden state 0..L (0 = embeddings)."""


PER_LAYER: dict[str, PerLayer] = {
    "first_token_attention": PerLayer(by_block=True, panels=(Panel(key="first_token_attention",
                                                                   ylabel="mean attention on token 0"),)),
    "attention_entropy": PerLayer(by_block=True, panels=(Panel(key="attention_entropy", ylabel="entropy (nats)"),)),
    "token_similarity": PerLayer(by_block=False, panels=(Panel(key="token_similarity_mean",
                                                               ylabel="mean token-to-token cosine"),)),
    "similarity_to_embeddings": PerLayer(by_block=False, panels=(Panel(key="similarity_to_embeddings",
                                                                       ylabel="cosine to the embeddings"),)),
    "pca_components": PerLayer(by_block=False, panels=tuple(
        Panel(key="pca_components", ylabel="components for 99% variance", ablation=a, count=True)
        for a in ABLATION_TITLES)),
    "gate_stats": PerLayer(by_block=True, panels=(Panel(key="gate_mean", ylabel="gate mean"),
                                                  Panel(key="gate_sparsity", ylabel="fraction of gates < 0.2"))),
    "massive_activation": PerLayer(by_block=False, panels=(Panel(key="massive_activation", ylabel="max |h|",
                                                                 log=True),)),
}
"""Registry probe name (series `analysis.<name>`) -> panels; docs/official_code.md 6.2 for each definition."""


# ------------------------------------------------------------------------------------------ reading runs

def read_analysis(run_dir: str | os.PathLike | None, name: str) -> dict | None:
    """A run's analysis record `name` ("probes" or "spikes", RunDir paths), or None when the run or it is absent."""
    if run_dir is None:
        return None
    run = RunDir(run_dir)
    path = getattr(run, name)
    data = run.read_json(path)
    if data is not None and not isinstance(data, dict):
        raise UserError("not an analysis record", where=str(path), fix="re-run the analyse stage (run TARGET --force)")
    return data


def _file_name(name: str) -> str:
    """Where in a run directory the analysis record `name` lives (for messages)."""
    return str(getattr(RunDir(""), name))


def _figure_id(figure: Any) -> str:
    return str(figure.get("id") or "figure")


def _groups(runs: Sequence[RunRef]) -> dict[str, list[tuple[str, Path | None]]]:
    """label -> [(spec name, run dir)], in first-seen order."""
    out: dict[str, list[tuple[str, Path | None]]] = {}
    for spec, label, run_dir in runs:
        out.setdefault(label, []).append((spec, None if run_dir is None else Path(run_dir)))
    return out


def _require_some(figure: Any, found: bool, what: str) -> None:
    """A figure with no analysed run at all is a one-line error (as figures.py does for other kinds)."""
    if not found:
        fid = _figure_id(figure)
        raise UserError(f"no run of figure {fid!r} has {_file_name(what)}", where="FIGURE",
                        fix=f"run them first (the analyse stage writes it): reproduce.py run {fid} [--preset P]")


def _check_same_input(loaded: Sequence[tuple[str, dict]], figure_id: str) -> None:
    inputs = {(p["input"]["batch"], p["input"]["seq_len"]): spec for spec, p in loaded if "input" in p}
    if len(inputs) > 1:
        described = ", ".join(f"{spec}: {b} x {t}" for (b, t), spec in inputs.items())
        raise UserError(f"figure {figure_id!r} mixes runs probed on different inputs ({described}), which are not "
                        "comparable", where=f"figure {figure_id}",
                        fix="re-run their analysis with one analysis.n_sequences and analysis.seq_len (one preset)")


# ---------------------------------------------------------------------------------------- per-layer line plots

@dataclass(kw_only=True, slots=True)
class Line:
    """One model's line in a panel: x positions, the mean over its seeds, and its 95% Student t interval over
    seeds (style.seed_interval; the mean itself with one seed)."""

    label: str
    model: str
    """A spec name of the model (its look: the declaration's `looks`, else one by name: look_of)."""
    x: list[float]
    mean: list[float]
    low: list[float]
    high: list[float]
    seeds: int


@dataclass(kw_only=True, slots=True)
class PanelData:
    """What one subplot shows: its lines, and a note per model that has no line (not run / not applicable)."""

    title: str
    ylabel: str
    xlabel: str
    log: bool
    lines: list[Line]
    notes: list[str]
    count: bool = False


def per_layer_panels(figure: Any, runs: Sequence[RunRef]) -> list[PanelData]:
    """The data of a per-layer figure, one PanelData per panel of its analysis series (PER_LAYER)."""
    probes = _analysis_series(figure, allowed=PER_LAYER)
    loaded = {label: [(spec, data) for spec, run_dir in members if (data := read_analysis(run_dir, "probes"))]
              for label, members in _groups(runs).items()}
    _require_some(figure, any(loaded.values()), "probes")
    _check_same_input([item for items in loaded.values() for item in items], _figure_id(figure))
    relative = len({data["n_layer"] for items in loaded.values() for _, data in items}) > 1
    out = []
    for probe in probes:
        layout = PER_LAYER[probe]
        ablated = any(p.ablation != "none" for p in layout.panels)
        for panel in layout.panels:
            lines, notes = [], []
            for label, items in loaded.items():
                if not items:
                    notes.append(f"{label}: {NOT_RUN}")
                    continue
                series, reason = _series(items, panel)
                if series is None:
                    notes.append(f"{label}: {reason}")
                    continue
                columns = list(zip(*series))
                bands = [style.seed_interval(c) for c in columns]  # None with one seed (or one finite value)
                lines.append(Line(label=label, seeds=len(series), model=items[0][0],
                                  x=_x_positions(len(columns), items[0][1]["n_layer"], layout.by_block, relative),
                                  mean=[statistics.fmean(c) for c in columns],
                                  low=[b[1] if b else statistics.fmean(c) for b, c in zip(bands, columns)],
                                  high=[b[2] if b else statistics.fmean(c) for b, c in zip(bands, columns)]))
            title = f"{panel.ylabel}: {ABLATION_TITLES[panel.ablation]}" if ablated else panel.ylabel
            out.append(PanelData(title=title, ylabel=panel.ylabel, xlabel=_x_label(layout.by_block, relative),
                                 log=panel.log, lines=lines, notes=notes, count=panel.count))
    return out


def plot_per_layer(figure: Any, runs: Sequence[RunRef], out_dir: str | os.PathLike) -> list[Path]:
    """One line per model (mean over seeds, its 95% t interval over seeds as a band) in each panel; notes for
    models without a line.

    One legend for the whole figure, below the panels, and the notes of panels that have lines below it:
    neither is drawn over data. A panel with no line at all shows its notes in its middle.
    """
    panels = per_layer_panels(figure, runs)
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.9 * rows + 0.6), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    legend: dict[str, Any] = {}
    footer: list[str] = []
    models = list(dict.fromkeys(line.model for data in panels for line in data.lines))
    for ax, data in zip(axes.flat, panels):
        for line in data.lines:
            look = look_of(figure, line.model, models.index(line.model))
            suffix = f" (mean of {line.seeds} seeds, {style.band_label()})" if line.seeds > 1 else ""
            (handle,) = ax.plot(line.x, line.mean, markersize=4, linewidth=1.3, **look.line())
            legend.setdefault(line.label + suffix, handle)
            if line.seeds > 1:
                ax.fill_between(line.x, line.low, line.high, color=look.colour, alpha=0.15, linewidth=0)
        ax.set_title(data.title, fontsize=10)
        ax.set_ylabel(data.ylabel)
        ax.set_xlabel(data.xlabel)
        if not data.xlabel.startswith("relative"):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if data.count:
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        if data.lines:
            if data.log:
                ax.set_yscale("log")
                ax.set_ylabel(f"{data.ylabel} (log scale)")
                ax.yaxis.set_major_formatter(_plain_log_formatter())
                ax.yaxis.set_minor_formatter(_plain_log_formatter(labelOnlyBase=False))
            ax.grid(alpha=0.3)
            footer += [f"{data.title}: {note}" for note in data.notes]
        else:
            style.explain_empty(ax, "\n".join(["no line in this panel:", *data.notes]), width=55)
    _share_y(axes.flat, panels)
    fig.suptitle(str(figure.get("title") or _figure_id(figure)), fontsize=11)
    fig.tight_layout()
    if legend:
        fig.legend(list(legend.values()), list(legend), loc="upper center", bbox_to_anchor=(0.5, below(fig)),
                   ncol=min(4, len(legend)), fontsize=8, frameon=False)
    add_below(fig, "\n".join(footer))
    return save(fig, out_dir, _figure_id(figure))


def _plain_log_formatter(**kwargs: Any) -> Any:
    """Log-axis tick labels as plain numbers (0.2, 6, 300), matplotlib's choice of which ticks to label."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
            return f"{x:g}"

    return Plain(**kwargs)


def look_of(figure: Any, model: str, index: int) -> style.ModelStyle:
    """The look of a model's line: the declaration's `looks` (exoformer/report/figures/draw.py fills it from the
    registry), else a colour by name with the index-th line style and marker."""
    declared = figure.get("looks", {}).get(model)
    if declared is not None:
        return declared
    return replace(style.series_styles(index + 1)[index], label=model, colour=style.fallback_colour(model))


def _share_y(axes: Any, panels: Sequence[PanelData]) -> None:
    """Panels of one quantity (the PCA panels under each ablation) share their y range, so they compare at a glance;
    a linear range includes zero or says it does not (linear_range)."""
    groups: dict[str, list[Any]] = {}
    for ax, data in zip(axes, panels):
        if data.lines:
            groups.setdefault(data.ylabel, []).append(ax)
    log = {data.ylabel for data in panels if data.log}
    for ylabel, group in groups.items():
        low = min(ax.get_ylim()[0] for ax in group)
        high = max(ax.get_ylim()[1] for ax in group)
        low, high, cut = (low, high, False) if ylabel in log else linear_range(low, high)
        for ax in group[1:]:
            ax.sharey(group[0])
        group[0].set_ylim(low, high)
        if cut:
            for ax in group:
                ax.set_ylabel(f"{ylabel}\n({AXIS_CUT})")


AXIS_CUT = "zoomed: axis not from 0"
ZERO_SHARE = 0.5
"""A linear axis starts at zero when the data then fill at least this share of it; otherwise it is zoomed to the
data's range and says so (AXIS_CUT), since lines squeezed into a quarter of their axis show no difference."""


def linear_range(low: float, high: float) -> tuple[float, float, bool]:
    """The y range of a linear per-layer axis and whether it is cut: from zero (or to zero, for negative data) when
    the data's own range is at least ZERO_SHARE of it."""
    if low <= 0.0 <= high:
        return low, high, False
    far = max(abs(low), abs(high))
    if (high - low) >= ZERO_SHARE * far:
        return min(low, 0.0), max(high, 0.0), False
    return low, high, True


def _series(items: Sequence[tuple[str, dict]], panel: Panel) -> tuple[list[list[float]] | None, str]:
    """The panel's per-layer values of each seed, or (None, why not)."""
    series = []
    reason = NOT_RUN
    for _, data in items:
        ablation = data.get("ablations", {}).get(panel.ablation)
        if ablation is None:
            reason = f"ablation '{panel.ablation}' not computed"
            continue
        if isinstance(ablation, str):
            reason = _short(ablation)
            continue
        values = ablation.get(panel.key)
        if values is None:
            reason = "not computed (probe not selected)"
            continue
        if isinstance(values, str):
            reason = _short(values)
            continue
        series.append([math.nan if v is None else float(v) for v in values])
    if not series:
        return None, reason
    length = min(len(s) for s in series)
    return [s[:length] for s in series], ""


def _short(text: str) -> str:
    """The first line, at most 90 characters: notes are drawn inside a panel."""
    return text.splitlines()[0][:90]


def _x_positions(count: int, n_layer: int, by_block: bool, relative: bool) -> list[float]:
    if not relative:
        return list(range(count))
    return [((i + 1) if by_block else i) / n_layer for i in range(count)]


def _x_label(by_block: bool, relative: bool) -> str:
    if relative:
        return "relative depth (hidden state i / L; models differ in depth)"
    return "block" if by_block else "hidden state (0 = embeddings)"


# -------------------------------------------------------------------------- layer-to-layer similarity heatmaps

def plot_layer_similarity(figure: Any, runs: Sequence[RunRef], out_dir: str | os.PathLike) -> list[Path]:
    """One (L+1) x (L+1) heatmap per model (the first seed that has one), one colour scale for all panels.

    Official 6.2 draws these with RdBu_r and does not fix the range; neighbouring layers sit at 0.8-1.0, which
    a [-1, 1] diverging scale renders as one flat red, so we use viridis from the lowest value (to 0.05) to 1.
    """
    _analysis_series(figure, allowed=("layer_similarity",))
    plt = pyplot()
    _require_some(figure, any(read_analysis(d, "probes") for _, _, d in runs), "probes")
    panels: list[tuple[str, str, Any]] = []
    for label, members in _groups(runs).items():
        chosen: tuple[str, Any] = (members[0][0], NOT_RUN)
        for spec, run_dir in members:
            data = read_analysis(run_dir, "probes")
            if data is None:
                continue
            matrix = data.get("ablations", {}).get("none", {}).get("layer_similarity")
            chosen = (spec, matrix if isinstance(matrix, list) else "not computed (probe not selected)")
            if isinstance(matrix, list):
                break
        panels.append((label, *chosen))
    columns = min(3, max(1, len(panels)))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(SIMILARITY_PANEL_IN * columns, 4.2 * rows + 0.6), squeeze=False,
                             layout="constrained")
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    low = similarity_colour_floor([m for _, _, m in panels if isinstance(m, list)])
    from matplotlib.colors import Normalize
    from matplotlib.ticker import MaxNLocator

    norm = Normalize(vmin=low, vmax=1.0)  # one norm object for every panel: one colour, one cosine
    cmap = plt.get_cmap(style.SEQUENTIAL_MAP).with_extremes(bad=style.MISSING_COLOUR)
    image = None
    for ax, (label, spec, matrix) in zip(axes.flat, panels):
        ax.set_title(label, fontsize=9)
        if isinstance(matrix, str):
            style.explain_empty(ax, f"no similarity matrix: {matrix}\n(the analyse stage writes it to "
                                    f"{_file_name('probes')})", width=40)
            continue
        values = [[math.nan if v is None else v for v in row] for row in matrix]
        image = ax.imshow(values, cmap=cmap, norm=norm, origin="upper")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        size = value_font_size(len(values))
        if size is not None:  # small matrices (smoke): the numbers themselves, legible; else the colour scale alone
            for i, row in enumerate(values):
                for j, v in enumerate(row):
                    if math.isfinite(v):
                        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=size,
                                color="white" if v < (low + 1.0) / 2 else "black")
        ax.set_xlabel("hidden state j (0 = embeddings)")
        ax.set_ylabel("hidden state i")
    if image is not None:
        fig.colorbar(image, ax=list(axes.flat[:len(panels)]), shrink=0.8,
                     label=f"mean token cosine (scale: {low:g}, the lowest value rounded down, to 1)")
    fig.suptitle(str(figure.get("title") or _figure_id(figure)), fontsize=11)
    return save(fig, out_dir, _figure_id(figure))


SIMILARITY_PANEL_IN = 4.6
"""Width of one similarity panel (inches), its colourbar's share included."""
VALUE_PT = 9.0
"""The smallest font a value written into a heatmap cell gets: 9 pt at the figures' 150 dpi is about 19 px, still 11
px or more where the report page shows a three-panel figure at its 1,350 px width. Cells too small for it get none."""


def value_font_size(cells: int, panel_in: float = SIMILARITY_PANEL_IN) -> float | None:
    """The font size of the values written into a `cells` x `cells` heatmap panel: what a cell holds ("0.95" is about
    2.6 em wide), at most 11 pt; None when that is under VALUE_PT (the colour scale alone then)."""
    cell_pt = (panel_in - 1.3) * 72.0 / max(cells, 1)  # 1.3 in: the layer axis, its labels and the colourbar's share
    size = min(11.0, cell_pt / 2.6)
    return size if size >= VALUE_PT else None


def similarity_colour_floor(matrices: Sequence[Sequence[Sequence[float | None]]]) -> float:
    """The lower colour limit shared by all panels: the smallest finite value, rounded down to 0.05 (at most 0.95)."""
    values = [v for m in matrices for row in m for v in row if v is not None and math.isfinite(v)]
    if not values:
        return -1.0
    return min(0.95, math.floor(min(values) / 0.05) * 0.05)


# ---------------------------------------------------------------------- spike scores beside the paper's values

@dataclass(kw_only=True, slots=True, frozen=True)
class SpikeRow:
    """A row of table spike-scores: its label, its specs (first = the paper's seed) and the paper's score."""

    label: str
    specs: tuple[str, ...]
    paper: float | None


def reported_spike_rows(table_id: str, registry: Any = None) -> list[SpikeRow]:
    """The rows of a declared spike-score table with the paper's gradient-norm spike scores (None: not reported),
    from experiments/tables.yaml and results/paper/reported.yaml (`registry`: the default one when None)."""
    from exoformer.registry.registry import Registry
    from exoformer.registry.reported import load_reported

    registry = registry or Registry()
    cells = load_reported(registry)
    out = []
    for row in registry.tables[table_id].rows:
        cell = cells.get((table_id, row.id, SPIKE_COLUMN))
        out.append(SpikeRow(label=row.label, specs=row.specs, paper=None if cell is None else cell.value))
    return out


def spike_rows(runs: Sequence[RunRef], reported: Sequence[SpikeRow]) -> list[dict[str, str]]:
    """One line per run, our gradient-norm and loss spike scores (%) beside the paper's score of its row.

    Every row of the paper's table appears: a row none of whose specs was run reads "not run"; runs whose spec
    is in no row follow at the end with "not reported".
    """
    by_spec = {spec: (label, run_dir) for spec, label, run_dir in runs}
    lines: list[dict[str, str]] = []
    seen: set[str] = set()

    def line(label: str, spec: str, run_dir: Any, paper: float | None) -> dict[str, str]:
        data = read_analysis(run_dir, "spikes")
        out = {"model": label, "spec": spec, "paper grad": NOT_REPORTED if paper is None else f"{paper:g}"}
        if data is None:
            return out | {"ours grad (%)": NOT_RUN, "ours loss (%)": NOT_RUN, "steps": NOT_RUN}
        return out | {"ours grad (%)": _score(data["grad_norm"]), "ours loss (%)": _score(data["loss"]),
                      "steps": str(data["grad_norm"]["values"])}

    for row in reported:
        present = [s for s in row.specs if s in by_spec]
        if not present:
            lines.append(line(row.label, row.specs[0], None, row.paper))
        for spec in present:
            lines.append(line(by_spec[spec][0], spec, by_spec[spec][1], row.paper))
            seen.add(spec)
    for spec, label, run_dir in runs:
        if spec not in seen:
            lines.append(line(label, spec, run_dir, None))
    return lines


def _score(series: Mapping[str, Any]) -> str:
    score = series.get("score_pct")
    if score is None:
        return NOT_ENOUGH_STEPS
    return f"{score:.4f} ({series['spikes']} spikes)"


def no_score_reason(runs: Sequence[RunRef], longer_preset: str | None = None, target: str = "TARGET") -> str:
    """Why no run of a spike figure has a score ("" when one has): the runs are shorter than the history a score
    needs (their spikes records say how long both are), naming the preset that trains long enough."""
    records = [data for _, _, run_dir in runs if (data := read_analysis(run_dir, "spikes"))]
    scored = any(r.get(key, {}).get("score_pct") is not None for r in records for key in ("grad_norm", "loss"))
    if not records or scored:
        return ""
    steps = max(int(r.get("grad_norm", {}).get("values") or 0) for r in records)
    need = max(int(r.get("min_history") or r.get("window") or 0) for r in records)
    rerun = (f"\nRun the {longer_preset} preset: reproduce.py run {target} --preset {longer_preset}" if longer_preset
             else f"\nTrain them for more than {need} steps")
    return (f"no spike scores: these runs log {steps} steps, and a score needs more than {need}\n(each value is "
            f"compared with the mean and std of the previous {need} steps, appendix F).{rerun}")


def plot_spike_scores(figure: Any, runs: Sequence[RunRef], out_dir: str | os.PathLike, *,
                      reported: Sequence[SpikeRow] | None = None) -> list[Path]:
    """The spike-score table as PNG, PDF and Markdown, our scores beside the paper's (appendix F): `reported`, else
    the rows of the table the figure draws (`specs: [table:ID]`)."""
    _analysis_series(figure, allowed=("spike_scores",), extra=("grad_norm", "loss"))
    _require_some(figure, any(read_analysis(d, "spikes") for _, _, d in runs), "spikes")
    if reported is None:
        tables = [str(s)[6:] for s in figure.get("specs", ()) if str(s).startswith("table:")]
        reported = reported_spike_rows(tables[0]) if tables else []
    rows = spike_rows(runs, reported)
    header = ["model", "spec", "ours grad (%)", "ours loss (%)", "paper grad", "steps"]
    note = ("Spike score: % of values > 7 std from the rolling mean of the previous 1000 steps (OLMo 2); "
            f"'{NOT_ENOUGH_STEPS}': run shorter than 1001 steps. Paper values [N-v4F]: unit (% or fraction) "
            "and scale (450M or 1B) not stated.")
    out_dir = Path(out_dir)
    title = str(figure.get("title") or _figure_id(figure))
    why = no_score_reason(runs, figure.get("longer_preset"), _figure_id(figure))
    markdown = [f"# {title}", "", *([why.replace("\n", " "), ""] if why else []),
                "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    markdown += ["| " + " | ".join(row[h] for h in header) + " |" for row in rows]
    markdown += ["", note, ""]
    md_path = out_dir / file_name(_figure_id(figure), "md")
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(md_path, "\n".join(markdown))

    plt = pyplot()
    height = 0.25 * (max(len(rows), 1) + 1) + 0.5
    if why:  # the table alone would be a grid of "not enough steps": the reason comes first, in the figure
        fig, (top, ax) = plt.subplots(2, 1, figsize=(11, height + 0.9), height_ratios=[0.9, height])
        top.axis("off")
        style.explain_empty(top, why, width=120).set_fontsize(9)
    else:
        fig, ax = plt.subplots(figsize=(11, height))
    ax.axis("off")
    cells = [[row[h] for h in header] for row in rows] or [[NOT_RUN] * len(header)]
    table = ax.table(cellText=cells, colLabels=header, loc="center", cellLoc="left", colLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    table.auto_set_column_width(list(range(len(header))))
    fig.suptitle(title, fontsize=11)
    add_below(fig, "\n".join(textwrap.wrap(note, width=130)))
    return [*save(fig, out_dir, _figure_id(figure)), md_path]


# ------------------------------------------------------------------------------------------ dispatch

KIND_PLOTS: dict[str, Callable[..., list[Path]]] = {
    "per-layer": plot_per_layer,
    "matrix": plot_layer_similarity,
    "table": plot_spike_scores,
}
"""Figure kind (exoformer/registry/figure_kinds.py) -> plot function, for exoformer.report.figures.draw to dispatch on.
The lambda heatmaps (kind `heatmap`) are drawn there."""


def _analysis_series(figure: Any, *, allowed: Mapping | Sequence, extra: Sequence[str] = ()) -> list[str]:
    series = list(figure.get("series", ()))
    probes = [s.removeprefix("analysis.") for s in series if s.startswith("analysis.")]
    bad = [s for s in series if s.removeprefix("analysis.") not in allowed and s not in extra]
    if bad or not probes:
        raise UserError(f"figure {_figure_id(figure)!r}: series {bad or series} cannot be drawn by this plot",
                        where=f"figure {_figure_id(figure)}",
                        fix=f"use series from {sorted('analysis.' + a for a in allowed)}")
    return probes
