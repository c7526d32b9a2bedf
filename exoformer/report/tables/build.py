"""Rebuild a declared table (experiments/tables.yaml) from the long results table, beside the paper's numbers.

A cell's reproduced value is the mean over the row's specs that have results (the first spec is the
paper's seed-42 run, the others seed replicates), with lm-eval's stderr of that mean and, when two or more
seeds exist, their sample standard deviation. Task accuracies use the table's metric convention (the paper
does not say acc or acc_norm: docs/paper.md 2.2, 7.4) and are shown in % as the paper does; `avg6` is the mean
of the six task accuracies per seed, its stderr sqrt(sum se_t^2) / 6 (tasks are independent samples).
`val_ppl` is the validate stage's perplexity in the paper's convention, `val_ppl_ce` the pure cross-entropy
one. A missing run reads "not run", a null in reported.yaml "not known" (NOT_REPORTED).
Each paper value's source tag is explained once per output (`source_lines`: what the source is and its strength,
for the tags the output shows); a table whose paper values come from one source names it once in its heading line
("ours / paper [WEB]"), a table of several tags each value ("2.00 [A-v1]").

Each cell has a source: "ours" (runs we trained), "checkpoint" (a trained checkpoint we evaluated as the
row; its column appears only when such a run exists) or "paper" (reported.yaml). A cell whose runs differ
from the table's reference recipe (report/reading/recipe.py) is marked † and its note says what differs.
Torch-free.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from exoformer.errors import UserError, did_you_mean
from exoformer.eval.task_facts import TASK_FACTS
from exoformer.registry.registry import Registry
from exoformer.registry.reported import Reported, Source, describe, load_reported, load_sources, source_legend, tags_in
from exoformer.runs.run_index import CHECKPOINT, OURS
from exoformer.registry.tables import TASKS, Table, TableRow
from exoformer.report import NO_VALUE, NOT_REPORTED, NOT_RUN
from exoformer.rundir import DAMAGED
from exoformer.report.tables.derived import derived_metrics, notes_for, reference_specs, row_derived, with_derived
from exoformer.report.reading.recipe import shorten
from exoformer.report.reading.selection import Selection

AVERAGE = "avg6"
PERPLEXITY = "val_ppl"
"""The paper's convention (the author's estimate_loss); CE_PERPLEXITY is exp of the pure cross-entropy."""
CE_PERPLEXITY = "val_ppl_ce"
PERCENT_COLUMNS = (*TASKS, AVERAGE)
OTHER_METRIC = {"acc": "acc_norm", "acc_norm": "acc"}
FORMATS = ("md", "latex", "csv", "long")
MARK = "†"
"""Marks a cell that is not comparable with the paper's recipe; the note below the table says why."""


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
    """The same cell computed with the other task metric (acc <-> acc_norm; for avg6 every task that has
    both swapped), for diff's convention hint and decision."""
    reported: Reported | None = None
    source: str = OURS
    """Where the value comes from: "ours" or "checkpoint" (the paper's value is `reported`)."""
    declared_seeds: int = 1
    """How many seeds the row declares (its specs)."""
    comparable: bool = True
    """False when the runs behind the value differ from the table's reference recipe."""
    why: str = ""
    """What differs, when not comparable ("eval.limit=20, train.steps=30 (paper 38147), 1 of 3 seeds")."""
    damaged: bool = False
    """A run the cell reads is DAMAGED (its numbers are not shown; the table's note says why): without a value
    from another seed the cell says DAMAGED, as `status` says of the run, never "not run"."""


@dataclass(kw_only=True, slots=True)
class BuiltTable:
    table: Table
    preset: str
    runs_root: str
    cells: dict[tuple[str, str], Cell]
    """(row id, column) -> our Cell."""
    notes: list[str] = field(default_factory=list)
    checkpoint_cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    """(row id, column) -> the Cell of a checkpoint evaluated as that row (every row has one, maybe empty)."""
    selection: Selection | None = None
    """The runs the cells were read from (verdicts read the same ones)."""
    sources: dict[str, Source] = field(default_factory=dict)
    """reported.yaml's source tags (what each is and its strength), for the legend of the tags shown."""

    @property
    def has_checkpoint(self) -> bool:
        return any(c.value is not None for c in self.checkpoint_cells.values())

    @property
    def all_comparable(self) -> bool:
        return all(c.comparable for c in [*self.cells.values(), *self.checkpoint_cells.values()])

    def cell(self, row: TableRow, column: str, source: str = OURS) -> Cell:
        return (self.checkpoint_cells if source == CHECKPOINT else self.cells)[(row.id, column)]


def check_columns(registry: Registry, table: Table) -> None:
    """Every column must be a metric id of the `metrics:` vocabulary (a typo would otherwise read 'not run')."""
    for column in table.columns:
        if column not in registry.metrics:
            raise UserError(f"table {table.id!r} names metric {column!r}, which does not exist", where=table.source,
                            fix=did_you_mean(column, registry.metrics))


Values = dict[str, dict[str, tuple[float | None, float | None]]]
"""task -> metric -> (value, stderr) of one run (the first row of each; NaN kept, None for no number)."""


def run_values(rows: pd.DataFrame) -> Values:
    """One run's rows of the long table as a lookup (a cell reads a few numbers of a run many times)."""
    out: Values = {}
    for task, metric, value, stderr in zip(rows["task"], rows["metric"], rows["value"], rows["stderr"]):
        out.setdefault(task, {}).setdefault(metric, (None if value is None else float(value), _number(stderr)))
    return out


def _number(value: object) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _value(rows: Values, task: str, metric: str, spec: str, table: Table) -> tuple[float, float | None] | None:
    """(value, stderr) of task/metric in one run's rows; None when the task was not evaluated."""
    of_task = rows.get(task)
    if not of_task:
        return None
    if metric not in of_task:
        raise UserError(f"metric {metric!r} does not exist for task {task!r} in the results of {spec} "
                        f"(it has {', '.join(sorted(of_task))})", where=table.source,
                        fix=f"set convention: {{{task}: {sorted(of_task)[0]}}} for table {table.id}")
    value, stderr = of_task[metric]
    return None if _number(value) is None else (value, stderr)


def seed_cell(rows: Values, column: str, metric_for: dict[str, str], spec: str,
              table: Table) -> tuple[float, float | None] | None:
    """(value, stderr) of one column for one run (run_values), in display units (% for accuracies)."""
    if column == PERPLEXITY:
        return _value(rows, "validation", "ppl", spec, table)
    if column == CE_PERPLEXITY:
        return _value(rows, "validation", "ppl_ce", spec, table)
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
    hit = next((of_task[column] for of_task in rows.values() if column in of_task), (None, None))
    return None if hit[0] is None else hit


def _combine(per_seed: list[tuple[int, tuple[float, float | None]]]) -> dict:
    values = [v for _, (v, _) in per_seed]
    ses = [s for _, (_, s) in per_seed]
    k = len(values)
    return {"value": statistics.fmean(values),
            "stderr": None if any(s is None for s in ses) else math.sqrt(sum(s * s for s in ses)) / k,
            "seed_sd": statistics.stdev(values) if k >= 2 else None,
            "seeds": tuple(seed for seed, _ in per_seed)}


@dataclass(kw_only=True, slots=True)
class _SpecRun:
    """One spec's picked run for a row: its rows of the long table and how its recipe differs."""

    seed: int
    name: str
    rows: Values
    differs: list[str]


def build_table(registry: Registry, table_id: str, *, selection: Selection, preset: str | None = None,
                runs_root: str | os.PathLike = "", reported_file: str | os.PathLike | None = None) -> BuiltTable:
    """The declared table `table_id` filled from the runs `selection` picks (its preset and --set) and
    reported.yaml.

    `preset` None: each spec's own preset (the heading names those read). Derived columns (a metric's
    `derived:`) are computed across runs (report/tables/derived.py).
    """
    if table_id not in registry.tables:
        raise UserError(f"unknown table {table_id!r}", where="TABLE", fix=did_you_mean(table_id, registry.tables))
    table = registry.tables[table_id]
    check_columns(registry, table)
    reported = load_reported(registry, reported_file)
    derived = derived_metrics(registry, table.columns)
    damaged: list[str] = []
    stale: list[tuple[str, str, str | None, str]] = []
    cells: dict[tuple[str, str], Cell] = {}
    checkpoint_cells: dict[tuple[str, str], Cell] = {}
    presets_used: set[str] = set()
    for row in table.rows:
        runs = []
        row_damaged = False
        for k, spec_name in enumerate(row.specs):
            spec = selection.spec(spec_name)
            presets_used.add(spec.preset)
            picked = selection.pick(spec_name)
            if picked is None:
                continue
            if picked.note and picked.run.damage:
                damaged.append(picked.note)
                row_damaged = True
            elif picked.note:
                stale.append((spec_name, picked.run.hash12, selection.current_hash(spec_name, spec.preset),
                              picked.note))
            if not picked.rows.empty:
                rows = with_derived(selection, picked, derived, row.specs, k) if derived else picked.rows
                runs.append(_SpecRun(seed=spec.seed, name=spec_name, rows=run_values(rows), differs=picked.differs))
        checkpoint = selection.pick(row.specs[0], source=CHECKPOINT)
        checkpoint_runs = [] if checkpoint is None or checkpoint.rows.empty else [
            _SpecRun(seed=checkpoint.run.seed, name=row.specs[0], rows=run_values(checkpoint.rows),
                     differs=checkpoint.differs)]
        checkpoint_damaged = checkpoint is not None and bool(checkpoint.run.damage)
        if checkpoint_damaged and checkpoint.note:
            damaged.append(checkpoint.note)
        for column in table.columns:
            rep = reported.get((table.id, row.id, column))
            cells[(row.id, column)] = _fill(table, row, column, runs, rep, OURS, damaged=row_damaged)
            checkpoint_cells[(row.id, column)] = _fill(table, row, column, checkpoint_runs, rep, CHECKPOINT,
                                                       damaged=checkpoint_damaged)
        for metric in derived:  # the row's estimate over its paired seeds, as every other place prints it
            cell = cells[(row.id, metric.id)]
            if cell.value is not None:
                cell.value = row_derived(selection, metric.derived, row.specs, reference_specs(selection, metric)).value
    shown = preset or selection.preset or (", ".join(sorted(presets_used)) if presets_used else "none")
    return BuiltTable(table=table, preset=shown, runs_root=str(runs_root), cells=cells,
                      notes=list(dict.fromkeys([*notes_for(derived), *stale_notes(stale), *damaged])),
                      checkpoint_cells=checkpoint_cells, selection=selection,
                      sources=load_sources(registry, reported_file))


def stale_notes(stale: list[tuple[str, str, str | None, str]]) -> list[str]:
    """The table's stale runs ((spec, run hash, current hash, the selection's note)) in one line when there are
    several, instead of the same "stale run" sentence once per spec."""
    picked = list(dict.fromkeys(stale))
    if len(picked) <= 1:
        return [note for *_, note in picked]
    runs = ", ".join(f"{name} (run {hash12}, current hash {current})" for name, hash12, current, _ in picked)
    return [f"{len(picked)} specs read from stale runs (the spec's definition changed since): {runs}"]


def _fill(table: Table, row: TableRow, column: str, runs: list[_SpecRun], reported: Reported | None,
          source: str, *, damaged: bool = False) -> Cell:
    """One cell of one source from its runs: value, spread, the other convention and comparability (`damaged`: a
    run it reads is DAMAGED)."""
    cell = Cell(row=row.id, column=column, reported=reported, source=source,
                declared_seeds=len(row.specs) if source == OURS else 1, damaged=damaged)
    if column in PERCENT_COLUMNS:
        cell.metric = table.convention.get(column) if column in TASKS else "convention"
    used = [(run, got) for run in runs if (got := seed_cell(run.rows, column, table.convention, run.name, table))
            is not None]
    if not used:
        return cell
    for key, val in _combine([(run.seed, got) for run, got in used]).items():
        setattr(cell, key, val)
    swapped = _swapped(table, column)
    if swapped is not None:
        other = [got for run, _ in used if (got := _other(run.rows, column, swapped, run.name, table))]
        cell.other = statistics.fmean(v for v, _ in other) if len(other) == len(used) else None
    why = why_not_comparable([run.differs for run, _ in used], [run.name for run, _ in used],
                             row.specs[:cell.declared_seeds])
    cell.comparable, cell.why = not why, why
    return cell


def why_not_comparable(differs: list[list[str]], used: list[str], declared: tuple[str, ...]) -> str:
    """What differs from the paper's recipe in the runs `used` of a row declaring `declared` (its first spec is the
    paper's run); fewer seeds than declared count when something differs or the paper's run is missing."""
    items = list(dict.fromkeys(item for run in differs for item in run))
    why = shorten(items)
    if len(used) < len(declared) and (items or declared[0] not in used):
        seeds = f"{len(used)} of {len(declared)} seeds"
        if declared[0] not in used:
            seeds += f", without the paper's run {declared[0]}"
        why = f"{why}, {seeds}" if why else seeds
    return why


def _swapped(table: Table, column: str) -> dict[str, str] | None:
    """The other metric convention for a task column (acc <-> acc_norm), or for avg6 (every task that has
    both swapped; TASK_FACTS says which have acc only); None for other columns."""
    if column in TASKS:
        return {column: OTHER_METRIC[table.convention[column]]} if TASK_FACTS[column].normalised else None
    if column == AVERAGE:
        return swapped_convention(table.convention)
    return None


def swapped_convention(convention: dict[str, str]) -> dict[str, str]:
    """acc <-> acc_norm for every task that reports both (the others keep their only metric)."""
    return {task: OTHER_METRIC[m] if TASK_FACTS[task].normalised else m for task, m in convention.items()}


def _other(rows: Values, column: str, swapped: dict[str, str], spec: str, table: Table):
    try:
        return seed_cell(rows, column, swapped, spec, table)
    except UserError:  # the other metric may not exist (a task with acc only)
        return None


# ------------------------------------------------------------------------------------------------ rendering

def fmt_value(cell: Cell) -> str:
    """Two decimals, as the paper prints perplexities and accuracies."""
    if cell.value is None:
        return DAMAGED if cell.damaged else NOT_RUN
    if math.isnan(cell.value):
        return NO_VALUE
    text = f"{cell.value:.2f}" + (f" ± {cell.seed_sd:.2f}" if cell.seed_sd is not None else "")
    return text if cell.comparable else text + MARK


def fmt_reported(cell: Cell, *, tagged: bool = False) -> str:
    """The paper's value, two decimals; `tagged`: with its source tag ("2.00 [A-v1]")."""
    if cell.reported is None:
        return NOT_REPORTED
    return f"{cell.reported.value:.2f}" + (f" [{cell.reported.source}]" if tagged else "")


def paper_tags(built: BuiltTable) -> dict[str, int]:
    """Source tag -> how many of the table's cells have a paper value from it (table order)."""
    tags: dict[str, int] = {}
    for row in built.table.rows:
        for column in built.table.columns:
            rep = built.cell(row, column).reported
            if rep is not None:
                tags[rep.source] = tags.get(rep.source, 0) + 1
    return tags


def single_source(built: BuiltTable) -> str | None:
    """The one tag behind every paper value of the table (named once, in its heading), else None: each value then
    carries its own tag."""
    tags = paper_tags(built)
    return next(iter(tags)) if len(tags) == 1 else None


def cell_text(built: BuiltTable, row: TableRow, column: str, sep: str = " / ") -> str:
    """"ours / paper", or "ours / ckpt / paper" when a checkpoint was evaluated for this table; the paper's value
    carries its tag when the table's paper values come from more than one source."""
    parts = [fmt_value(built.cell(row, column))]
    if built.has_checkpoint:
        parts.append(fmt_value(built.cell(row, column, CHECKPOINT)))
    parts.append(fmt_reported(built.cell(row, column), tagged=len(paper_tags(built)) > 1))
    return sep.join(parts)


def shown_tags(built: BuiltTable, *texts: str, values: bool = True) -> list[str]:
    """The source tags an output of the table shows: those of its paper values (`values`: the output shows them),
    then those its title, notes and `texts` name (only tags reported.yaml defines)."""
    named = " ".join([built.table.paper_ref, *built.table.notes, *built.notes, *texts])
    return list(dict.fromkeys([*(paper_tags(built) if values else ()), *tags_in(named, built.sources)]))


def source_lines(built: BuiltTable, *texts: str, prefix: str = "paper source ", values: bool = True) -> list[str]:
    """The legend of the source tags the table's output shows (`shown_tags`): one line per tag, what it is, the
    paper version(s) of its values and its strength ("secondary: ... not the paper's own number")."""
    versions: dict[str, set[str]] = {}
    for row in built.table.rows:
        for column in built.table.columns:
            rep = built.cell(row, column).reported
            if rep is not None:
                versions.setdefault(rep.source, set()).add(rep.version)
    counts = paper_tags(built) if values else {}
    lines = source_legend(shown_tags(built, *texts, values=values), built.sources, versions=versions)
    out = []
    for line in lines:
        tag = line[1:line.index("]")]
        n = counts.get(tag, 0)
        held = f" ({plural(n, 'paper value')} of this table)" if n else ""
        out.append(f"{prefix}{line.replace(']', ']' + held, 1)}")
    return out


def sources_summary(tags: dict[str, int], sources: dict[str, Source]) -> str:
    """"7 from [WEB] (secondary), 2 from [A-v1] (primary)": which sources back a count of cells."""
    return ", ".join(f"{n} from {describe(tag, sources)}" for tag, n in tags.items())


def tasks_by_metric(convention: dict[str, str]) -> dict[str, list[str]]:
    """metric -> the tasks whose accuracy it is under `convention`, in TASKS order."""
    by_metric: dict[str, list[str]] = {}
    for task in TASKS:
        by_metric.setdefault(convention[task], []).append(task)
    return by_metric


def convention_line(table: Table) -> str:
    parts = [f"{metric} for {', '.join(tasks)}" for metric, tasks in tasks_by_metric(table.convention).items()]
    return "Task metric convention: " + "; ".join(parts) + f"; {AVERAGE} = mean of the six (%)."


def header_lines(built: BuiltTable) -> list[str]:
    t = built.table
    tags = paper_tags(built)
    one = single_source(built)
    tag = f" [{one}]" if one else " [source tag]" if tags else ""
    each = (f"each cell: ours / ckpt / paper{tag} (ckpt = a trained checkpoint we evaluated as the row; "
            if built.has_checkpoint else f"each cell: ours / paper{tag} (")
    lines = [f"{t.id}: {t.title} [{t.paper_ref}]",
             f"preset {built.preset}; runs root {built.runs_root}; {each}"
             "ours = mean over seeds with results, ± seed std when there are several)",
             convention_line(t), *(f"Note: {note}" for note in t.notes)]
    if not built.all_comparable:
        lines.append(f"{MARK} not comparable with the paper: its runs differ from the paper's recipe (notes below); "
                     "only the rank agreement of such cells means something.")
    return lines


def plural(n: int, unit: str, units: str | None = None) -> str:
    """"1 claim", "3 claims", "2 run directories" (`units`: an irregular plural): a count that names its unit."""
    return f"{n} {unit}" if n == 1 else f"{n} {units or unit + 's'}"


def rows_named(rows: list[str], kind: str = "rows", sep: str = ", ") -> str:
    """Who a shared note applies to: "base" for one row, "rows base, gated, resformer" for several (`kind` "claims"
    with `sep` "; " for claims, whose texts hold commas)."""
    return rows[0] if len(rows) == 1 else f"{kind} {sep.join(rows)}"


def fold(pairs: list[tuple[str, str]]) -> list[tuple[list[str], str]]:
    """(subject, note) pairs -> (subjects, note) once per distinct note, in the order the notes first arose: a
    note shared by several rows is printed once, naming them, instead of once per row."""
    by_note: dict[str, list[str]] = {}
    for subject, note in pairs:
        subjects = by_note.setdefault(note, [])
        if subject not in subjects:
            subjects.append(subject)
    return [(subjects, note) for note, subjects in by_note.items()]


def comparability_notes(built: BuiltTable) -> list[str]:
    """One "† not comparable: ..." line per source and reason, naming the rows it applies to (fold)."""
    out = []
    sources = (OURS, CHECKPOINT) if built.has_checkpoint else (OURS,)
    for source in sources:
        pairs = []
        for row in built.table.rows:
            by_why: dict[str, list[str]] = {}
            for column in built.table.columns:
                cell = built.cell(row, column, source)
                if cell.value is not None and not cell.comparable:
                    by_why.setdefault(cell.why, []).append(column)
            for why, columns in by_why.items():
                which = "" if len(columns) == len(built.table.columns) else f" [{', '.join(columns)}]"
                pairs.append((row.id, f"({source}){which}: not comparable: {why}"))
        out += [f"{MARK} {rows_named(rows)} {note}" for rows, note in fold(pairs)]
    return out


def render_markdown(built: BuiltTable) -> str:
    t = built.table
    title, *rest = header_lines(built)
    out = [f"### {title}", *rest, "", "| Model | " + " | ".join(_md_escape(c) for c in t.columns) + " |",
           "|---|" + "---|" * len(t.columns)]
    for row in t.rows:
        cells = [_md_escape(cell_text(built, row, c)) for c in t.columns]
        out.append(f"| {_md_escape(row.label)} | " + " | ".join(cells) + " |")
    out.extend(comparability_notes(built))
    out.extend(f"note: {n}" for n in built.notes)
    out.extend(source_lines(built))
    return "\n".join(out) + "\n"


LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$",
                 "{": r"\{", "}": r"\}", "^": r"\textasciicircum{}", "~": r"\textasciitilde{}", "\n": " ",
                 "\r": " ", "±": r"$\pm$", MARK: r"$^\dagger$"}


def _latex_escape(text: str) -> str:
    return "".join(LATEX_ESCAPES.get(ch, ch) for ch in text)


def _md_escape(text: str) -> str:
    """A Markdown table cell: a `|` would end the cell, a newline the row."""
    return str(text).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def render_latex(built: BuiltTable) -> str:
    t = built.table
    out = ["% " + " ".join(line.split()) for line in header_lines(built)]
    out += [r"\begin{tabular}{l" + "r" * len(t.columns) + "}", r"\toprule",
            "Model & " + " & ".join(_latex_escape(c) for c in t.columns) + r" \\", r"\midrule"]
    for row in t.rows:
        cells = []
        for c in t.columns:
            ours, paper = cell_text(built, row, c, sep=" | ").rsplit(" | ", 1)  # ours[ | ckpt], paper
            cells.append(_latex_escape(f"{ours} ({paper})"))
        out.append(_latex_escape(row.label) + " & " + " & ".join(cells) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}"]
    out.extend("% " + n for n in comparability_notes(built))
    out.extend("% note: " + n for n in built.notes)
    out.extend("% " + n for n in source_lines(built))
    return "\n".join(out) + "\n"


def to_frame(built: BuiltTable) -> pd.DataFrame:
    """The table in tidy form: one line per cell and source (what --format long writes)."""
    records = []
    sources = (OURS, CHECKPOINT) if built.has_checkpoint else (OURS,)
    for row in built.table.rows:
        for column in built.table.columns:
            for source in sources:
                cell = built.cell(row, column, source)
                rep = cell.reported
                records.append({"table": built.table.id, "row": row.id, "label": row.label, "column": column,
                                "metric": cell.metric, "reproduced": cell.value, "stderr": cell.stderr,
                                "seed_sd": cell.seed_sd, "seeds": " ".join(map(str, cell.seeds)),
                                "reported": None if rep is None else rep.value,
                                "paper_source": None if rep is None else f"{rep.source} {rep.version}",
                                "preset": built.preset, "source": source,
                                "comparable": None if cell.value is None else cell.comparable, "why": cell.why})
    return pd.DataFrame(records)


def to_wide(built: BuiltTable) -> pd.DataFrame:
    """The markdown table as data (what --format csv writes): one line per row; per column our value and the
    paper's (and the checkpoint's when one was evaluated) as separate columns, then the row's sources and
    its not-comparable notes."""
    records = []
    for row in built.table.rows:
        record: dict[str, object] = {"row": row.id, "model": row.label}
        for column in built.table.columns:
            ours = built.cell(row, column)
            record[column] = ours.value
            if built.has_checkpoint:
                record[f"{column} ckpt"] = built.cell(row, column, CHECKPOINT).value
            record[f"{column} paper"] = None if ours.reported is None else ours.reported.value
        record["source"] = " ".join(source for source in (OURS, CHECKPOINT)
                                    if any(built.cell(row, c, source).value is not None for c in built.table.columns))
        record["not comparable"] = "; ".join(
            dict.fromkeys(f"{c.source}: {c.why}" for column in built.table.columns
                          for c in (built.cell(row, column), built.cell(row, column, CHECKPOINT))
                          if c.value is not None and not c.comparable))
        records.append(record)
    return pd.DataFrame(records)


def render(built: BuiltTable, fmt: str) -> str:
    if fmt == "md":
        return render_markdown(built)
    if fmt == "latex":
        return render_latex(built)
    if fmt == "csv":
        return to_wide(built).to_csv(index=False)
    if fmt == "long":
        return to_frame(built).to_csv(index=False)
    raise UserError(f"unknown table format {fmt!r}", where="--format", fix=did_you_mean(fmt, FORMATS))


SUFFIX = {"md": "md", "latex": "tex", "csv": "csv", "long": "long.csv"}


def check_out_dir(out_dir: str | os.PathLike, option: str = "--out") -> Path:
    """An output directory that exists as a file is a one-line error (before anything is computed)."""
    out = Path(out_dir)
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise UserError(f"{probe} is a file, not a directory", where=option,
                        fix="name a directory (it is created when missing)")
    return out


def write_table(text: str, table_id: str, fmt: str, out_dir: str | os.PathLike, *, preset: str | None = None,
                overrides: list[str] | tuple[str, ...] = ()) -> Path:
    """Write a rendered table as <table>[.<preset>][.<overrides>].<suffix>: the file of a variant (--preset, --set)
    is named by it, so it never overwrites the default reading's file or another variant's."""
    from exoformer.io import atomic_write_text

    return atomic_write_text(check_out_dir(out_dir) / f"{table_id}{variant_suffix(preset, overrides)}.{SUFFIX[fmt]}",
                             text)


def variant_suffix(preset: str | None, overrides: list[str] | tuple[str, ...]) -> str:
    """".smoke", ".train.steps-30", ... for a file name: the preset asked for, then the --set overrides in a
    fixed order, each reduced to [A-Za-z0-9._-]; a long one ends in a digest of the whole so names stay short and
    distinct."""
    import hashlib
    import re

    parts = ([preset] if preset else []) + sorted(overrides)
    if not parts:
        return ""
    text = "+".join(re.sub(r"[^A-Za-z0-9._-]+", "-", part.replace("=", "-")) for part in parts)
    if len(text) > 80:
        digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
        text = f"{text[:60]}-{digest}"
    return f".{text}"
