"""Reproduced vs reported, per cell, with a tolerance, and the rank agreement of the rows per column.

The paper's value of a cell is one seed's run (docs/paper.md); ours is the mean of our K seeds. Both were scored on
the same items, so the draw of the test items is shared and cancels; what differs is the seed, and a seed's value on
these items already carries its item-level luck. So the tolerance is a prediction interval for one seed, with no
lm-eval stderr added (the derivation: docs/replication.md, How `diff` judges a cell):
- K >= 2 seeds with values: t(0.975, K-1) x s x sqrt(1 + 1/K), s the sd of our K seeds' values of the cell;
- one seed: 1.96 x sigma x sqrt(2), sigma the prior sd of one seed's value (`prior_seed_sd`: declared per metric,
  an assumption the output names; `--seed-sd METRIC=SD` replaces it); no prior for the metric: no tolerance.
The same rule holds ours against a checkpoint's value (the paper's weights: one seed, scored by us). The checkpoint
against the paper is the same weights on the same items, with no seed to vary: there the tolerance is lm-eval's
stderr rule `tolerance` (Z x se for accuracies, 1.5% for val_ppl), a check of the evaluation, not a test.

Each tested cell has the two-sided p of its statistic (the same t, or normal with a prior). OUTSIDE marks a cell
beyond its own 95% interval: about 1 cell in 20 of a faithful replication. The exit status asks whether any cell
differs beyond chance: Holm's adjustment over every tested cell of every section (valid however the cells
correlate: a row's seed moves all its columns), at family-wise ALPHA. A checkpoint cell outside its evaluation
check, or nothing compared at all, is exit 1 too.

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

import numpy as np
from scipy import stats

from exoformer.errors import UserError
from exoformer.eval.task_facts import TASK_FACTS
from exoformer.registry.tables import TASKS
from exoformer.report.stats.replication import holm
from exoformer.runs.run_index import CHECKPOINT, OURS
from exoformer.rundir import DAMAGED
from exoformer.report.stats.rank import MIN_RANK_ROWS, kendall_tau_b
from exoformer.report.tables.build import (
    AVERAGE,
    CE_PERPLEXITY,
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
"""The stderr rule's multiplier (`tolerance`: the checkpoint against the paper, and `compare`'s stderr interval)."""
PPL_RELATIVE_TOLERANCE = 0.015
OTHER_RELATIVE_TOLERANCE = 0.10
LEVEL = 0.95
"""Each cell's prediction interval: OUTSIDE about once in 20 cells of a faithful replication."""
ALPHA = 0.05
"""Family-wise level of the exit status (Holm over the tested cells)."""
PPL_PRIOR_RELATIVE = 0.005
"""[assumption] sd of one seed's val_ppl at the paper's scale, as a fraction of the value (0.005 nats of loss).
The paper reports one seed and no spread (docs/paper.md); with it a one-seed interval is about +-1.4%, near the
1.5% that a different recipe or data exceeds."""
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
    basis: str = ""
    """What set the tolerance: "K seeds", "prior" (assumed), "given" (--seed-sd) or "same weights"."""
    sd: float | None = None
    """One seed's sd behind the tolerance (measured over the seeds, prior or given), in the column's units."""
    p: float | None = None
    """Two-sided p of the cell's prediction statistic; None for a cell judged by the evaluation check."""
    p_holm: float | None = None
    """p adjusted by Holm over every tested cell of the diff (the exit status's family)."""


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
    def tested(self) -> list[CellDiff]:
        """The cells with a p: the exit status's Holm family."""
        return [c for s in self.sections for c in s.cells if c.p is not None]

    @property
    def beyond_chance(self) -> list[CellDiff]:
        """Tested cells that differ after Holm's adjustment at ALPHA."""
        return [c for c in self.tested if c.p_holm is not None and c.p_holm <= ALPHA]

    @property
    def failed_checks(self) -> list[CellDiff]:
        """Cells outside the evaluation check (no p: the same weights, or a fixed tolerance)."""
        return [c for c in self.outside if c.p is None]

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
    """The stderr rule: Z x sqrt(se^2 + sd^2) for accuracies, 1.5% for val_ppl (or Z x sd), else Z x sd or 10%.

    `diff` applies it where no seed varies: the checkpoint against the paper (the same weights on the same items,
    a check of the evaluation). `compare` reads it with `against` (two one-seed runs, whose stderrs add in).
    None when nothing is known to set one."""
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


def task_prior(task: str) -> float:
    """[assumption] sd of one seed's accuracy (points): lm-eval's stderr at 50%, 100 sqrt(0.25 / documents).

    The largest stderr the task can have. A seed's luck on fixed items is bounded by it when the seeds differ
    only item by item; a shift of the whole model adds to it. Not measured: the paper gives no seed spread."""
    return 100.0 * math.sqrt(0.25 / TASK_FACTS[task].documents)


def prior_seed_sd(column: str, reference: float, given: dict[str, float] | None = None) -> tuple[float, str] | None:
    """(sd of one seed's value in the column's units, "given" or "prior"), or None: no prior for the metric.

    avg6 takes the mean of its tasks' priors: the sd of a mean never exceeds the mean of the sds, however the
    tasks' seed effects correlate. val_ppl takes PPL_PRIOR_RELATIVE of the reference value."""
    if given and column in given:
        return given[column], "given"
    if column in TASKS:
        return task_prior(column), "prior"
    if column == AVERAGE:
        return sum(task_prior(t) for t in TASKS) / len(TASKS), "prior"
    if column in (PERPLEXITY, CE_PERPLEXITY):
        return PPL_PRIOR_RELATIVE * abs(reference), "prior"
    return None


def prediction_test(delta, sd, seeds, ref_seeds=1, df=None):
    """(half-width of the LEVEL interval, two-sided p) for a gap between our mean of `seeds` seeds and a mean of
    `ref_seeds` (1: the paper's one seed), one seed's sd `sd`: scale sd sqrt(1/K + 1/K_ref), Student t with `df`
    degrees of freedom (K - 1 when sd was measured on the K seeds; None or inf: a prior, normal). Vectorised."""
    delta, sd, seeds, ref_seeds = (np.asarray(x, dtype=float) for x in (delta, sd, seeds, ref_seeds))
    df = np.inf if df is None else np.asarray(df, dtype=float)
    scale = sd * np.sqrt(1.0 / seeds + 1.0 / ref_seeds)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(scale > 0, np.abs(delta) / np.where(scale > 0, scale, 1.0), np.inf)
    return stats.t.ppf(0.5 + LEVEL / 2, df) * scale, 2.0 * stats.t.sf(z, df)


def beyond_chance(p) -> np.ndarray:
    """Which p survive Holm's adjustment at ALPHA along the last axis (NaN: untested). The exit status is
    whether any does: Holm holds its family-wise level however the cells correlate."""
    adjusted = holm(np.asarray(p, dtype=float))
    return np.where(np.isnan(adjusted), False, adjusted <= ALPHA)


def _seed_basis(cell: Cell, against: Cell | None, given: dict[str, float] | None):
    """(sd, K, K_ref, df, basis) of the prediction test, or a string: why there is none."""
    k = max(1, len(cell.seeds))
    k_ref = max(1, len(against.seeds)) if against is not None else 1
    for sd, n in ((cell.seed_sd, k), (against.seed_sd if against is not None else None, k_ref)):
        if sd is not None and n >= 2:
            if sd <= 0:
                return f"the {n} seeds' values are identical: no spread to scale a gap by"
            return sd, k, k_ref, n - 1, f"{n} seeds"
    prior = prior_seed_sd(cell.column, _reference_value(cell, against) or 0.0, given)
    if prior is None:
        return f"one seed, and no prior seed sd for {cell.column}: --seed-sd {cell.column}=SD gives one"
    return prior[0], k, k_ref, None, prior[1]


def diff_cell(built: BuiltTable, row, column: str, left: str = OURS, right: str = PAPER,
              given: dict[str, float] | None = None) -> CellDiff:
    """One cell of the `left` source judged against the `right` one (the paper's value or a checkpoint's); `given`:
    column -> a seed sd that replaces the prior (--seed-sd)."""
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
    if left == CHECKPOINT:  # the paper's own weights: no seed varies, the stderr rule checks the evaluation
        out.tolerance, out.basis = tolerance(cell), "same weights"
        if out.tolerance is None:
            out.status, out.hint = "no tolerance", "lm-eval gave no stderr"
            return out
    else:
        basis = _seed_basis(cell, against, given)
        if isinstance(basis, str):
            out.status, out.hint = "no tolerance", basis
            return out
        out.sd, k, k_ref, df, out.basis = basis
        half, p = prediction_test(out.delta, out.sd, k, k_ref, df)
        out.tolerance, out.p = float(half), float(p)
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


def diff_table(built: BuiltTable, given: dict[str, float] | None = None) -> TableDiff:
    """Every source pair's cells, ranks and the convention decision; `given`: column -> a seed sd replacing the
    prior (--seed-sd). The tested cells of all sections form one Holm family (each cell's p_holm)."""
    sections = []
    for left, right in PAIRS:
        cells = [diff_cell(built, row, column, left, right, given) for row in built.table.rows
                 for column in built.table.columns]
        sections.append(Section(left=left, right=right, cells=cells, taus=rank_agreement(built, left, right)))
    fits, note = convention_fits(built)
    result = TableDiff(built=built, sections=sections, conventions=fits, convention_note=note)
    tested = result.tested
    for c, adjusted in zip(tested, holm(np.array([c.p for c in tested], dtype=float))):
        c.p_holm = float(adjusted)
    return result


MAX_PRIOR_SD = 1e6
"""The largest --seed-sd `diff` takes, in the column's units: far above any metric's range."""


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


def _holm_words(c: CellDiff) -> str:
    """After an OUTSIDE that has a p: whether it differs beyond chance over the whole diff."""
    if c.status != OUTSIDE or c.p_holm is None:
        return ""
    return f" beyond chance (Holm p {c.p_holm:.2g})" if c.p_holm <= ALPHA else f" (Holm p {c.p_holm:.2g}: chance)"


def rule_lines(sections: list[Section]) -> list[str]:
    """How the shown cells were judged: the prediction interval, the priors used (named as assumptions or as
    given), and the evaluation check of a checkpoint against the paper."""
    lines = [f"tolerance: ours against one seed's value (the paper's; a checkpoint's) is a {LEVEL:.0%} prediction "
             "interval for one seed, t(0.975, K-1) x s x sqrt(1 + 1/K) over our K seeds' values; with one seed "
             "1.96 x sqrt(2) x a prior seed sd. No lm-eval stderr is added: both were scored on the same items."]
    used: dict[str, str] = {}
    for c in (c for sec in sections for c in sec.cells if c.basis in ("prior", "given")):
        if c.basis == "given":
            used[c.column] = f"{c.column} {c.sd:.3g} (given)"
        elif c.column in (PERPLEXITY, CE_PERPLEXITY):
            used[c.column] = f"{c.column} {PPL_PRIOR_RELATIVE:.1%} of the value"
        else:
            used[c.column] = f"{c.column} {c.sd:.2f} points"
    if used:
        lines.append(f"prior seed sd of one-seed cells: {', '.join(used.values())}. A prior is an assumption, not "
                     "measured (the paper gives no seed spread): lm-eval's stderr at 50% for a task, the mean of "
                     "those for avg6. --seed-sd METRIC=SD replaces it.")
    if any(c.basis == "same weights" for sec in sections for c in sec.cells):
        lines.append(f"checkpoint vs paper (the same weights, no seed varies): {Z:g} x lm-eval stderr for "
                     f"accuracies, {PPL_RELATIVE_TOLERANCE:.1%} for val_ppl: a check of the evaluation.")
    return lines


def summary_line(result: TableDiff) -> str:
    """OUTSIDE cells against what chance gives, and which differ beyond chance (the exit status's rule)."""
    n_out = len(result.outside)
    judged = sum(s.judged for s in result.sections)
    m = len(result.tested)
    text = f"{n_out} of {judged} compared cells outside their tolerance"
    if m:
        beyond = result.beyond_chance
        text += (f"; about {(1 - LEVEL) * m:.1f} of the {m} tested would be by chance alone; "
                 f"{len(beyond)} differ beyond chance (Holm over the {m} at {ALPHA:.0%})")
    if result.failed_checks:
        text += f"; {len(result.failed_checks)} outside the checkpoint's evaluation check"
    return text


def _section_lines(section: Section, built: BuiltTable | None = None) -> list[str]:
    width = 8 + max((len(_tag(c)) for c in section.cells if c.reported is not None), default=0)
    lines = [f"{'row':<24} {'column':<14} {section.left:>8} {section.right:>{width}} {'delta':>8} {'tol':>7} "
             f"{'basis':>12}  status"]
    for c in section.cells:
        if c.reported is None:
            continue
        lines.append(f"{c.row:<24} {c.column:<14} {_num(c.reproduced):>8} {_num(c.reported) + _tag(c):>{width}} "
                     f"{_num(c.delta, True):>8} {_num(c.tolerance):>7} {c.basis or '-':>12}  {c.status}"
                     + _holm_words(c) + (f" {MARK}" if c.why else "") + (f"  ({c.hint})" if c.hint else ""))
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
    shown = [s for s in result.sections if s.has_data] or [result.ours]
    lines.extend(rule_lines(shown))
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
    not_run = sum(1 for c in result.cells if c.status == NOT_RUN)
    damaged = sum(1 for c in result.cells if c.status == DAMAGED)
    lines.append(f"{summary_line(result)}; {not_run} cells {NOT_RUN}" + (f", {damaged} cells {DAMAGED}." if damaged
                                                                          else "."))
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
    """1 when a tested cell differs beyond chance (Holm over the tested cells at ALPHA), a checkpoint cell fails
    its evaluation check, or nothing at all was compared; else 0. An OUTSIDE alone is about 1 cell in 20."""
    return 1 if result.beyond_chance or result.failed_checks or not result.compared else 0
