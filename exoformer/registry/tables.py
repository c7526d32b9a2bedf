"""Tables and figures of the paper, declared as data in experiments/tables.yaml and figures.yaml.

A table is rows (each a list of spec names: the first is the paper's run, the rest are seed replicates)
by columns (metric ids from the `metrics:` vocabulary), plus the per-task metric convention that the diff
may flip (the paper does not say acc or acc_norm: docs/paper.md 2.2, 7.4) and the key of its reported numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from exoformer.errors import UserError, did_you_mean
from exoformer.eval.task_facts import PAPER_TASKS, TASK_FACTS
from exoformer.records import load
from exoformer.registry.claims_schema import Derived, parse_derived
from exoformer.registry.sweeps import check_name

TASKS = PAPER_TASKS
DEFAULT_CONVENTION = {task: facts.convention for task, facts in TASK_FACTS.items()}
"""Default metric per task (exoformer/eval/task_facts.py); a table may override it."""
TASK_METRICS = ("acc", "acc_norm")
FIGURE_KINDS = ("curves", "bars", "heatmap", "per-layer", "matrix", "table")
"""Parsed here; what each kind draws is exoformer/registry/figure_kinds.py."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Metric:
    """One column id: what it measures and which direction is better."""

    id: str
    description: str
    better: str  # "lower" | "higher"
    derived: Derived | None = None
    """How it is computed across runs (exoformer/report/tables/derived.py); None for a metric a run writes."""


@dataclass(kw_only=True, slots=True, frozen=True)
class TableRow:
    id: str
    label: str
    specs: tuple[str, ...]
    """First: the run the paper reports (seed 42); then seed replicates for the spread."""
    source: str
    figure_label: str = ""
    """The row's model's label in every figure (yaml `figure: {label, colour}`; exoformer/report/figures/style.py)."""
    colour: str = ""
    """The row's model's colour in every figure; empty: not declared."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Table:
    id: str
    title: str
    paper_ref: str
    columns: tuple[str, ...]
    rows: tuple[TableRow, ...]
    convention: dict[str, str] = field(default_factory=dict)
    reported: str = ""
    """Key of this table in results/paper/reported.yaml."""
    notes: tuple[str, ...] = ()
    """Choices the reader must know to read the table (printed under its title)."""
    ladders: tuple[str, ...] = ()
    """Groups of small runs of every row at several sizes and token budgets (`predict TABLE --from GROUP`;
    exoformer/registry/ladders.py says which of their specs belong to which row)."""
    source: str = ""

    def spec_names(self) -> list[str]:
        return list(dict.fromkeys(name for row in self.rows for name in row.specs))


@dataclass(kw_only=True, slots=True, frozen=True)
class Figure:
    id: str
    title: str
    kind: str
    specs: tuple[str, ...]
    series: tuple[str, ...]
    """Logged metric (metrics.jsonl key, e.g. val_loss) or analysis output (e.g. analysis.first_token_attention)."""
    against: tuple[str, ...] = ()
    """Rows of its table whose final validation loss the data-efficiency ratios under a `curves` figure are
    measured against (the paper: 1.84x vs the base model, ~1.5x vs gated attention)."""
    source: str = ""


def _where(file: str, container: Any, key: Any) -> str:
    lines = getattr(container, "key_lines", None) or {}
    line = lines.get(key) or getattr(container, "line", None)
    return f"{file}:{line}" if line else file


def _check_keys(body: dict, allowed: tuple[str, ...], file: str, what: str) -> None:
    for key in body:
        if key not in allowed:
            raise UserError(f"unknown key {key!r} in {what}", where=_where(file, body, key),
                            fix=did_you_mean(str(key), allowed))


def parse_metrics(section: Any, file: str) -> dict[str, Metric]:
    if not isinstance(section, dict):
        raise UserError("'metrics' must be a mapping id -> {description, better}", where=file, fix="see tables.yaml")
    out = {}
    for mid, body in section.items():
        where = _where(file, section, mid)
        check_name(str(mid), where=where, what="metric id")
        if not isinstance(body, dict):
            raise UserError(f"metric {mid!r} must be a mapping", where=where, fix="write description: and better:")
        _check_keys(body, ("description", "better", "derived"), file, f"metric {mid!r}")
        better = body.get("better")
        if better not in ("lower", "higher"):
            raise UserError(f"metric {mid!r}: better must be 'lower' or 'higher', got {better!r}",
                            where=_where(file, body, "better"), fix="write better: lower (or higher)")
        description = body.get("description", "")
        if not isinstance(description, str):
            raise UserError(f"metric {mid!r}: description must be a sentence, got a {type(description).__name__}",
                            where=_where(file, body, "description"), fix='write description: "what it measures"')
        derived = None if "derived" not in body else parse_derived(body["derived"], file, _where(file, body, "derived"),
                                                                   f"metric {mid!r} derived")
        out[mid] = Metric(id=mid, description=description, better=better, derived=derived)
    return out


@dataclass(kw_only=True, slots=True, frozen=True)
class _TableEntry:
    """A table as tables.yaml writes it, typed by records.load; parse_table then reads its rows and convention."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]
    paper_ref: str = ""
    convention: dict[str, Any] = field(default_factory=dict)
    reported: str | None = None
    notes: tuple[str, ...] = ()
    ladders: tuple[str, ...] = ()


@dataclass(kw_only=True, slots=True, frozen=True)
class _RowEntry:
    """A table row as tables.yaml writes it; `figure` is {label, colour}."""

    id: str
    label: str
    specs: tuple[str, ...]
    figure: dict[str, Any] = field(default_factory=dict)


def parse_table(tid: str, body: Any, file: str, where: str) -> Table:
    what = f"table {tid!r}"
    check_name(tid, where=where, what="table id")
    entry = load(_TableEntry, body, where=where, what=what)
    if not entry.columns or not entry.rows:
        raise UserError(f"{what}: columns and rows must be non-empty lists", where=where,
                        fix="list metric ids, e.g. [val_ppl, avg6], and rows: - {id, label, specs: [...]}")
    convention = dict(DEFAULT_CONVENTION)
    for task, metric in entry.convention.items():
        cw = _where(file, entry.convention, task)
        if task not in TASKS:
            raise UserError(f"{what}: unknown task {task!r} in convention", where=cw, fix=did_you_mean(str(task),
                                                                                                       TASKS))
        if metric not in TASK_METRICS:
            raise UserError(f"{what}: metric for {task} must be acc or acc_norm, got {metric!r}", where=cw,
                            fix=did_you_mean(str(metric), TASK_METRICS))
        convention[task] = metric
    rows: list[TableRow] = []
    for i, raw in enumerate(entry.rows):
        rw = f"{file}:{body['rows'].item_lines[i]}" if hasattr(body["rows"], "item_lines") else where
        rid = check_name(raw.get("id"), where=rw, what="row id")
        if any(r.id == rid for r in rows):
            raise UserError(f"{what}: duplicate row id {rid!r}", where=rw, fix="give each row its own id")
        row = load(_RowEntry, raw, where=rw, what=f"{what} row {rid!r}")
        look = row.figure
        if set(look) - {"label", "colour"} or not all(isinstance(v, str) for v in look.values()):
            raise UserError(f"{what} row {rid!r}: figure must be {{label: TEXT, colour: '#RRGGBB'}}",
                            where=_where(file, raw, "figure"), fix='write figure: {label: "Base", colour: "#666666"}')
        rows.append(TableRow(id=rid, label=row.label, specs=row.specs, source=rw, figure_label=look.get("label", ""),
                             colour=look.get("colour", "")))
    repeated = sorted({c for c in entry.columns if entry.columns.count(c) > 1})
    if repeated:
        raise UserError(f"{what}: column {repeated[0]!r} is listed twice", where=_where(file, body, "columns"),
                        fix="list each metric once")
    return Table(id=tid, title=entry.title, paper_ref=entry.paper_ref, columns=entry.columns, rows=tuple(rows),
                 convention=convention, reported=tid if entry.reported is None else entry.reported, notes=entry.notes,
                 ladders=entry.ladders, source=where)


def parse_figure(fid: str, body: Any, file: str, where: str) -> Figure:
    what = f"figure {fid!r}"
    check_name(fid, where=where, what="figure id")
    if not isinstance(body, dict):
        raise UserError(f"{what} must be a mapping", where=where, fix="write title:, kind:, specs:, series:")
    _check_keys(body, ("title", "kind", "specs", "series", "against"), file, what)
    figure = load(Figure, {**body, "id": fid, "source": where}, where=where, what=what)
    if figure.kind not in FIGURE_KINDS:
        raise UserError(f"{what}: unknown kind {figure.kind!r}", where=_where(file, body, "kind"),
                        fix=did_you_mean(figure.kind, FIGURE_KINDS))
    if not figure.specs or not figure.series:
        raise UserError(f"{what}: specs and series must be non-empty lists", where=where,
                        fix="list spec names or a table id (table:ID), and logged metrics or analysis outputs")
    return figure
