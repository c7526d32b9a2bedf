"""Reproduced vs reported, per cell, with a tolerance, and the rank agreement of the rows per column.

Tolerance of a cell (all in the cell's display units: % for accuracies):
- accuracies and avg6: Z * sqrt(se^2 + sd^2), Z = 2 (about 95% for a normal error); se is lm-eval's
  stderr of our value (for avg6 combined over the six tasks: sqrt(sum se_t^2) / 6), sd the sample
  standard deviation over seeds when the row has two or more seeds with results (the reported number is
  one seed's run, so seed-to-seed spread is part of the expected gap);
- val_ppl: max(PPL_RELATIVE_TOLERANCE * reported, Z * sd): 1.5% of the reported perplexity. The paper's
  rows are 0.3-4.5% apart (14.09 to 14.79) and a 10B-token run's seed spread is well under 1%, so a
  1.5% gap means a different recipe or data, not noise [inference: the paper reports one seed];
- any other metric: Z * sd when there are seeds to spread, else OTHER_RELATIVE_TOLERANCE (10%).
A task cell outside its tolerance whose other metric (acc vs acc_norm) is within it gets a hint: the paper
may use the other convention. The smoke preset compares ranks only (absolute values are not comparable).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from exoformer.report.rank import kendall_tau_b
from exoformer.report.tables import NOT_REPORTED, NOT_RUN, OTHER_METRIC, PERCENT_COLUMNS, PERPLEXITY, BuiltTable, Cell

Z = 2.0
PPL_RELATIVE_TOLERANCE = 0.015
OTHER_RELATIVE_TOLERANCE = 0.10
WITHIN, OUTSIDE = "within", "OUTSIDE"


@dataclass(kw_only=True, slots=True)
class CellDiff:
    row: str
    label: str
    column: str
    reproduced: float | None
    reported: float | None
    delta: float | None = None
    tolerance: float | None = None
    status: str = ""
    """within / OUTSIDE / not run / not reported / rank only (smoke)."""
    hint: str = ""


@dataclass(kw_only=True, slots=True)
class TableDiff:
    built: BuiltTable
    cells: list[CellDiff]
    taus: dict[str, tuple[float | None, int]] = field(default_factory=dict)
    """column -> (Kendall tau-b between reproduced and reported row values, number of rows compared)."""

    @property
    def comparable(self) -> bool:
        return not self.built.smoke

    @property
    def outside(self) -> list[CellDiff]:
        return [c for c in self.cells if c.status == OUTSIDE]


def tolerance(cell: Cell) -> float | None:
    """The cell's tolerance (see the module docstring); None when nothing is known to set one."""
    sd = cell.seed_sd or 0.0
    if cell.column == PERPLEXITY:
        if cell.reported is None:
            return None
        return max(PPL_RELATIVE_TOLERANCE * cell.reported.value, Z * sd)
    if cell.column in PERCENT_COLUMNS:
        if cell.stderr is None and cell.seed_sd is None:
            return None
        return Z * math.sqrt((cell.stderr or 0.0) ** 2 + sd ** 2)
    if cell.seed_sd is not None:
        return Z * sd
    return None if cell.reported is None else OTHER_RELATIVE_TOLERANCE * abs(cell.reported.value)


def diff_cell(built: BuiltTable, row, column: str) -> CellDiff:
    cell = built.cell(row, column)
    rep = cell.reported
    out = CellDiff(row=row.id, label=row.label, column=column, reproduced=cell.value,
                   reported=None if rep is None else rep.value)
    if cell.value is None:
        out.status = NOT_RUN
        return out
    if rep is None:
        out.status = NOT_REPORTED
        return out
    out.delta = cell.value - rep.value
    if built.smoke:
        out.status = "rank only"
        return out
    out.tolerance = tolerance(cell)
    if out.tolerance is None:
        out.status = "no tolerance"
        out.hint = "lm-eval gave no stderr and there is one seed"
        return out
    out.status = WITHIN if abs(out.delta) <= out.tolerance else OUTSIDE
    if out.status == OUTSIDE and cell.other is not None and abs(cell.other - rep.value) <= out.tolerance:
        other = OTHER_METRIC.get(cell.metric or "", "the other metric")
        out.hint = (f"convention mismatch? {other} = {cell.other:.2f} matches the reported value; "
                    f"set convention: {{{column}: {other}}} if the paper used it")
    return out


def rank_agreement(built: BuiltTable) -> dict[str, tuple[float | None, int]]:
    """Per column: Kendall tau-b between reproduced and reported values over rows that have both."""
    taus = {}
    for column in built.table.columns:
        pairs = [(c.value, c.reported.value) for row in built.table.rows
                 if (c := built.cell(row, column)).value is not None and c.reported is not None]
        taus[column] = (kendall_tau_b([p[0] for p in pairs], [p[1] for p in pairs]) if len(pairs) >= 2 else None,
                        len(pairs))
    return taus


def diff_table(built: BuiltTable) -> TableDiff:
    cells = [diff_cell(built, row, column) for row in built.table.rows for column in built.table.columns]
    return TableDiff(built=built, cells=cells, taus=rank_agreement(built))


def _num(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def render_diff(result: TableDiff) -> str:
    built = result.built
    t = built.table
    lines = [f"diff {t.id}: {t.title} [{t.paper_ref}]", f"preset {built.preset}; runs root {built.runs_root}"]
    if not result.comparable:
        lines.append("smoke preset: absolute values are NOT comparable with the paper's (CPU-scale models, "
                     "synthetic corpus and tasks); only the rank agreement of the rows is shown.")
    else:
        lines.append(f"tolerance: {Z:g} x sqrt(lm-eval stderr^2 + seed std^2) for accuracies (%); "
                     f"{PPL_RELATIVE_TOLERANCE:.1%} of the reported value (or {Z:g} x seed std) for val_ppl")
        lines.append("")
        lines.append(f"{'row':<24} {'column':<14} {'ours':>8} {'paper':>8} {'delta':>8} {'tol':>7}  status")
        for c in result.cells:
            if c.reported is None:
                continue
            lines.append(f"{c.row:<24} {c.column:<14} {_num(c.reproduced):>8} {_num(c.reported):>8} "
                         f"{_num(c.delta, True):>8} {_num(c.tolerance):>7}  {c.status}"
                         + (f"  ({c.hint})" if c.hint else ""))
        skipped = sum(1 for c in result.cells if c.status == NOT_REPORTED)
        if skipped:
            lines.append(f"({skipped} cells with no reported value are not compared: {NOT_REPORTED})")
    lines.append("")
    lines.append("rank agreement with the paper's row order (Kendall tau-b, rows with both values):")
    for column, (tau, n) in result.taus.items():
        text = "n/a" if tau is None else f"{tau:+.2f}"
        lines.append(f"  {column:<14} tau = {text:>5}  over {n} rows")
    for note in built.notes:
        lines.append(f"note: {note}")
    if result.comparable:
        n_out = len(result.outside)
        compared = sum(1 for c in result.cells if c.status in (WITHIN, OUTSIDE))
        not_run = sum(1 for c in result.cells if c.status == NOT_RUN)
        lines.append(f"{n_out} of {compared} compared cells outside tolerance; {not_run} cells {NOT_RUN}.")
    return "\n".join(lines) + "\n"


def exit_code(result: TableDiff) -> int:
    """1 when a compared cell is outside its tolerance (never for the smoke preset), else 0."""
    return 1 if result.comparable and result.outside else 0
