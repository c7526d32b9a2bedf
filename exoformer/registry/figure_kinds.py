"""What each figure kind of experiments/figures.yaml draws, so that a declared kind is checked, not trusted.

A figure is drawn by its `kind` alone (exoformer/report/figures/draw.py has one plot function per kind), so its
id can be anything; `validate` calls `check_figure_kinds` to reject a figure whose kind cannot draw its
series. Torch-free and free of report imports (the report depends on the harness, never the reverse).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exoformer.errors import UserError, did_you_mean
from exoformer.registry.tables import TASKS


@dataclass(kw_only=True, slots=True, frozen=True)
class FigureKind:
    name: str
    description: str
    draws: tuple[str, ...]
    """Series the kind plots; a figure of this kind names at least one."""
    companions: tuple[str, ...] = ()
    """Series the kind may also name, shown beside what it draws (the spike table's raw logs)."""
    needs_table: bool = False
    """Whether its specs must include a `table:ID` (the figure draws that table's cells)."""

    def accepts(self, series: str) -> bool:
        return series in self.draws or series in self.companions


PER_LAYER_PROBES = ("first_token_attention", "attention_entropy", "token_similarity", "similarity_to_embeddings",
                    "pca_components", "gate_stats", "massive_activation")
"""Analysis probes with one value per layer (or per hidden state), drawn as lines over depth."""

KINDS: dict[str, FigureKind] = {k.name: k for k in (
    FigureKind(name="curves", draws=("val_loss",),
               description="validation loss vs training tokens, one line per row, with data-efficiency ratios"),
    FigureKind(name="bars", draws=tuple(f"eval.{t}" for t in (*TASKS, "avg6")), needs_table=True,
               description="grouped bars of a table's accuracy cells per task, one bar per row, paper dashes"),
    FigureKind(name="heatmap", draws=("analysis.coefficient_stats",),
               description="lambda ratio heatmaps (anchor / self coefficient) per layer and channel, per run"),
    FigureKind(name="per-layer", draws=tuple(f"analysis.{p}" for p in PER_LAYER_PROBES),
               description="per-layer probe lines, one per model (mean over seeds, min-max band)"),
    FigureKind(name="matrix", draws=("analysis.layer_similarity",),
               description="one layer-to-layer similarity matrix per model"),
    FigureKind(name="table", draws=("analysis.spike_scores",), companions=("grad_norm", "loss"),
               description="the spike-score table: our scores beside the paper's, as PNG, PDF and Markdown"),
)}
"""Kind name -> what it draws. exoformer/report/figures/draw.py has a plot function for each."""


def check_figure(figure: Any) -> None:
    """A one-line UserError when `figure`'s kind is unknown or cannot draw one of its series."""
    kind = KINDS.get(figure.kind)
    if kind is None:
        raise UserError(f"figure {figure.id!r}: unknown kind {figure.kind!r}", where=figure.source,
                        fix=did_you_mean(figure.kind, KINDS))
    others = [s for s in figure.series if not kind.accepts(s)]
    if others:
        able = sorted(k.name for k in KINDS.values() if k.accepts(others[0]))
        raise UserError(f"figure {figure.id!r}: kind {kind.name!r} ({kind.description}) cannot draw series "
                        f"{others[0]!r}", where=figure.source,
                        fix=(f"use kind {' or '.join(able)}" if able else "remove that series")
                        + f"; kind {kind.name} draws {', '.join(kind.draws)}")
    if not any(s in kind.draws for s in figure.series):
        raise UserError(f"figure {figure.id!r}: kind {kind.name!r} draws none of its series", where=figure.source,
                        fix=f"add one of {', '.join(kind.draws)}")
    if kind.needs_table and not any(s.startswith("table:") for s in figure.specs):
        raise UserError(f"figure {figure.id!r}: kind {kind.name!r} draws a table's cells but names no table",
                        where=figure.source, fix="add specs: [table:ID]")


def check_figure_kinds(registry: Any) -> None:
    """check_figure for every figure of the registry (the `validate` verb's kind check)."""
    for figure in registry.figures.values():
        check_figure(figure)
