"""Reproduced vs reported, per cell, with a tolerance, and the rank agreement of the rows per column.

Tolerance of a cell (all in the cell's display units: % for accuracies):
- accuracies and avg6: Z * sqrt(se^2 + sd^2), Z = 2 (about 95% for a normal error); se is lm-eval's
  stderr of our value (for avg6 combined over the six tasks: sqrt(sum se_t^2) / 6), sd the sample
  standard deviation over seeds when the row has two or more seeds with results (the reported number is
  one seed's run, so seed-to-seed spread is part of the expected gap);
- val_ppl (the paper's convention, the author's estimate_loss: docs/official_code.md H3; the pure
  cross-entropy perplexity is the separate metric val_ppl_ce):
  max(PPL_RELATIVE_TOLERANCE * reported, Z * sd): 1.5% of the reported perplexity. The paper's
  rows are 0.3-4.5% apart (14.09 to 14.79) and a 10B-token run's seed spread is well under 1%, so a
  1.5% gap means a different recipe or data, not noise [inference: the paper reports one seed];
- any other metric: Z * sd when there are seeds to spread, else OTHER_RELATIVE_TOLERANCE (10%).
A task cell outside its tolerance whose other metric (acc vs acc_norm) is within it gets a hint: the paper
may use the other convention; and across the rows that have the paper's avg6, avg6 computed under each
convention says which one reproduces the paper (the mean gap of each).

Sources are compared pairwise, each pair only when both sides have values: ours vs paper, checkpoint vs
paper (does our evaluation reproduce the paper's numbers from the paper's own weights?) and ours vs
checkpoint. A cell whose runs differ from the paper's recipe (report/reading/recipe.py: another preset, `--set`,
a limited evaluation, ...) is not comparable: only its rank agreement is judged, and it says why. Nothing
compared at all (no cell judged, no rank computed) is exit 1 with the reason.

Each paper value's line carries its source tag; under each section against the paper one line says which sources
back the cells compared ("compared with the paper: 9 cells, 7 from [WEB] (secondary), 2 from [A-v1] (primary)"), and
the output ends with the legend of every tag it shows (build.source_lines: what the source is and its strength).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from exoformer.runs.run_index import CHECKPOINT, OURS
from exoformer.rundir import DAMAGED
from exoformer.report.stats.rank import MIN_RANK_ROWS, kendall_tau_b
from exoformer.report.tables.build import (
    AVERAGE,
    MARK,
    NOT_REPORTED,
    NOT_RUN,
    OTHER_METRIC,
    PERCENT_COLUMNS,
    PERPLEXITY,
    BuiltTable,
    Cell,
    fold,
    plural,
    rows_named,
    source_lines,
    sources_summary,
    swapped_convention,
    tasks_by_metric,
)

Z = 2.0
PPL_RELATIVE_TOLERANCE = 0.015
OTHER_RELATIVE_TOLERANCE = 0.10
WITHIN, OUTSIDE = "within", "OUTSIDE"
RANK_ONLY = "rank only"
TIE = 0.005
"""Convention gaps closer than this (percentage points, under the 2-decimal display) decide nothing."""
PAPER = "paper"
PAIRS = ((OURS, PAPER), (CHECKPOINT, PAPER), (OURS, CHECKPOINT))
"""The source pairs diff compares, in the order it shows them."""


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
    """within / OUTSIDE / not run / not reported / no tolerance / rank only (not comparable)."""
    hint: str = ""
    why: str = ""
    """For a cell that is not comparable: what differs from the paper's recipe."""
    paper_source: str = ""
    """The source tag of the paper's value (reported.yaml) when the reference is the paper, else empty."""


@dataclass(kw_only=True, slots=True)
class Section:
    """One source pair: `left` (the values judged) against `right` (the reference value)."""

    left: str
    right: str
    cells: list[CellDiff]
    taus: dict[str, tuple[float | None, int]] = field(default_factory=dict)
    """column -> (Kendall tau-b between left and right row values, number of rows compared)."""

    @property
    def has_data(self) -> bool:
        return any(c.reproduced is not None and c.reported is not None for c in self.cells)

    @property
    def judged(self) -> int:
        return sum(1 for c in self.cells if c.status in (WITHIN, OUTSIDE))

    @property
    def ranked(self) -> int:
        return sum(1 for tau, _ in self.taus.values() if tau is not None)


@dataclass(kw_only=True, slots=True, frozen=True)
class ConventionFit:
    """How well avg6 under one metric convention reproduces the paper's avg6, over the rows that have both."""

    source: str
    convention: str
    gap: float
    """Mean |ours - paper| of avg6 (percentage points)."""
    rows: int


@dataclass(kw_only=True, slots=True)
class TableDiff:
    built: BuiltTable
    sections: list[Section]
    conventions: list[ConventionFit] = field(default_factory=list)
    convention_note: str = ""
    """Why no convention was decided (the rows with the paper's avg6 are not comparable), else empty."""

    @property
    def ours(self) -> Section:
        return self.sections[0]

    @property
    def cells(self) -> list[CellDiff]:
        """Ours vs paper, cell by cell."""
        return self.ours.cells

    @property
    def taus(self) -> dict[str, tuple[float | None, int]]:
        return self.ours.taus

    @property
    def outside(self) -> list[CellDiff]:
        return [c for s in self.sections for c in s.cells if c.status == OUTSIDE]

    @property
    def compared(self) -> bool:
        return any(s.judged or s.ranked for s in self.sections)

    def nothing_compared_why(self) -> str:
        ours = self.ours
        not_run = sum(1 for c in ours.cells if c.status == NOT_RUN)
        if not_run == len(ours.cells):
            return f"no run has results for this table ({not_run} cells {NOT_RUN})"
        with_both = sum(1 for c in ours.cells if c.reproduced is not None and c.reported is not None)
        if with_both == 0:
            return "no cell with our value has a reported value to compare with"
        return (f"{with_both} cells have both values but none could be judged (no tolerance, or not comparable "
                f"with fewer than {MIN_RANK_ROWS} rows to rank)")


def tolerance(cell: Cell, against: Cell | None = None) -> float | None:
    """The cell's tolerance against the paper's value, or against `against` (another source's cell, whose
    stderr and seed spread add in); None when nothing is known to set one (see the module docstring)."""
    sd = math.sqrt((cell.seed_sd or 0.0) ** 2 + ((against.seed_sd or 0.0) ** 2 if against is not None else 0.0))
    has_sd = cell.seed_sd is not None or (against is not None and against.seed_sd is not None)
    reference = _reference_value(cell, against)
    if cell.column == PERPLEXITY:
        if reference is None:
            return None
        return max(PPL_RELATIVE_TOLERANCE * reference, Z * sd)
    if cell.column in PERCENT_COLUMNS:
        ses = [cell.stderr] + ([against.stderr] if against is not None else [])
        if all(s is None for s in ses) and not has_sd:
            return None
        return Z * math.sqrt(sum((s or 0.0) ** 2 for s in ses) + sd ** 2)
    if has_sd:
        return Z * sd
    return None if reference is None else OTHER_RELATIVE_TOLERANCE * abs(reference)


def _reference_value(cell: Cell, against: Cell | None) -> float | None:
    if against is not None:
        return against.value
    return None if cell.reported is None else cell.reported.value


def diff_cell(built: BuiltTable, row, column: str, left: str = OURS, right: str = PAPER) -> CellDiff:
    """One cell of the `left` source judged against the `right` one (the paper's value or a checkpoint's)."""
    cell = built.cell(row, column, left)
    against = None if right == PAPER else built.cell(row, column, right)
    reference = _reference_value(cell, against)
    out = CellDiff(row=row.id, label=row.label, column=column, reproduced=cell.value, reported=reference,
                   paper_source=cell.reported.source if right == PAPER and cell.reported is not None else "")
    if cell.value is None:
        out.status = DAMAGED if cell.damaged else NOT_RUN  # one word for a damaged run, as `status` says
        return out
    if reference is None:
        out.status = NOT_REPORTED if right == PAPER else f"{right} {NOT_RUN}"
        return out
    out.delta = cell.value - reference
    sides = [(left, cell)] + ([(right, against)] if against is not None else [])
    whys = [c.why if against is None else f"{name}: {c.why}" for name, c in sides if not c.comparable]
    if whys:
        out.status, out.why = RANK_ONLY, "; ".join(dict.fromkeys(whys))
        return out
    out.tolerance = tolerance(cell, against)
    if out.tolerance is None:
        out.status = "no tolerance"
        out.hint = "lm-eval gave no stderr and there is one seed"
        return out
    out.status = WITHIN if abs(out.delta) <= out.tolerance else OUTSIDE
    if (out.status == OUTSIDE and right == PAPER and column != AVERAGE and cell.other is not None
            and abs(cell.other - reference) <= out.tolerance):
        other = OTHER_METRIC.get(cell.metric or "", "the other metric")
        out.hint = (f"convention mismatch? {other} = {cell.other:.2f} matches the reported value; "
                    f"set convention: {{{column}: {other}}} if the paper used it")
    return out


def rank_agreement(built: BuiltTable, left: str = OURS, right: str = PAPER) -> dict[str, tuple[float | None, int]]:
    """Per column: Kendall tau-b between the two sources' values over the rows that have both; None over fewer
    than MIN_RANK_ROWS rows, whose order says nothing (exoformer/report/stats/rank.py)."""
    taus = {}
    for column in built.table.columns:
        pairs = []
        for row in built.table.rows:
            cell = built.cell(row, column, left)
            reference = _reference_value(cell, None if right == PAPER else built.cell(row, column, right))
            if cell.value is not None and reference is not None:
                pairs.append((cell.value, reference))
        taus[column] = (kendall_tau_b([p[0] for p in pairs], [p[1] for p in pairs])
                        if len(pairs) >= MIN_RANK_ROWS else None, len(pairs))
    return taus


def describe_convention(metric_for: dict[str, str]) -> str:
    """"acc_norm (5 tasks) + acc (one task)": which metric each task's accuracy is."""
    return " + ".join(f"{m} ({len(ts)} tasks)" if len(ts) > 2 else f"{m} ({', '.join(ts)})"
                      for m, ts in tasks_by_metric(metric_for).items())


def convention_fits(built: BuiltTable) -> tuple[list[ConventionFit], str]:
    """avg6 under the table's convention and under the swapped one, against the paper's avg6, per source.

    Only comparable rows that have the paper's avg6 and both of our avg6 values count; the note says why
    there is no decision when such rows exist but none is comparable.
    """
    table = built.table
    if AVERAGE not in table.columns:
        return [], ""
    names = (describe_convention(table.convention),
             describe_convention(swapped_convention(table.convention)))
    fits, skipped = [], 0
    for source in (OURS, CHECKPOINT):
        pairs = []
        for row in table.rows:
            cell = built.cell(row, AVERAGE, source)
            if cell.value is None or cell.other is None or cell.reported is None:
                continue
            if not cell.comparable:
                skipped += 1
                continue
            pairs.append((cell.value, cell.other, cell.reported.value))
        if pairs:
            for name, i in zip(names, (0, 1)):
                gap = sum(abs(p[i] - p[2]) for p in pairs) / len(pairs)
                fits.append(ConventionFit(source=source, convention=name, gap=gap, rows=len(pairs)))
    note = "" if fits or not skipped else (f"metric convention not decided: the {skipped} {AVERAGE} cells beside "
                                           f"the paper's are not comparable ({MARK})")
    return fits, note


def diff_table(built: BuiltTable) -> TableDiff:
    sections = []
    for left, right in PAIRS:
        cells = [diff_cell(built, row, column, left, right) for row in built.table.rows
                 for column in built.table.columns]
        sections.append(Section(left=left, right=right, cells=cells, taus=rank_agreement(built, left, right)))
    fits, note = convention_fits(built)
    return TableDiff(built=built, sections=sections, conventions=fits, convention_note=note)


def _num(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def _tag(c: CellDiff) -> str:
    return f" [{c.paper_source}]" if c.paper_source else ""


def compared_sources(section: Section) -> dict[str, int]:
    """Source tag -> how many cells of a section against the paper have both values (compared, judged or ranked)."""
    tags: dict[str, int] = {}
    for c in section.cells:
        if c.paper_source and c.reproduced is not None and c.reported is not None:
            tags[c.paper_source] = tags.get(c.paper_source, 0) + 1
    return tags


def compared_line(section: Section, built: BuiltTable) -> str:
    """Which sources back the paper's values a section compares: "compared with the paper: 9 cells, 7 from [WEB]
    (secondary), 2 from [A-v1] (primary)", and of the cells with a paper value not compared (not run), how many."""
    compared = compared_sources(section)
    n = sum(compared.values())
    waiting: dict[str, int] = {}
    for c in section.cells:
        if c.paper_source and c.reproduced is None:
            waiting[c.paper_source] = waiting.get(c.paper_source, 0) + 1
    text = f"compared with the paper: {plural(n, 'cell')}"
    text += f", {sources_summary(compared, built.sources)}" if compared else ""
    if waiting:
        text += (f"; {plural(sum(waiting.values()), 'paper value')} without our value, "
                 f"{sources_summary(waiting, built.sources)}")
    return text


def _section_lines(section: Section, built: BuiltTable | None = None) -> list[str]:
    width = 8 + max((len(_tag(c)) for c in section.cells if c.reported is not None), default=0)
    lines = [f"{'row':<24} {'column':<14} {section.left:>8} {section.right:>{width}} {'delta':>8} {'tol':>7}  status"]
    for c in section.cells:
        if c.reported is None:
            continue
        lines.append(f"{c.row:<24} {c.column:<14} {_num(c.reproduced):>8} {_num(c.reported) + _tag(c):>{width}} "
                     f"{_num(c.delta, True):>8} {_num(c.tolerance):>7}  {c.status}"
                     + (f" {MARK}" if c.why else "") + (f"  ({c.hint})" if c.hint else ""))
    skipped = sum(1 for c in section.cells if c.status == NOT_REPORTED)
    if skipped:
        lines.append(f"({skipped} cells with no reported value are not compared: {NOT_REPORTED})")
    if built is not None and section.right == PAPER and any(c.paper_source for c in section.cells):
        lines.append(compared_line(section, built))
    whys = fold([(c.row, c.why) for c in section.cells if c.why])
    lines.extend(f"{MARK} {rows_named(rows)}: not comparable: {why}" for rows, why in whys)
    lines += ["", f"rank agreement with the {section.right}'s row order (Kendall tau-b, rows with both values):"]
    for column, (tau, n) in section.taus.items():
        if tau is None and 0 < n < MIN_RANK_ROWS:
            lines.append(f"  {column:<14} no information over {n} row(s): fewer than {MIN_RANK_ROWS} fall in the same "
                         "order by chance too often")
            continue
        text = "n/a" if tau is None else f"{tau:+.2f}"
        lines.append(f"  {column:<14} tau = {text:>5}  over {n} rows")
    return lines


def render_diff(result: TableDiff) -> str:
    built = result.built
    t = built.table
    lines = [f"diff {t.id}: {t.title} [{t.paper_ref}]", f"preset {built.preset}; runs root {built.runs_root}"]
    n_not = sum(1 for s in result.sections for c in s.cells if c.status == RANK_ONLY)
    if n_not:
        lines.append(f"{n_not} cells are NOT comparable with the paper's recipe ({MARK}; what differs: the {MARK} "
                     "lines below); only the rank agreement of the rows is judged for them.")
    lines.append(f"tolerance: {Z:g} x sqrt(lm-eval stderr^2 + seed std^2) for accuracies (%); "
                 f"{PPL_RELATIVE_TOLERANCE:.1%} of the reference value (or {Z:g} x seed std) for val_ppl")
    shown = [s for s in result.sections if s.has_data] or [result.ours]
    for section in shown:
        lines.append("")
        if len(shown) > 1 or section is not result.ours:
            lines.append(f"## {section.left} vs {section.right}")
        lines.extend(_section_lines(section, built))
    if result.conventions:
        lines += ["", f"metric convention from {AVERAGE} (mean |ours - paper| over the rows with the paper's "
                      f"{AVERAGE}):"]
        for source in (OURS, CHECKPOINT):
            fits = [f for f in result.conventions if f.source == source]
            if not fits:
                continue
            best = min(fits, key=lambda f: f.gap)
            tie = max(f.gap for f in fits) - best.gap < TIE
            for fit in fits:
                mark = "  (tie)" if tie else ("  <- reproduces the paper best" if fit is best else "")
                lines.append(f"  {source:<10} {fit.convention:<40} gap {fit.gap:5.2f}  over {fit.rows} rows{mark}")
    elif result.convention_note:
        lines.append(result.convention_note)
    lines += [f"note: {note}" for note in built.notes]
    n_out = len(result.outside)
    judged = sum(s.judged for s in result.sections)
    not_run = sum(1 for c in result.cells if c.status == NOT_RUN)
    damaged = sum(1 for c in result.cells if c.status == DAMAGED)
    lines.append(f"{n_out} of {judged} compared cells outside tolerance; {not_run} cells {NOT_RUN}"
                 + (f", {damaged} cells {DAMAGED}." if damaged else "."))
    if not result.compared:
        lines.append(f"nothing was compared: {result.nothing_compared_why()}.")
    against_paper = [s for s in shown if s.right == PAPER]
    tags = [c.paper_source for s in against_paper for c in s.cells if c.paper_source]
    lines += source_lines(built, *(f"[{tag}]" for tag in tags), *maxima_tags(built), values=bool(against_paper))
    return "\n".join(lines) + "\n"


def maxima_tags(built: BuiltTable) -> list[str]:
    """The tags of the paper's column maxima of this table ("[WIZ]"), which `diff` prints after this text."""
    from exoformer.report.tables.verdicts import maxima_sources

    return [f"[{tag}]" for tag in maxima_sources(built).values() if tag]


def exit_code(result: TableDiff) -> int:
    """1 when a judged cell is outside its tolerance, or when nothing at all was compared; else 0."""
    return 1 if result.outside or not result.compared else 0
