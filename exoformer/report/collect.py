"""Every run under a runs root as one pandas long table (spec, seed, preset, task, metric, value, stderr, n).

Per run directory (docs/architecture.md "Runs"), its spec file gives the identity and `RunDir.result_rows`
the rows: lm-eval's, the validation record's (task "validation", metrics ppl/loss) and the analysis
stage's (task "analysis"). Smoke-suite task names (`smoke_arc_easy`) are reported under the paper task
they mirror (`arc_easy`); the `suite` column keeps which one it was. The `source` column says whose weights
a run evaluated: "ours" (we trained them) or "checkpoint" (a trained checkpoint evaluated as a table row;
its spec file names the row, and its rows are filed under that row's first spec so tables find them).
Torch-free: `table` and `diff` answer in well under a second.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from exoformer.errors import UserError, did_you_mean
from exoformer.eval.suites import SMOKE_PREFIX
from exoformer.harness.registry import Registry
from exoformer.harness.run_index import CHECKPOINT, RunInfo, find_runs
from exoformer.rerun import rerun_command
from exoformer.rundir import SUCCEEDED

COLUMNS = ("spec", "seed", "preset", "task", "metric", "value", "stderr", "n")
EXTRA_COLUMNS = ("suite", "hash12", "run_dir", "source")


def check_outputs(run: RunInfo) -> None:
    """A finished evaluation whose output is missing is an error; an unfinished one is "not run"."""
    rd = run.run
    again = (f"re-run it: {rerun_command(rd.read_provenance(), run.spec, rd.path)}" if run.source != CHECKPOINT
             else f"re-run its evaluation: reproduce.py evaluate CKPT --as {run.as_row} --force")
    for stage, output in (("evaluate", rd.eval_rows), ("validate", rd.validation)):
        if rd.stage_done(stage) and not output.is_file():
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


def collect(runs_root: str | os.PathLike, *, preset: str | None = None, specs: list[str] | None = None,
            registry: Registry | None = None) -> pd.DataFrame:
    """One long table of every run's results (COLUMNS + EXTRA_COLUMNS), optionally of one preset / these specs.

    A run that SUCCEEDED but has no evaluation output is an error (its results were lost); an unfinished
    run simply contributes no rows (its cells read "not run"). With `registry`, a checkpoint run's rows are
    filed under its row's first spec (without, under the name its spec file gives).
    """
    wanted = set(specs) if specs is not None else None
    rows: list[dict[str, Any]] = []
    for run in find_runs(runs_root, preset=preset):
        name = row_spec(run, registry)
        if wanted is not None and name not in wanted:
            continue
        check_outputs(run)
        rows.extend(run_rows(run, name))
    return pd.DataFrame(rows, columns=[*COLUMNS, *EXTRA_COLUMNS])
