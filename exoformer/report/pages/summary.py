"""What `run TABLE` shows when its runs have finished: the table beside the paper's values, and its figures.

For the run verb (exoformer/cli/runs.py) to call after local/inline runs end; draws only the table's
`curves` and `bars` figures (the others need analysis outputs). Torch-free, like the whole report.
"""

from __future__ import annotations

import os
from pathlib import Path

from exoformer.registry.registry import Registry
from exoformer.runs.run_index import one_view
from exoformer.report.tables.compose import compose
from exoformer.report.figures.draw import DEFAULT_OUT, draw
from exoformer.report.tables.build import render

SUMMARY_FIGURE_KINDS = ("curves", "bars")


def table_figures(registry: Registry, table_id: str) -> list[str]:
    """Figures drawn from this table's rows (declared with `table:<id>`) that need no analysis outputs."""
    return [fid for fid, fig in registry.figures.items()
            if f"table:{table_id}" in fig.specs and fig.kind in SUMMARY_FIGURE_KINDS
            and not any(s.startswith("analysis.") for s in fig.series)]


def report_table(registry: Registry, table_id: str, *, runs_root: str | os.PathLike, preset: str | None = None,
                 figures_dir: str | os.PathLike = DEFAULT_OUT,
                 overrides: list[str] | tuple[str, ...] = ()) -> tuple[str, list[Path]]:
    """(markdown table, written figure paths) for `table_id` from the runs under `runs_root` (with
    `overrides`: the variant runs made with that --set)."""
    with one_view():
        report = compose(registry, runs_root, tables=[table_id], figures=table_figures(registry, table_id),
                         preset=preset, overrides=overrides)
        written: list[Path] = []
        for fid, selection in report.figures.items():
            written += draw(registry, fid, runs_root=runs_root, out_dir=figures_dir, preset=selection.preset,
                            overrides=overrides, selection=selection)
    return render(report.tables[table_id].built, "md"), written
