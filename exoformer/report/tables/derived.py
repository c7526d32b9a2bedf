"""Metrics computed across runs, as the registry declares them (a metric's `derived:`, experiments/tables.yaml).

Seed k of a table row is paired with seed k of the declared reference row (s42 with s42, s1337 with s1337,
...), each spec's run being the selection's pick (exoformer/report/reading/selection.py). One estimator each, computed
once per reading, so a table cell, the claims table, the `claims` verb and a figure title print the same value:
- `tokens_to_loss` (data efficiency): report/stats/data_efficiency.py, the reference's tokens / this row's tokens to
  reach the reference's smoothed final validation loss (for a row that ends above it, the reference's tokens to
  the row's final loss / the row's tokens), on curves smoothed so that one noisy point cannot move the crossing;
  the geometric mean over seed pairs with a t interval on the logs, for the whole run (the paper's "1.84x fewer
  tokens", v1 abstract) and for the stable phase before the WSD decay (under WSD a gap left at the end of the
  stable phase closes during the decay). No bound is printed: a crossing outside the logged points is "not
  measured";
- `reference_over_own` (the attention-sink ratio): report/stats/sink_ratio.py, the reference's mean `input` over this
  row's mean (ratio of means over paired seeds) with a delta-method t interval.
A row's value is that estimate (`row_derived`); each seed pair's own value (`pair_value`) fills the per-seed runs.
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from exoformer.registry.claims_schema import Derived
from exoformer.registry.registry import Registry
from exoformer.registry.tables import Metric
from exoformer.report.stats import data_efficiency as de
from exoformer.report.reading.selection import DERIVED_TASK, Picked, Selection
from exoformer.report.stats.sink_ratio import ESTIMATOR as SINK_ESTIMATOR
from exoformer.report.stats.sink_ratio import sink_ratio

METHOD_NOTE = ("tokens_to_<ref>_loss_ratio: the reference's tokens / this model's tokens to reach the reference's "
               "final validation loss (a model that ends above it: the reference's tokens to the model's final loss "
               f"/ the model's tokens), {de.SMOOTHING} of each curve; seeds paired by position, geometric mean "
               "(exoformer/report/tables/derived.py)")
NOTES = {"tokens_to_loss": METHOD_NOTE,
         "reference_over_own": f"attention_sink_ratio_vs_<ref>: {SINK_ESTIMATOR}"}
"""Estimator -> the note printed under a table that shows it."""
ANALYSIS_TASK = "analysis"


@dataclass(kw_only=True, slots=True, frozen=True)
class RowDerived:
    """A row's derived value against its reference, over paired seeds: the number every place prints and its
    text with the interval (and, for data efficiency, the stable phase too)."""

    value: float | None
    """None: not run, or not measured (`text` says which)."""
    text: str
    seeds: int


def _curve(selection: Selection, picked: Picked) -> de.Curve | None:
    tokens, losses = selection.curve(picked)
    return de.Curve.of(tokens, losses, where=str(picked.path)) if tokens else None


def _decay_start(selection: Selection, picked: Picked) -> float | None:
    """Tokens at which the reference run's WSD decay begins (None without a decay)."""
    train = selection.spec(picked.name).train
    stable_steps = round(train.steps * (1 - train.decay_fraction))
    return float(stable_steps * train.batch_tokens) if 0 < stable_steps < train.steps else None


def row_derived(selection: Selection, derived: Derived, specs: tuple[str, ...], reference: tuple[str, ...]
                ) -> RowDerived:
    """The row's derived value over its paired seeds (module docstring), computed once per reading."""
    key = ("row-derived", derived.estimator, derived.input, tuple(specs), tuple(reference))
    if key not in selection.memo:
        selection.memo[key] = _row_derived(selection, derived, specs, reference)
    return selection.memo[key]


def _row_derived(selection: Selection, derived: Derived, specs: tuple[str, ...], reference: tuple[str, ...]
                 ) -> RowDerived:
    pairs = [(mine, theirs) for mine, theirs in zip(selection.row_runs(specs), selection.row_runs(reference))
             if mine is not None and theirs is not None]
    if derived.estimator == "tokens_to_loss":
        curves = [(a, b) for mine, theirs in pairs
                  if (a := _curve(selection, mine)) is not None and (b := _curve(selection, theirs)) is not None]
        if not curves:
            return RowDerived(value=None, text="not run", seeds=0)
        decay = _decay_start(selection, pairs[0][1])
        phases = de.data_efficiency([a for a, _ in curves], [b for _, b in curves], decay_start=decay)
        whole = phases[de.WHOLE]
        return RowDerived(value=whole.estimate, text=_efficiency_text(phases), seeds=len(curves))
    values = [(run_metric(theirs.rows, derived.input), run_metric(mine.rows, derived.input)) for mine, theirs in pairs]
    values = [(ref, own) for ref, own in values if ref is not None and own is not None]
    if not values or sum(own for _, own in values) <= 0:
        return RowDerived(value=None, text="not run", seeds=0)
    ratio = sink_ratio([ref for ref, _ in values], [own for _, own in values])
    return RowDerived(value=ratio.estimate, text=ratio.text(), seeds=ratio.seeds)


def _efficiency_text(phases: dict[str, de.Efficiency]) -> str:
    """"1.84x [1.52, 2.23] whole run, 2.10x [...] stable phase": each phase's estimate with its 95% interval,
    or why it is not measured (report/stats/data_efficiency.py)."""
    parts = []
    for phase in (de.WHOLE, de.STABLE):
        e = phases.get(phase)
        if e is None:
            continue
        if e.estimate is None:
            parts.append(e.text())
        else:
            interval = f" [{e.ci[0]:.2f}, {e.ci[1]:.2f}]" if e.ci is not None else ""
            parts.append(f"{e.estimate:.2f}x{interval} {phase}")
    seeds = len(phases[de.WHOLE].per_seed)
    return ", ".join(parts) + (" (one seed: no interval)" if seeds == 1 else f" ({seeds} seeds)")


def run_metric(rows: pd.DataFrame, metric: str) -> float | None:
    """The last value of a per-run metric the analyse stage wrote."""
    hit = rows[(rows["task"] == ANALYSIS_TASK) & (rows["metric"] == metric)]["value"].dropna()
    return float(hit.iloc[-1]) if not hit.empty else None


def derived_metrics(registry: Registry, columns: tuple[str, ...] | list[str]) -> list[Metric]:
    """The derived metrics among `columns`."""
    return [registry.metrics[c] for c in columns if c in registry.metrics and registry.metrics[c].derived]


def reference_specs(selection: Selection, metric: Metric) -> tuple[str, ...]:
    ref = metric.derived
    return next((r.specs for r in selection.registry.tables[ref.table].rows if r.id == ref.row), ())


def seed_value(selection: Selection, metric: Metric, specs: tuple[str, ...], k: int) -> float | None:
    """The derived metric of seed position k of a row with `specs` against seed k of its reference row: the row
    estimator on that one seed pair (None without both runs, or when the pair is not measured)."""
    reference = reference_specs(selection, metric)
    return row_derived(selection, metric.derived, (specs[k],), (reference[k],)).value if k < len(reference) else None


def with_derived(selection: Selection, picked: Picked, metrics: list[Metric], specs: tuple[str, ...],
                 k: int) -> pd.DataFrame:
    """The picked run's rows plus one row (task "derived") per derived metric it has a value of, so tables,
    diff and the comparability notes treat it as any other metric."""
    template = picked.rows.iloc[0].to_dict()
    added = []
    for metric in metrics:
        value = seed_value(selection, metric, specs, k)
        if value is not None:
            n = len(selection.curve(picked)[0]) if metric.derived.estimator == "tokens_to_loss" else None
            added.append({**template, "task": DERIVED_TASK, "metric": metric.id, "value": value, "stderr": None,
                          "n": n})
    if not added:
        return picked.rows
    return pd.concat([picked.rows, pd.DataFrame(added, columns=picked.rows.columns)], ignore_index=True)


def notes_for(metrics: list[Metric]) -> list[str]:
    """The method notes of the estimators behind `metrics`."""
    return list(dict.fromkeys(NOTES[m.derived.estimator] for m in metrics if m.derived.estimator in NOTES))
