"""Metrics computed across runs, as the registry declares them (a metric's `derived:`, experiments/tables.yaml).

Seed k of a table row is paired with seed k of the declared reference row (s42 with s42, s1337 with s1337,
...), each spec's run being the selection's pick (exoformer/report/selection.py):
- `tokens_to_loss` (data efficiency): the reference run's tokens / this run's tokens to first reach the
  reference's final validation loss, each read off its in-training validation curve (the training log, every
  `train.val_every` steps) by linear interpolation between the two logged points that bracket the target. A
  curve that never reaches the target gives no value. (The paper: "matches the baseline's validation loss with
  1.84x fewer tokens", v1 abstract.)
- `reference_over_own`: the reference run's `input` metric / this run's (the attention-sink ratio: the gated
  run's layer-mean first-token attention over this run's).
Each value is computed once per reading (the selection keeps it), so the claims table, the `claims` verb and
a figure's title print the same number. A row's value is the mean over its seed pairs (`row_value`).
Torch-free.
"""

from __future__ import annotations

import statistics

import pandas as pd

from exoformer.registry.claims_schema import Derived
from exoformer.registry.registry import Registry
from exoformer.registry.tables import Metric
from exoformer.report.selection import DERIVED_TASK, Picked, Selection

METHOD_NOTE = ("tokens_to_<ref>_loss_ratio: the reference's tokens / this model's tokens to first reach the "
               "reference's final validation loss, linear interpolation between the logged validation points "
               "(every train.val_every steps) of each curve, seeds paired by position")
NOTES = {"tokens_to_loss": METHOD_NOTE}
"""Estimator -> the note printed under a table that shows it."""
ANALYSIS_TASK = "analysis"


def tokens_to_reach(tokens: list[float], losses: list[float], target: float) -> float | None:
    """Tokens at which the curve first reaches `target` (linear interpolation between logged points)."""
    for i, (t, loss) in enumerate(zip(tokens, losses)):
        if loss <= target:
            if i == 0:
                return t
            t0, l0 = tokens[i - 1], losses[i - 1]
            return t0 + (t - t0) * (l0 - target) / (l0 - loss)
    return None


def data_efficiency(curve: tuple[list[float], list[float]], reference: tuple[list[float], list[float]]
                    ) -> float | None:
    """The reference's tokens / this curve's tokens to first reach the reference's final validation loss."""
    (tokens, losses), (ref_tokens, ref_losses) = curve, reference
    if not tokens or not ref_tokens:
        return None
    target = ref_losses[-1]
    reach, reach_ref = tokens_to_reach(tokens, losses, target), tokens_to_reach(ref_tokens, ref_losses, target)
    return reach_ref / reach if reach and reach_ref else None


def sink_ratio(own: float | None, reference: float | None) -> float | None:
    """The reference's value / this run's (the attention-sink ratio vs gated attention)."""
    return reference / own if own and reference is not None else None


def run_metric(rows: pd.DataFrame, metric: str) -> float | None:
    """The last value of a per-run metric the analyse stage wrote."""
    hit = rows[(rows["task"] == ANALYSIS_TASK) & (rows["metric"] == metric)]["value"].dropna()
    return float(hit.iloc[-1]) if not hit.empty else None


def derived_metrics(registry: Registry, columns: tuple[str, ...] | list[str]) -> list[Metric]:
    """The derived metrics among `columns`."""
    return [registry.metrics[c] for c in columns if c in registry.metrics and registry.metrics[c].derived]


def pair_value(selection: Selection, derived: Derived, own: str, reference: str) -> float | None:
    """The derived value of spec `own` against spec `reference` (their picked runs); None without both runs and
    the inputs. Computed once per reading: every reader of it gets the same number."""
    key = ("derived", derived.estimator, derived.input, own, reference)
    if key not in selection.memo:
        mine, theirs = selection.row_runs([own, reference])
        if mine is None or theirs is None:
            value = None
        elif derived.estimator == "tokens_to_loss":
            value = data_efficiency(selection.curve(mine), selection.curve(theirs))
        else:
            value = sink_ratio(run_metric(mine.rows, derived.input), run_metric(theirs.rows, derived.input))
        selection.memo[key] = value
    return selection.memo[key]


def seed_value(selection: Selection, metric: Metric, specs: tuple[str, ...], k: int) -> float | None:
    """The derived metric of seed position k of a row with `specs`, against seed k of its reference row."""
    ref = metric.derived
    reference = next((r.specs for r in selection.registry.tables[ref.table].rows if r.id == ref.row), ())
    return pair_value(selection, ref, specs[k], reference[k]) if k < len(reference) else None


def row_value(selection: Selection, derived: Derived, specs: tuple[str, ...], reference: tuple[str, ...]
              ) -> float | None:
    """The mean over a row's seed pairs (seed k with the reference's seed k) of a derived value: what the claims
    table's cell, the `claims` verb and a figure's title show."""
    values = [v for own, ref in zip(specs, reference) if (v := pair_value(selection, derived, own, ref)) is not None]
    return statistics.fmean(values) if values else None


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
