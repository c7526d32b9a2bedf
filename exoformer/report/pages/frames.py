"""A paper table as a pandas DataFrame, for Python callers (a notebook after exoformer.runs.orchestrate.run_target):
the rows `table --format csv` writes, or with `long=True` those of `--format long`, read by the same rules as the
`table` verb (README "Which runs the reading verbs read"); nothing is printed."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pandas as pd

from exoformer.errors import UserError, did_you_mean
from exoformer.registry.registry import Registry
from exoformer.report.tables.compose import compose
from exoformer.report.tables.build import to_frame, to_wide
from exoformer.runs import rundirs as runs
from exoformer.runs.run_index import one_view


def table_frame(table_id: str, *, registry: Registry | None = None, runs_root: str | os.PathLike | None = None,
                preset: str | None = None, overrides: Sequence[str] = (), long: bool = False) -> pd.DataFrame:
    """Table `table_id` from the runs under `runs_root` ($EXOFORMER_RUNS_DIR, else results/runs): one line per row
    (our value and the paper's per column, the sources, the not-comparable notes), or with `long` one line per
    cell and source. `preset` and `overrides` choose the runs as `table --preset/--set` do. `frame.attrs` holds
    the preset read and the table's notes (the note the `table` verb prints to stderr among them)."""
    registry = registry if registry is not None else Registry()
    if table_id not in registry.tables:
        raise UserError(f"unknown table {table_id!r}", where="table_id", fix=did_you_mean(table_id, registry.tables))
    root = runs.runs_root(None if runs_root is None else str(runs_root))
    runs.check_runs_root(root, where="runs_root" if runs_root is not None else "runs root")
    with one_view():
        read = compose(registry, root, tables=[table_id], preset=preset, overrides=list(overrides)).tables[table_id]
    out = to_frame(read.built) if long else to_wide(read.built)
    out.attrs = {"table": table_id, "preset": read.selection.preset,
                 "notes": [*([read.selection.note] if read.selection.note else []), *read.built.notes]}
    return out
