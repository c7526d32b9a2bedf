"""Cells of the `claims` table computed across runs: data efficiency and the attention-sink ratio.

For each spec of a `claims` table row and seed position k (row specs are paired by position with Table 1's
base and gated rows: s42 with s42, s1337 with s1337, ...):
- `tokens_to_<ref>_loss_ratio` (ref = base, gated): the reference run's tokens / this run's tokens to first
  reach the reference's final validation loss, each read off its in-training validation curve
  (the training log, every `train.val_every` steps) by linear interpolation between the two logged points that
  bracket the target (report/figures.tokens_to_reach, the same method the val-loss figure's ratios use). A
  curve that never reaches the target gives no value. (The paper: "matches the baseline's validation loss with
  1.84x fewer tokens", v1 abstract.)
- `attention_sink_ratio_vs_gated`: the gated run's layer-mean first-token attention / this run's (analyse
  stage, metric first_token_attention_layer_mean).
Rows are added to the long table under task "derived", with the run's identity columns, so tables, diff and
the comparability notes treat them as any other metric. `token_similarity_max` is the analyse stage's own.
Torch-free.
"""

from __future__ import annotations

import pandas as pd

from exoformer.registry.registry import Registry
from exoformer.runs.run_index import CHECKPOINT
from exoformer.rundir import RunDir

DERIVED_TASK = "derived"
CLAIMS_TABLE = "claims"
REFERENCE_TABLE = "table1"
REFERENCES = ("base", "gated")
SINK = "first_token_attention_layer_mean"
SINK_RATIO = "attention_sink_ratio_vs_gated"
METHOD_NOTE = ("tokens_to_<ref>_loss_ratio: the reference's tokens / this model's tokens to first reach the "
               "reference's final validation loss, linear interpolation between the logged validation points "
               "(every train.val_every steps) of each curve, seeds paired by position")


def _ratio_column(ref: str) -> str:
    return f"tokens_to_{ref}_loss_ratio"


def add_derived_rows(registry: Registry, frame: pd.DataFrame, *, preset: str | None = None,
                     overrides: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """`frame` plus the derived rows of every `claims`-table spec whose runs (and references) have the inputs."""
    from exoformer.report.figures import tokens_to_reach
    from exoformer.report.tables import pick_runs

    if CLAIMS_TABLE not in registry.tables or REFERENCE_TABLE not in registry.tables or frame.empty:
        return frame
    ours = frame[frame["source"] != CHECKPOINT] if "source" in frame.columns else frame
    references = {r.id: r for r in registry.tables[REFERENCE_TABLE].rows}

    def picked(name: str) -> pd.DataFrame:
        spec = registry.resolve(name, preset=preset, overrides=overrides)
        return pick_runs(ours[ours["preset"] == spec.preset], name, spec.hash12, [], registry=registry,
                         exact=bool(overrides))

    def sink(rows: pd.DataFrame) -> float | None:
        hit = rows[(rows["task"] == "analysis") & (rows["metric"] == SINK)]["value"].dropna()
        return float(hit.iloc[-1]) if not hit.empty else None

    added = []
    for row in registry.tables[CLAIMS_TABLE].rows:
        for k, name in enumerate(row.specs):
            rows = picked(name)
            if rows.empty:
                continue
            template = rows.iloc[0].to_dict()
            tokens, losses = RunDir(template["run_dir"]).val_curve()
            for ref in REFERENCES:
                if ref not in references or k >= len(references[ref].specs):
                    continue
                ref_rows = picked(references[ref].specs[k])
                if ref_rows.empty:
                    continue
                ref_tokens, ref_losses = RunDir(ref_rows["run_dir"].iloc[0]).val_curve()
                if not ref_tokens or not tokens:
                    continue
                target = ref_losses[-1]
                reach, reach_ref = tokens_to_reach(tokens, losses, target), tokens_to_reach(ref_tokens, ref_losses,
                                                                                            target)
                if reach and reach_ref:
                    added.append({**template, "task": DERIVED_TASK, "metric": _ratio_column(ref),
                                  "value": reach_ref / reach, "stderr": None, "n": len(tokens)})
            if "gated" in references and k < len(references["gated"].specs):
                gated_rows = picked(references["gated"].specs[k])
                mine, theirs = sink(rows), None if gated_rows.empty else sink(gated_rows)
                if mine and theirs is not None:
                    added.append({**template, "task": DERIVED_TASK, "metric": SINK_RATIO, "value": theirs / mine,
                                  "stderr": None, "n": None})
    if not added:
        return frame
    out = pd.concat([frame, pd.DataFrame(added, columns=frame.columns)], ignore_index=True)
    out.attrs = dict(frame.attrs)
    return out
