"""`figure NAME`: draw a declared figure (experiments/figures.yaml) from run directories into PNG and PDF.

Dispatch is by the figure's declared kind: `curves` (validation loss vs tokens with the data-efficiency
ratios), `bars` of evaluation results (accuracy bar chart with error bars), `heatmap` (lambda ratio
heatmaps of one run, read from its checkpoint). Figures of analysis outputs (series `analysis.*`) go to
the analysis engineer's `exoformer.report.analysis_plots`, looked up by analysis kind (the figure id,
e.g. `attention-sink`) in ANALYSIS_KINDS; each such function takes (figure declaration dict, list of
(spec name, label, run_dir), output directory) and returns the written paths. matplotlib only (Agg);
torch is imported only for the heatmaps (checkpoints).
"""

from __future__ import annotations

import importlib
import json
import os
import textwrap
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from exoformer.errors import UserError, did_you_mean
from exoformer.harness.registry import Registry
from exoformer.harness.tables import Figure
from exoformer.report.collect import RunInfo, find_runs

DEFAULT_OUT = "figures"
REFERENCE_ROWS = ("base", "gated")
"""Rows whose final validation loss the data-efficiency ratios are measured against (paper: 1.84x vs the
base model, ~1.5x vs gated attention; v1/v2 abstracts)."""
ANALYSIS_KINDS = ("attention-sink", "token-similarity", "pca-components", "similarity-to-embeddings",
                  "gate-sparsity", "layer-similarity", "spike-scores")
"""Analysis figure kinds drawn by exoformer.report.analysis_plots (function `plot_<kind with _>` or its
PLOTS table)."""
PATHS = ("q", "k", "v", "g")
PATH_NAMES = {"q": "Query", "k": "Key", "v": "Value", "g": "Gate"}

RunRef = tuple[str, str, Path]
"""(spec name, display label, run directory)."""


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, out_dir: str | os.PathLike, stem: str) -> list[Path]:
    """Write `stem`.png and `stem`.pdf into out_dir (each written to a temp name, then renamed)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix in ("png", "pdf"):
        path = out / f"{stem}.{suffix}"
        tmp = out / f".{stem}.{suffix}.tmp"
        fig.savefig(tmp, format=suffix, dpi=150, bbox_inches="tight")
        os.replace(tmp, path)
        written.append(path)
    _pyplot().close(fig)
    return written


# ------------------------------------------------------------------------------------------ run selection

def figure_runs(registry: Registry, figure: Figure, runs_root: str | os.PathLike, *,
                preset: str | None = None) -> list[RunRef]:
    """(spec, label, run_dir) of the figure's specs that have a run directory, in declaration order.

    A spec listed through `table:ID` is labelled with its row label; the current spec hash is preferred,
    else the newest run of that spec and preset.
    """
    labels = {}
    for item in figure.specs:
        if item.startswith("table:") and item[6:] in registry.tables:
            for row in registry.tables[item[6:]].rows:
                for i, name in enumerate(row.specs):
                    labels.setdefault(name, row.label if i == 0 else f"{row.label} (seed {name.rsplit('-s', 1)[-1]})")
    runs = find_runs(runs_root, preset=preset)
    out = []
    for name in registry.figure_specs(figure):
        spec = registry.resolve(name, preset=preset)
        mine = [r for r in runs if r.spec == name and r.preset == spec.preset]
        if not mine:
            continue
        chosen = next((r for r in mine if r.hash12 == spec.hash12), None) or max(mine, key=_mtime)
        out.append((name, labels.get(name, name), chosen.path))
    return out


def _mtime(run: RunInfo) -> float:
    return run.path.stat().st_mtime


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

def read_val_curve(run_dir: Path) -> tuple[list[float], list[float]]:
    """(tokens, val_loss) of the validation lines of metrics.jsonl, in step order."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return [], []
    points = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line of a killed run
        if isinstance(rec, dict) and rec.get("kind") == "val" and rec.get("val_loss") is not None:
            points[int(rec["step"])] = (float(rec["tokens"]), float(rec["val_loss"]))
    ordered = [points[s] for s in sorted(points)]
    return [p[0] for p in ordered], [p[1] for p in ordered]


def tokens_to_reach(tokens: list[float], losses: list[float], target: float) -> float | None:
    """Tokens at which the curve first reaches `target` (linear interpolation between logged points)."""
    for i, (t, loss) in enumerate(zip(tokens, losses)):
        if loss <= target:
            if i == 0:
                return t
            t0, l0 = tokens[i - 1], losses[i - 1]
            return t0 + (t - t0) * (l0 - target) / (l0 - loss)
    return None


def efficiency_ratios(curves: dict[str, tuple[list[float], list[float]]],
                      references: tuple[str, ...] = REFERENCE_ROWS) -> dict[str, dict[str, float | None]]:
    """reference -> model -> (reference's tokens / model's tokens to reach the reference's final val loss)."""
    out: dict[str, dict[str, float | None]] = {}
    for ref in references:
        if ref not in curves or not curves[ref][0]:
            continue
        ref_tokens, ref_losses = curves[ref]
        target = ref_losses[-1]
        reach_ref = tokens_to_reach(ref_tokens, ref_losses, target)
        out[ref] = {}
        for name, (tokens, losses) in curves.items():
            reach = tokens_to_reach(tokens, losses, target)
            out[ref][name] = None if reach in (None, 0) or reach_ref is None else reach_ref / reach
    return out


def plot_curves(registry: Registry, figure: Figure, refs: list[RunRef], out_dir: str | os.PathLike) -> list[Path]:
    plt = _pyplot()
    rows = first_per_row(registry, figure, refs)
    curves = {rid: read_val_curve(ref[2]) for rid, ref in rows}
    labels = {rid: ref[1] for rid, ref in rows}
    ratios = efficiency_ratios(curves)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for rid, (tokens, losses) in curves.items():
        if tokens:
            ax.plot(tokens, losses, label=labels[rid], linewidth=1.4)
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss")
    ax.set_title(figure.title, fontsize=9)
    ax.grid(alpha=0.3)
    if any(tokens for tokens, _ in curves.values()):
        ax.legend(fontsize=7)
    lines = []
    for ref, by_model in ratios.items():
        parts = [f"{m} {r:.2f}x" for m, r in by_model.items() if r is not None and m != ref]
        if parts:
            lines += textwrap.wrap(f"data efficiency vs {ref} (its tokens / a model's tokens to reach its final "
                                   f"val loss): " + ", ".join(parts), width=120)
    if lines:
        fig.text(0.01, -0.03, "\n".join(lines), fontsize=6, va="top")
    written = save(fig, out_dir, figure.id)
    from exoformer.io import atomic_write_json

    written.append(atomic_write_json(Path(out_dir) / f"{figure.id}.ratios.json",
                                     {ref: {labels[m]: r for m, r in d.items()} for ref, d in ratios.items()}))
    return written


# ------------------------------------------------------------------------------------------ bars

def plot_accuracy_bars(registry: Registry, figure: Figure, refs: list[RunRef], out_dir: str | os.PathLike, *,
                       runs_root: str | os.PathLike, preset: str | None) -> list[Path]:
    """Grouped bars: one group per task (and avg6), one bar per table row; error bars = seed std, else stderr."""
    from exoformer.report.collect import collect
    from exoformer.report.tables import build_table

    table_ids = [s[6:] for s in figure.specs if s.startswith("table:")]
    if not table_ids:
        raise UserError(f"figure {figure.id!r}: an accuracy bar chart needs a table (specs: [table:ID])",
                        where=figure.source, fix="write specs: [table:table1]")
    built = build_table(registry, table_ids[0], collect(runs_root, preset=preset), preset=preset,
                        runs_root=runs_root)
    columns = [s.split(".", 1)[1] for s in figure.series if s.startswith("eval.")]
    plt = _pyplot()
    rows = built.table.rows
    fig, ax = plt.subplots(figsize=(min(16.0, max(7.0, 0.22 * len(columns) * max(1, len(rows)))), 4.5))
    width = 0.8 / max(1, len(rows))
    for i, row in enumerate(rows):
        xs, ys, errs, reported = [], [], [], []
        for j, column in enumerate(columns):
            cell = built.cell(row, column)
            if cell.value is None:
                continue
            xs.append(j + (i - (len(rows) - 1) / 2) * width)
            ys.append(cell.value)
            errs.append(cell.seed_sd if cell.seed_sd is not None else (cell.stderr or 0.0))
            reported.append(None if cell.reported is None else cell.reported.value)
        if xs:
            ax.bar(xs, ys, width=width, yerr=errs, capsize=2, label=row.label)
            marks = [(x, r) for x, r in zip(xs, reported) if r is not None]
            if marks:
                ax.scatter([m[0] for m in marks], [m[1] for m in marks], marker="_", s=120,
                           color="black", linewidths=1.5, zorder=3)
    ax.set_xticks(range(len(columns)), columns, rotation=20, fontsize=8)
    ax.set_ylabel("accuracy (%)")
    note = " — smoke preset: not comparable with the paper" if built.smoke else ""
    ax.set_title(f"{figure.title}{note}\n(error bars: seed std, else lm-eval stderr; dashes: paper)", fontsize=8)
    ax.legend(fontsize=6, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    return save(fig, out_dir, figure.id)


# ------------------------------------------------------------------------------------------ lambda heatmaps

def lambda_ratios(state: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """path -> (n_layer x C) array of coef_anchor / coef_self, NaN in non-mixing layers; None for unmixed paths.

    C = n_head * d_head (elementwise), n_head (headwise) or 1 (scalar). Static coefficients only: a dynamic
    model's per-token scales multiply them at run time (paper Eq. 12) and are not in the checkpoint.
    """
    import numpy as np

    n_layer, n_head, d_model = config["n_layer"], config["n_head"], config["d_model"]
    width = {"elementwise": d_model, "headwise": n_head, "scalar": 1}[config.get("granularity", "elementwise")]
    mixed = set(config.get("mix_paths") or ())
    params = {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in state.items()}
    out: dict[str, Any] = {}
    for path in PATHS:
        if path not in mixed:
            out[path] = None
            continue
        grid = np.full((n_layer, width), np.nan)
        for layer in range(n_layer):
            anchor = params.get(f"blocks.{layer}.attn.mix.{path}.coef_anchor")
            own = params.get(f"blocks.{layer}.attn.mix.{path}.coef_self")
            if anchor is None or own is None:
                continue
            a = anchor.detach().float().reshape(-1).numpy()
            s = own.detach().float().reshape(-1).numpy()
            with np.errstate(divide="ignore", invalid="ignore"):
                grid[layer] = a / s
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


def plot_lambda_run(name: str, label: str, run_dir: Path, out_dir: str | os.PathLike, stem: str,
                    title: str) -> list[Path]:
    from exoformer.train.checkpoint import latest_checkpoint, load_checkpoint

    ckpt = latest_checkpoint(Path(run_dir) / "checkpoints")
    if ckpt is None:
        raise UserError("no complete checkpoint for the lambda heatmaps", where=str(Path(run_dir) / "checkpoints"),
                        fix=f"train it first: reproduce.py run {name}")
    state = load_checkpoint(ckpt)
    config = state["model_config"]
    ratios = lambda_ratios(state["model"], config)
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.5))
    granularity = config.get("granularity", "elementwise")
    xlabel = {"elementwise": "channel (head-major)", "headwise": "head", "scalar": "(single coefficient)"}[granularity]
    for ax, path in zip(axes.flat, ("v", "k", "q", "g")):  # the paper's panel order: Value, Key, Query, Gate
        grid = ratios[path]
        ax.set_title(f"{PATH_NAMES[path]}: λ_anchor / λ_self", fontsize=9)
        if grid is None:
            ax.text(0.5, 0.5, "not applicable\n(path not mixed)", ha="center", va="center", fontsize=10,
                    transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        limits = colour_limits(grid)
        image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="coolwarm",
                          vmin=limits[0] if limits else None, vmax=limits[1] if limits else None)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
        ax.set_yticks(range(grid.shape[0]))
        fig.colorbar(image, ax=ax, fraction=0.046)
    dynamic = " (static coefficients; per-token scales not included)" if config.get("dynamic") else ""
    who = name if label == name else f"{label} [{name}]"
    fig.suptitle(f"{title}\n{who}{dynamic}; colour: 1-99th percentile; blank: non-mixing layer",
                 fontsize=9)
    fig.tight_layout()
    return save(fig, out_dir, stem)


def plot_lambda_heatmaps(registry: Registry, figure: Figure, refs: list[RunRef],
                         out_dir: str | os.PathLike) -> list[Path]:
    """One 2 x 2 figure per run that has a checkpoint (runs still without one are left out)."""
    from exoformer.train.checkpoint import latest_checkpoint

    with_ckpt = [ref for ref in refs if latest_checkpoint(Path(ref[2]) / "checkpoints") is not None]
    if not with_ckpt:
        raise UserError(f"figure {figure.id!r}: none of its runs has a checkpoint yet",
                        where=", ".join(str(ref[2]) for ref in refs),
                        fix=f"run them first: reproduce.py run {figure.id}")
    written = []
    for name, label, run_dir in with_ckpt:
        written += plot_lambda_run(name, label, run_dir, out_dir, f"{figure.id}-{name}", figure.title)
    return written


# ------------------------------------------------------------------------------------------ dispatch

def analysis_kind(figure: Figure) -> str | None:
    """The analysis plot kind of a figure of analysis outputs (its id), None for the kinds drawn here."""
    if figure.kind == "heatmap":
        return None
    if any(s.startswith("analysis.") for s in figure.series):
        return figure.id
    return None


def analysis_plotter(kind: str) -> Callable[..., list[Path]]:
    """The analysis engineer's plot function for `kind`; a one-line error when it is not available."""
    try:
        module = importlib.import_module("exoformer.report.analysis_plots")
    except ModuleNotFoundError as err:
        if err.name != "exoformer.report.analysis_plots":
            raise
        module = None
    table = getattr(module, "PLOTS", None) if module else None
    fn = (table or {}).get(kind) if isinstance(table, dict) else None
    fn = fn or (getattr(module, "plot_" + kind.replace("-", "_"), None) if module else None)
    if fn is None:
        raise UserError(f"figure kind {kind} not available", where="exoformer/report/analysis_plots.py",
                        fix="available here: curves, bars (eval), heatmap; analysis kinds: "
                            + ", ".join(ANALYSIS_KINDS))
    return fn


def draw(registry: Registry, figure_id: str, *, runs_root: str | os.PathLike, out_dir: str | os.PathLike = DEFAULT_OUT,
         preset: str | None = None) -> list[Path]:
    """Draw one declared figure; returns the written paths."""
    if figure_id not in registry.figures:
        raise UserError(f"unknown figure {figure_id!r}", where="FIGURE", fix=did_you_mean(figure_id, registry.figures))
    figure = registry.figures[figure_id]
    refs = figure_runs(registry, figure, runs_root, preset=preset)
    kind = analysis_kind(figure)
    if kind is not None:
        declaration = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(figure).items()}
        return list(analysis_plotter(kind)(declaration, refs, Path(out_dir)))
    if not refs:
        of_preset = f" (preset {preset})" if preset else ""
        raise UserError(f"no runs for figure {figure_id!r} under {runs_root}{of_preset}",
                        where="FIGURE", fix=f"run them first: reproduce.py run {figure_id}"
                        + (f" --preset {preset}" if preset else ""))
    if figure.kind == "curves":
        return plot_curves(registry, figure, refs, out_dir)
    if figure.kind == "bars":
        return plot_accuracy_bars(registry, figure, refs, out_dir, runs_root=runs_root, preset=preset)
    if figure.kind == "heatmap":
        return plot_lambda_heatmaps(registry, figure, refs, out_dir)
    raise UserError(f"figure kind {figure.kind} not available", where=figure.source,
                    fix="kinds drawn here: curves, bars, heatmap")
