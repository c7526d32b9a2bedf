"""Every run under a runs root as one pandas long table (spec, seed, preset, task, metric, value, stderr, n).

Per run directory (docs/architecture.md "Runs"), its spec file gives the identity and `RunDir.result_rows`
the rows: lm-eval's, the validation record's (task "validation", metrics ppl/loss) and the analysis
stage's (task "analysis"). Smoke-suite task names (`smoke_arc_easy`) are reported under the paper task
they mirror (`arc_easy`); the `suite` column keeps which one it was. The `source` column says whose weights
a run evaluated: "ours" (we trained them) or "checkpoint" (a trained checkpoint evaluated as a table row;
its spec file names the row, and its rows are filed under that row's first spec so tables find them).
Runs are found through the run index (exoformer/runs/run_index.py). Given the registry, `collect` reads
the result files of only the run each spec's rows come from (the pick of exoformer/report/reading/selection.py), so
a table costs what its runs cost, not what the runs root holds. Torch-free.
"""

from __future__ import annotations

import os

import pandas as pd

from exoformer.registry.registry import Registry
from exoformer.report.reading.selection import (  # noqa: F401 - the long layout, re-exported for collect's readers
    COLUMNS,
    EXTRA_COLUMNS,
    Selection,
    check_outputs,
    frame_of,
    run_rows,
)
from exoformer.runs.run_index import CHECKPOINT, find_runs

def collect(runs_root: str | os.PathLike, *, preset: str | None = None, specs: list[str] | None = None,
            registry: Registry | None = None, overrides: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """One long table of the runs' results (COLUMNS + EXTRA_COLUMNS), optionally of one preset / these specs.

    A run that SUCCEEDED but has no evaluation output is an error (its results were lost); an unfinished
    run simply contributes no rows (its cells read "not run"). With `registry`, a checkpoint run's rows are
    filed under its row's first spec (without, under the name its spec file gives), and only the run the
    selection (report/reading/selection.py) picks per spec, preset and source is read (with `overrides`: the --set of
    the reading verb); without, every run is. A picked run that is DAMAGED contributes no rows;
    `frame.attrs["damaged"]` lists them (spec, preset, hash12, run_dir, why) for the verbs' notes.
    """
    wanted = set(specs) if specs is not None else None
    runs = find_runs(runs_root, preset=preset, specs=wanted)
    if registry is None:
        for run in runs:
            if not run.damage:
                check_outputs(run)
        damaged = [(run.spec, run) for run in runs if run.damage]
        frame = frame_of([row for run in runs if not run.damage for row in run_rows(run)])
    else:
        selection = Selection(registry=registry, preset=preset, overrides=tuple(overrides))
        selection.add_runs(runs)
        keys = dict.fromkeys((c.name, "" if c.source == CHECKPOINT else c.preset, c.source)
                             for c in selection.candidates() if wanted is None or c.name in wanted)
        picks = [p for name, run_preset, source in keys
                 if (p := selection.pick(name, source=source, preset=run_preset)) is not None]
        picks.sort(key=lambda p: str(p.path))
        damaged = [(p.run.name, p.run) for p in picks if p.run.damage]
        parts = [p.rows for p in picks if not p.rows.empty]
        frame = pd.concat(parts, ignore_index=True) if parts else frame_of([])
    frame.attrs["damaged"] = [{"spec": name, "preset": run.preset, "hash12": run.hash12, "run_dir": str(run.path),
                               "why": run.damage} for name, run in damaged]
    return frame
