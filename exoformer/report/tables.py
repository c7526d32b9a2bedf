"""Rebuild a declared table (experiments/tables.yaml) from the long results table, beside the paper's numbers.

A cell's reproduced value is the mean over the row's specs that have results (the first spec is the
paper's seed-42 run, the others seed replicates), with lm-eval's stderr of that mean and, when two or more
seeds exist, their sample standard deviation. Task accuracies use the table's metric convention (the paper
does not say acc or acc_norm: paper.md 2.2, 7.4) and are shown in % as the paper does; `avg6` is the mean
of the six task accuracies per seed, its stderr sqrt(sum se_t^2) / 6 (tasks are independent samples).
`val_ppl` is the validate stage's perplexity. A missing run reads "not run", a null in reported.yaml
"not reported". Torch-free.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from exoformer.errors import UserError, did_you_mean
from exoformer.harness.registry import Registry
from exoformer.harness.reported import Reported, load_reported
from exoformer.harness.run_index import pick_run
from exoformer.harness.tables import TASKS, Table, TableRow
from exoformer.report import NOT_REPORTED, NOT_RUN

AVERAGE = "avg6"
PERPLEXITY = "val_ppl"
PERCENT_COLUMNS = (*TASKS, AVERAGE)
OTHER_METRIC = {"acc": "acc_norm", "acc_norm": "acc"}
FORMATS = ("md", "latex", "csv")


@dataclass(kw_only=True, slots=True)
class Cell:
    """One reproduced cell beside its reported value."""

    row: str
    column: str
    value: float | None = None
    """Mean over the seeds with results; None = not run."""
    stderr: float | None = None
    """lm-eval stderr of `value` (combined over tasks for avg6, over seeds for the mean); None if unknown."""
    seed_sd: float | None = None
    """Sample standard deviation over seeds (two or more seeds), else None."""
    seeds: tuple[int, ...] = ()
    metric: str | None = None
    """The task metric used (acc / acc_norm) for task and average columns."""
    other: float | None = None
    """The same cell computed with the other task metric (acc <-> acc_norm), for diff's convention hint."""
    reported: Reported | None = None


@dataclass(kw_only=True, slots=True)
class BuiltTable:
    table: Table
    preset: str
    runs_root: str
    cells: dict[tuple[str, str], Cell]
    """(row id, column) -> Cell."""
    notes: list[str] = field(default_factory=list)

    @property
    def smoke(self) -> bool:
        return self.preset == "smoke"

    def cell(self, row: TableRow, column: str) -> Cell:
        return self.cells[(row.id, column)]


def check_columns(registry: Registry, table: Table) -> None:
    """Every column must be a metric id of the `metrics:` vocabulary (a typo would otherwise read 'not run')."""
    for column in table.columns:
        if column not in registry.metrics:
            raise UserError(f"table {table.id!r} names metric {column!r}, which does not exist", where=table.source,
                            fix=did_you_mean(column, registry.metrics))


@dataclass(kw_only=True, slots=True, frozen=True)
class _FrameRun:
    """One run directory that has rows in the long table (a candidate for run_index.pick_run)."""

    hash12: str
    path: Path


def pick_runs(frame: pd.DataFrame, spec: str, current_hash: str | None, notes: list[str]) -> pd.DataFrame:
    """The rows of one spec from one run directory: the one run_index.pick_run picks among those with rows."""
    rows = frame[frame["spec"] == spec]
    if rows.empty:
        return rows
    candidates = [_FrameRun(hash12=h, path=Path(d))
                  for h, d in dict.fromkeys(zip(rows["hash12"], rows["run_dir"]))]
    chosen = pick_run(candidates, current_hash12=current_hash)
    if current_hash is not None and chosen.hash12 != current_hash:
        notes.append(f"{spec}: results from run {chosen.hash12}, not the current spec hash {current_hash} (stale run)")
    return rows[rows["run_dir"] == str(chosen.path)]


def _value(rows: pd.DataFrame, task: str, metric: str, spec: str, table: Table) -> tuple[float, float | None] | None:
    """(value, stderr) of task/metric in one run's rows; None when the task was not evaluated."""
    of_task = rows[rows["task"] == task]
    if of_task.empty:
        return None
    hit = of_task[of_task["metric"] == metric]
    if hit.empty:
        raise UserError(f"metric {metric!r} does not exist for task {task!r} in the results of {spec} "
                        f"(it has {', '.join(sorted(set(of_task['metric'])))})", where=table.source,
                        fix=f"set convention: {{{task}: {sorted(set(of_task['metric']))[0]}}} for table {table.id}")
    value, stderr = hit["value"].iloc[0], hit["stderr"].iloc[0]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    se = None if stderr is None or (isinstance(stderr, float) and math.isnan(stderr)) else float(stderr)
    return float(value), se


def _per_seed(rows: pd.DataFrame, column: str, metric_for: dict[str, str], spec: str,
              table: Table) -> tuple[float, float | None] | None:
    """(value, stderr) of one column for one run, in display units (% for accuracies)."""
    if column == PERPLEXITY:
        return _value(rows, "validation", "ppl", spec, table)
    if column in TASKS:
        got = _value(rows, column, metric_for[column], spec, table)
        return None if got is None else (100 * got[0], None if got[1] is None else 100 * got[1])
    if column == AVERAGE:
        parts = [_value(rows, task, metric_for[task], spec, table) for task in TASKS]
        if any(p is None for p in parts):
            return None
        ses = [p[1] for p in parts]
        se = None if any(s is None for s in ses) else 100 * math.sqrt(sum(s * s for s in ses)) / len(TASKS)
        return 100 * statistics.fmean(p[0] for p in parts), se
    hit = rows[rows["metric"] == column]
    if hit.empty or hit["value"].iloc[0] is None:
        return None
    stderr = hit["stderr"].iloc[0]
    return float(hit["value"].iloc[0]), None if stderr is None or math.isnan(stderr) else float(stderr)


def _combine(per_seed: list[tuple[int, tuple[float, float | None]]]) -> dict:
    values = [v for _, (v, _) in per_seed]
    ses = [s for _, (_, s) in per_seed]
    k = len(values)
    return {"value": statistics.fmean(values),
            "stderr": None if any(s is None for s in ses) else math.sqrt(sum(s * s for s in ses)) / k,
            "seed_sd": statistics.stdev(values) if k >= 2 else None,
            "seeds": tuple(seed for seed, _ in per_seed)}


def build_table(registry: Registry, table_id: str, frame: pd.DataFrame, *, preset: str | None = None,
                runs_root: str | os.PathLike = "", reported_file: str | os.PathLike | None = None) -> BuiltTable:
    """The declared table `table_id` filled from `frame` (collect's long table) and reported.yaml.

    `preset` None: each spec's own preset. Only rows of that preset are used.
    """
    if table_id not in registry.tables:
        raise UserError(f"unknown table {table_id!r}", where="TABLE", fix=did_you_mean(table_id, registry.tables))
    table = registry.tables[table_id]
    check_columns(registry, table)
    reported = load_reported(registry, reported_file)
    notes: list[str] = []
    cells: dict[tuple[str, str], Cell] = {}
    presets_used: set[str] = set()
    swapped = {task: OTHER_METRIC[m] for task, m in table.convention.items()}
    for row in table.rows:
        runs = []
        for spec_name in row.specs:
            spec = registry.resolve(spec_name, preset=preset)
            presets_used.add(spec.preset)
            of_preset = frame[frame["preset"] == spec.preset] if not frame.empty else frame
            rows = pick_runs(of_preset, spec_name, spec.hash12, notes) if not frame.empty else frame
            if not rows.empty:
                runs.append((spec.seed, spec_name, rows))
        for column in table.columns:
            cell = Cell(row=row.id, column=column, reported=reported.get((table.id, row.id, column)))
            if column in PERCENT_COLUMNS:
                cell.metric = table.convention.get(column) if column in TASKS else "convention"
            per_seed = [(seed, got) for seed, name, rows in runs
                        if (got := _per_seed(rows, column, table.convention, name, table)) is not None]
            if per_seed:
                for key, val in _combine(per_seed).items():
                    setattr(cell, key, val)
                if column in TASKS and column != "winogrande":
                    other = [got for _, name, rows in runs if (got := _other(rows, column, swapped, name, table))]
                    cell.other = statistics.fmean(v for v, _ in other) if other else None
            cells[(row.id, column)] = cell
    shown = preset or (", ".join(sorted(presets_used)) if presets_used else "none")
    return BuiltTable(table=table, preset=shown, runs_root=str(runs_root), cells=cells, notes=notes)


def _other(rows: pd.DataFrame, task: str, swapped: dict[str, str], spec: str, table: Table):
    try:
        return _per_seed(rows, task, swapped, spec, table)
    except UserError:  # the other metric may not exist (WinoGrande has acc only)
        return None


# ------------------------------------------------------------------------------------------------ rendering

def _decimals(column: str) -> int:
    """Two decimals, as the paper prints perplexities and accuracies."""
    return 2


def fmt_value(cell: Cell) -> str:
    if cell.value is None:
        return NOT_RUN
    text = f"{cell.value:.{_decimals(cell.column)}f}"
    if cell.seed_sd is not None:
        text += f" ± {cell.seed_sd:.{_decimals(cell.column)}f}"
    return text


def fmt_reported(cell: Cell) -> str:
    return NOT_REPORTED if cell.reported is None else f"{cell.reported.value:.{_decimals(cell.column)}f}"


def convention_line(table: Table) -> str:
    by_metric: dict[str, list[str]] = {}
    for task in TASKS:
        by_metric.setdefault(table.convention[task], []).append(task)
    parts = [f"{metric} for {', '.join(tasks)}" for metric, tasks in by_metric.items()]
    return "Task metric convention: " + "; ".join(parts) + f"; {AVERAGE} = mean of the six (%)."


def header_lines(built: BuiltTable) -> list[str]:
    t = built.table
    lines = [f"{t.id}: {t.title} [{t.paper_ref}]",
             f"preset {built.preset}; runs root {built.runs_root}; each cell: ours / paper "
             "(ours = mean over seeds with results, ± seed std when there are several)",
             convention_line(t)]
    if built.smoke:
        lines.append("smoke preset: CPU-scale models on the synthetic smoke corpus and smoke tasks; "
                     "absolute values are not comparable with the paper's.")
    return lines


def render_markdown(built: BuiltTable) -> str:
    t = built.table
    out = [f"### {line}" if i == 0 else line for i, line in enumerate(header_lines(built))]
    out.append("")
    out.append("| Model | " + " | ".join(t.columns) + " |")
    out.append("|---|" + "---|" * len(t.columns))
    for row in t.rows:
        cells = [f"{fmt_value(built.cell(row, c))} / {fmt_reported(built.cell(row, c))}" for c in t.columns]
        out.append(f"| {row.label} | " + " | ".join(cells) + " |")
    out.extend(f"note: {n}" for n in built.notes)
    return "\n".join(out) + "\n"


LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$",
                 "{": r"\{", "}": r"\}", "±": r"$\pm$"}


def _latex_escape(text: str) -> str:
    return "".join(LATEX_ESCAPES.get(ch, ch) for ch in text)


def render_latex(built: BuiltTable) -> str:
    t = built.table
    out = ["% " + line for line in header_lines(built)]
    out.append(r"\begin{tabular}{l" + "r" * len(t.columns) + "}")
    out.append(r"\toprule")
    out.append("Model & " + " & ".join(_latex_escape(c) for c in t.columns) + r" \\")
    out.append(r"\midrule")
    for row in t.rows:
        cells = []
        for c in t.columns:
            cell = built.cell(row, c)
            cells.append(_latex_escape(f"{fmt_value(cell)} ({fmt_reported(cell)})"))
        out.append(_latex_escape(row.label) + " & " + " & ".join(cells) + r" \\")
    out.append(r"\bottomrule")
    out.append(r"\end{tabular}")
    out.extend("% note: " + n for n in built.notes)
    return "\n".join(out) + "\n"


def to_frame(built: BuiltTable) -> pd.DataFrame:
    """The table in tidy form: one line per cell (what --format csv writes)."""
    records = []
    for row in built.table.rows:
        for column in built.table.columns:
            cell = built.cell(row, column)
            rep = cell.reported
            records.append({"table": built.table.id, "row": row.id, "label": row.label, "column": column,
                            "metric": cell.metric, "reproduced": cell.value, "stderr": cell.stderr,
                            "seed_sd": cell.seed_sd, "seeds": " ".join(map(str, cell.seeds)),
                            "reported": None if rep is None else rep.value,
                            "source": None if rep is None else f"{rep.source} {rep.version}",
                            "preset": built.preset})
    return pd.DataFrame(records)


def render(built: BuiltTable, fmt: str) -> str:
    if fmt == "md":
        return render_markdown(built)
    if fmt == "latex":
        return render_latex(built)
    if fmt == "csv":
        return to_frame(built).to_csv(index=False)
    raise UserError(f"unknown table format {fmt!r}", where="--format", fix=did_you_mean(fmt, FORMATS))


def write_table(text: str, table_id: str, fmt: str, out_dir: str | os.PathLike) -> Path:
    from exoformer.io import atomic_write_text

    suffix = {"md": "md", "latex": "tex", "csv": "csv"}[fmt]
    return atomic_write_text(Path(out_dir) / f"{table_id}.{suffix}", text)
