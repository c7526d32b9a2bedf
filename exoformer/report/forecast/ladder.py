"""The finished runs of a table's ladder, read through the one selection (report/reading/selection.py), and the point
(N, D) each row is forecast at.

N is the cost model's parameter count of the built model (budget/cost.py: every parameter but the input embedding,
counted on the meta device by budget/module_figures.py), D = train.steps x train.batch_tokens; both come from the
spec as the registry resolves it, so the target follows the preset's current steps. The loss is ln(val_ppl), the
log of the table's perplexity cell, so exp of the law is that cell (docs/forecast.md).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from exoformer.budget.cost import flops_per_token, model_compute_params, scored_documents
from exoformer.errors import UserError
from exoformer.registry.ladders import ladder_rows
from exoformer.registry.registry import Registry
from exoformer.registry.spec import Spec
from exoformer.report.reading.selection import Selection, read
from exoformer.report.tables.build import seed_cell, run_values


@dataclass(frozen=True, slots=True)
class LadderRun:
    spec: str
    params: float
    tokens: float
    flops_per_token: float
    loss: float
    """ln(val_ppl) of the run: the law's loss."""
    values: dict[str, float]
    """Column -> the run's value in the table's units (% for accuracies), and task -> accuracy (%)."""
    documents: dict[str, int] = field(default_factory=dict)
    """Task -> the documents its evaluation scored (its eval.limit, or the task's split)."""


@dataclass(frozen=True, slots=True)
class Target:
    spec: str
    preset: str
    params: float
    tokens: float
    flops_per_token: float
    documents: dict[str, int] = field(default_factory=dict)
    """Task -> the documents a run at the target scores."""


@dataclass(slots=True)
class Ladder:
    table: str
    group: str
    runs: dict[str, list[LadderRun]]
    """Row id -> its ladder runs."""
    presets: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    specs: dict[str, Spec] = field(default_factory=dict)
    """One resolved ladder spec per preset read (what the ladder trained on, for comparability)."""


def _glob(names: list[str]) -> str:
    prefix = os.path.commonprefix(names)
    return f"'{prefix}*'" if len(prefix) > 2 else names[0]


def point(spec: Spec) -> tuple[float, float, float]:
    """(N, D, training FLOPs per token) of a resolved spec."""
    return (float(model_compute_params(spec.model)), float(spec.train.tokens),
            flops_per_token(spec.model, spec.train.seq_len))


def read_ladder(registry: Registry, runs_root: str | os.PathLike, table_id: str, group: str) -> Ladder:
    """Every run of the ladder `group` of `table_id`; one UserError naming the runs that are missing."""
    rows = ladder_rows(registry, table_id, group)
    names = [name for specs in rows.values() for name in specs]
    selection = read(registry, Path(runs_root), names, what=f"ladder {group}")
    table = registry.tables[table_id]
    out = Ladder(table=table_id, group=group, runs={})
    missing = []
    for row_id, specs in rows.items():
        got = []
        for name in specs:
            picked = selection.pick(name)
            if picked is None or picked.rows.empty:
                missing.append(name)
                continue
            spec = selection.spec(name, picked.run.preset)
            out.presets.add(spec.preset)
            out.specs.setdefault(spec.preset, spec)
            values = _values(picked.rows, table, name)
            ppl = values.get("val_ppl")
            if ppl is None or not math.isfinite(ppl) or ppl <= 0:
                missing.append(f"{name} (no val_ppl)")
                continue
            params, tokens, per_token = point(spec)
            got.append(LadderRun(spec=name, params=params, tokens=tokens, flops_per_token=per_token,
                                 loss=math.log(ppl), values=values, documents=_documents(spec)))
        out.runs[row_id] = got
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise UserError(f"ladder {group} of table {table_id}: {len(missing)} of {len(names)} runs have no results "
                        f"({shown})", where=str(runs_root),
                        fix=f"run them: reproduce.py run {_glob(names)} (then predict again)")
    out.notes = selection.notes() + ([selection.note] if selection.note else [])
    return out


def _values(rows, table, name: str) -> dict[str, float]:
    """The run's table columns and per-task accuracies, read as the table reads a cell (report/tables/build.py)."""
    values = run_values(rows)
    out = {}
    for column in (*table.columns, *table.convention):
        got = seed_cell(values, column, table.convention, name, table)
        if got is not None and got[0] is not None:
            out[column] = float(got[0])
    return out


def _documents(spec: Spec) -> dict[str, int]:
    return {task: docs for task, (docs, _) in scored_documents(spec).items()}


def targets(selection: Selection, registry: Registry, table_id: str, preset: str) -> dict[str, Target]:
    """Row id -> the point its paper run (first spec) is forecast at under `preset`."""
    out = {}
    for row in registry.tables[table_id].rows:
        spec = selection.spec(row.specs[0], preset)
        params, tokens, per_token = point(spec)
        out[row.id] = Target(spec=row.specs[0], preset=preset, params=params, tokens=tokens, flops_per_token=per_token,
                             documents=_documents(spec))
    return out
