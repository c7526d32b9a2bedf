"""Every run under a runs root as one pandas long table (spec, seed, preset, task, metric, value, stderr, n).

Per run directory (docs/architecture.md "Runs"), its spec file gives the identity and `RunDir.result_rows`
the rows: lm-eval's, the validation record's (task "validation", metrics ppl/loss) and the analysis
stage's (task "analysis"). Smoke-suite task names (`smoke_arc_easy`) are reported under the paper task
they mirror (`arc_easy`); the `suite` column keeps which one it was. The `source` column says whose weights
a run evaluated: "ours" (we trained them) or "checkpoint" (a trained checkpoint evaluated as a table row;
its spec file names the row, and its rows are filed under that row's first spec so tables find them).
Runs are found through the run index (exoformer/runs/run_index.py). Given the registry, `collect` reads
the result files of only the run each spec's rows come from (run_index.pick_run: per spec and preset the
current hash, else the newest; per row the newest checkpoint run), so a table costs what its runs cost,
not what the runs root holds. Torch-free.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from exoformer.errors import UserError, did_you_mean
from exoformer.eval.suites import SMOKE_PREFIX
from exoformer.registry.registry import Registry
from exoformer.runs.run_index import CHECKPOINT, RunInfo, find_runs, pick_run
from exoformer.registry.spec import parse_override
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


def spec_overrides(overrides: list[str] | tuple[str, ...]) -> list[str]:
    """The `--set` words that change a spec (`profile.*` ones feed only the cost model)."""
    return [text for text in overrides if not parse_override(text)[0].startswith("profile.")]


def current_hash(registry: Registry, spec: str, preset: str, overrides: list[str] | tuple[str, ...] = ()) -> str | None:
    """The hash `spec` resolves to under `preset` with `overrides` today; None for a spec or preset the
    registry no longer has (its runs are then read as non-current ones)."""
    if spec not in registry.specs or preset not in registry.presets:
        return None
    try:
        return registry.resolve(spec, preset=preset, overrides=overrides).hash12
    except UserError:
        return None


def picked_runs(runs: list[RunInfo], registry: Registry, *, overrides: list[str] | tuple[str, ...] = ()
                ) -> list[RunInfo]:
    """Of runs with results, the ones a reading verb can read: per (spec, preset) the run pick_run picks (the
    current hash; else, without `overrides`, the newest), per checkpoint row the newest checkpoint run."""
    sets = spec_overrides(overrides)
    groups: dict[tuple[str, str, str], list[RunInfo]] = {}
    for run in runs:
        if run.has_eval:
            name = row_spec(run, registry)
            key = (name, "", CHECKPOINT) if run.source == CHECKPOINT else (name, run.preset, run.source)
            groups.setdefault(key, []).append(run)
    out = []
    for (name, preset, source), group in groups.items():
        current = None if source == CHECKPOINT else current_hash(registry, name, preset, sets)
        chosen = pick_run(group, current_hash12=current, exact=bool(sets) and source != CHECKPOINT)
        if chosen is not None:
            out.append(chosen)
    return sorted(out, key=lambda r: str(r.path))


def collect(runs_root: str | os.PathLike, *, preset: str | None = None, specs: list[str] | None = None,
            registry: Registry | None = None, overrides: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """One long table of the runs' results (COLUMNS + EXTRA_COLUMNS), optionally of one preset / these specs.

    A run that SUCCEEDED but has no evaluation output is an error (its results were lost); an unfinished
    run simply contributes no rows (its cells read "not run"). With `registry`, a checkpoint run's rows are
    filed under its row's first spec (without, under the name its spec file gives), and only the runs
    `picked_runs` picks (with `overrides`: the --set of the reading verb) are read; without, every run is.
    A picked run that is DAMAGED contributes no rows; `frame.attrs["damaged"]` lists them (spec, hash12,
    run_dir, why) for the verbs' notes.
    """
    wanted = set(specs) if specs is not None else None
    runs = find_runs(runs_root, preset=preset, specs=wanted)
    named = [(run, row_spec(run, registry)) for run in runs]
    named = [(run, name) for run, name in named if wanted is None or name in wanted]
    for run, _ in named:
        if not run.damage:
            check_outputs(run)
    if registry is not None:
        keep = {run.path for run in picked_runs([run for run, _ in named], registry, overrides=overrides)}
        named = [(run, name) for run, name in named if run.path in keep]
    rows: list[dict[str, Any]] = []
    damaged: list[dict[str, str]] = []
    for run, name in named:
        if run.damage:  # exoformer/runs/row_integrity.py: none of its numbers is shown
            damaged.append({"spec": name, "hash12": run.hash12, "run_dir": str(run.path), "why": run.damage})
            continue
        rows.extend(run_rows(run, name))
    frame = pd.DataFrame(rows, columns=[*COLUMNS, *EXTRA_COLUMNS])
    frame.attrs["damaged"] = damaged
    return frame


def own_preset(registry: Registry, spec: str) -> str | None:
    """The preset a spec resolves under when no --preset is given (None for a spec the registry lacks)."""
    return registry.resolve(spec).preset if spec in registry.specs else None


def choose_preset(registry: Registry, runs_root: str | os.PathLike, specs: list[str], preset: str | None, *,
                  what: str) -> tuple[str | None, str | None]:
    """(the preset a reading verb reads for `specs`, one line to print or None): README "Which runs the
    reading verbs read".

    No --preset: each spec's own preset, unless none of `specs` has results under its own preset while some
    have results under other presets; then the preset most of them ran under (ties: by name) is read, its
    cells marked not comparable, and the line says so. `--preset P` with no results under P while other
    presets have some: P is read (cells "not run") and the line names the flag to add.
    """
    found = [run for run in find_runs(runs_root, specs=set(specs)) if run.has_eval]
    if preset is not None:
        others = sorted({run.preset for run in found} - {preset})
        if others and not any(run.preset == preset for run in found):
            return preset, (f"note: {what} has no runs of preset {preset}; runs exist under preset "
                            f"{', '.join(others)}: add --preset {others[0]}")
        return preset, None
    own = {spec: own_preset(registry, spec) for spec in specs}
    if not found or any(run.preset == own.get(row_spec(run, registry)) for run in found):
        return None, None
    counts: dict[str, int] = {}
    for run in found:
        counts[run.preset] = counts.get(run.preset, 0) + 1
    chosen = min(counts, key=lambda p: (-counts[p], p))
    return chosen, (f"note: {what} has no runs under its specs' own preset; reading preset {chosen} (not "
                    f"comparable with the paper; add --preset {chosen} to ask for it)")
