"""Every run under a runs root as one pandas long table (spec, seed, preset, task, metric, value, stderr, n).

Per run directory (docs/architecture.md "Runs"), its spec file gives the identity and `RunDir.result_rows`
the rows: lm-eval's, the validation record's (task "validation", metrics ppl/loss) and the analysis
stage's (task "analysis"). Smoke-suite task names (`smoke_arc_easy`) are reported under the paper task
they mirror (`arc_easy`); the `suite` column keeps which one it was. The `source` column says whose weights
a run evaluated: "ours" (we trained them) or "checkpoint" (a trained checkpoint evaluated as a table row;
its spec file names the row, and its rows are filed under that row's first spec so tables find them).
Runs are found through the run index (exoformer/runs/run_index.py). Given the registry, `collect` reads
the result files of only the run each spec's rows come from (the pick of exoformer/report/selection.py), so
a table costs what its runs cost, not what the runs root holds. Torch-free.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from exoformer.errors import UserError, did_you_mean
from exoformer.eval.suites import SMOKE_PREFIX
from exoformer.registry.registry import Registry
from exoformer.runs.run_index import CHECKPOINT, RunInfo, find_runs
from exoformer.rerun import rerun_command
from exoformer.rundir import SUCCEEDED

COLUMNS = ("spec", "seed", "preset", "task", "metric", "value", "stderr", "n")
EXTRA_COLUMNS = ("suite", "hash12", "run_dir", "source")


def check_outputs(run: RunInfo) -> None:
    """A finished evaluation whose output is missing is an error; an unfinished one is "not run"."""
    rd = run.run
    again = (f"re-run it: {rerun_command(rd.read_provenance(), run.spec, rd.path)}" if run.source != CHECKPOINT
             else f"re-run its evaluation: reproduce.py evaluate CKPT --as {run.as_row} --force")
    for stage, output, name in (("evaluate", rd.eval_rows, "eval_rows"), ("validate", rd.validation, "validation")):
        if run.has(f"stage:{stage}") and not run.has(name):
            raise UserError(f"the {stage} stage finished but {rd.display(output)} is missing", where=str(run.path),
                            fix=again)
    if run.state == SUCCEEDED and not run.has_eval:
        raise UserError(f"the run SUCCEEDED but has no eval results ({rd.display(rd.eval_rows)}, "
                        f"{rd.display(rd.validation)})", where=str(run.path), fix=again)


def row_spec(run: RunInfo, registry: Registry | None) -> str:
    """The spec name a run's rows are filed under: its own, or for a checkpoint run its row's first spec."""
    if run.source != CHECKPOINT or registry is None or run.as_row is None:
        return run.spec
    where = str(run.run.spec_file)
    table = registry.tables.get(run.table or "")
    if table is None:
        raise UserError(f"the checkpoint run names table {run.table!r}, which does not exist", where=where,
                        fix=did_you_mean(str(run.table), registry.tables))
    rows = {row.id: row for row in table.rows}
    if run.as_row not in rows:
        raise UserError(f"the checkpoint run names row {run.as_row!r}, not a row of table {table.id}", where=where,
                        fix=did_you_mean(run.as_row, rows))
    return rows[run.as_row].specs[0]


def run_rows(run: RunInfo, spec: str | None = None) -> list[dict[str, Any]]:
    """All result rows of one run, in the long layout plus suite / hash12 / run_dir / source."""
    out = []
    name = spec or run.spec
    for row in run.run.result_rows(run.spec):
        out.append({"spec": name, "seed": run.seed, "preset": run.preset,
                    "task": str(row["task"]).removeprefix(SMOKE_PREFIX), "metric": str(row["metric"]),
                    "value": _float(row.get("value")), "stderr": _float(row.get("stderr")), "n": row.get("n"),
                    "suite": run.suite, "hash12": run.hash12, "run_dir": str(run.path), "source": run.source})
    return out


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def frame_of(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows in the long layout, as one table with every column (COLUMNS + EXTRA_COLUMNS)."""
    return pd.DataFrame(rows, columns=[*COLUMNS, *EXTRA_COLUMNS])


def collect(runs_root: str | os.PathLike, *, preset: str | None = None, specs: list[str] | None = None,
            registry: Registry | None = None, overrides: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """One long table of the runs' results (COLUMNS + EXTRA_COLUMNS), optionally of one preset / these specs.

    A run that SUCCEEDED but has no evaluation output is an error (its results were lost); an unfinished
    run simply contributes no rows (its cells read "not run"). With `registry`, a checkpoint run's rows are
    filed under its row's first spec (without, under the name its spec file gives), and only the run the
    selection (report/selection.py) picks per spec, preset and source is read (with `overrides`: the --set of
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
        from exoformer.report.selection import Selection

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
