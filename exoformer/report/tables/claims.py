"""The paper's mechanistic claims (experiments/claims.yaml) beside our measurements (docs/paper.md 4.4).

Each declared claim reads per-run metrics (the analyse stage's rows, task "analysis", or a metric derived
across runs by report/tables/derived.py) for the specs of table rows: a value is the mean over the row's seeds whose
run has it, each spec's run being the selection's pick (report/reading/selection.py, as tables and figures read);
a row without such a run reads "not run". The paper's numbers are reported cells
of results/paper/reported.yaml (or literals). A measurement from runs that differ from the paper's recipe
(report/reading/recipe.py) is marked † with a note saying what differs. Torch-free.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from exoformer.registry.claims_schema import TABLE_CLAIMS, DeclaredClaim, PaperNumber, Read, check_claims
from exoformer.registry.registry import Registry
from exoformer.registry.reported import load_reported
from exoformer.report import NOT_REPORTED, NOT_RUN
from exoformer.report.tables.derived import reference_specs, row_derived, run_metric
from exoformer.report.reading.selection import Selection
from exoformer.report.tables.build import MARK, fold, rows_named, why_not_comparable


@dataclass(kw_only=True, slots=True, frozen=True)
class Claim:
    """One line of the claims table."""

    claim: str
    paper: str
    ours: str
    runs: str
    """Which runs our number comes from (spec names and how many seeds)."""
    why: str = ""
    """When our number is not comparable with the paper's: what differs from the paper's recipe."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Measured:
    """A per-run metric averaged over the seeds of one table row that have it."""

    value: float | None
    specs: tuple[str, ...]
    why: str = ""
    """What the runs differ in from the paper's recipe; empty when they are its recipe."""
    text: str = ""
    """A derived metric's own text (its interval, bounds and phases: report/tables/derived.py); empty otherwise."""

    def describe(self, row_label: str) -> str:
        if self.value is None:
            return f"{row_label}: {NOT_RUN}"
        return f"{row_label}: {', '.join(self.specs)}"


def measure(selection: Selection, read: Read) -> Measured:
    """The mean of `read.metric` over the seeds of its table row whose picked run has it; a derived metric: the
    row's value over its paired seeds (report/tables/derived.py), the same value the claims table shows."""
    registry = selection.registry
    row = next(r for r in registry.tables[read.table].rows if r.id == read.row)
    metric = registry.metrics.get(read.metric)
    found: list[tuple[str, float]] = []
    differs: list[list[str]] = []
    derived = metric is not None and metric.derived is not None
    for k, picked in enumerate(selection.row_runs(row.specs)):
        if picked is None:
            continue
        value = 0.0 if derived else run_metric(picked.rows, read.metric)
        if value is not None:
            found.append((row.specs[k], value))
            differs.append(picked.differs)
    if derived:
        got = row_derived(selection, metric.derived, row.specs, reference_specs(selection, metric))
        if got.seeds == 0:
            return Measured(value=None, specs=())
        found = found[:got.seeds]
        why = why_not_comparable(differs[:got.seeds], [n for n, _ in found], row.specs)
        return Measured(value=got.value, specs=tuple(n for n, _ in found), why=why, text=got.text)
    if not found:
        return Measured(value=None, specs=())
    why = why_not_comparable(differs, [n for n, _ in found], row.specs)
    return Measured(value=statistics.fmean(v for _, v in found), specs=tuple(n for n, _ in found), why=why)


def build_claims(registry: Registry, *, selection: Selection, reported_path: str | None = None) -> list[Claim]:
    """One Claim per declared claim, in declaration order, from the runs `selection` picks."""
    check_claims(registry)
    out = []
    for declared in registry.claims.values():
        if declared.compare in TABLE_CLAIMS:  # shown by diff and the verdicts
            continue
        measured = [measure(selection, read) for read in declared.reads]
        why = "; ".join(dict.fromkeys(f"{r.label}: {m.why}" for m, r in zip(measured, declared.reads) if m.why))
        out.append(Claim(claim=declared.claim, ours=_ours_text(declared, measured),
                         paper=_paper_text(declared, paper_values(registry, declared, reported_path)),
                         runs="; ".join(m.describe(r.label) for m, r in zip(measured, declared.reads)), why=why))
    return out


def paper_values(registry: Registry, claim: DeclaredClaim, reported_path: str | None = None) -> list[float | None]:
    """The paper's numbers of a claim: its reported cells (None: not reported) or literals."""
    cells = load_reported(registry, reported_path)

    def one(number: PaperNumber) -> float | None:
        if number.table is None:
            return number.value
        cell = cells.get((number.table, number.row, number.column))
        return None if cell is None else cell.value

    return [one(n) for n in claim.paper]


def _paper_text(claim: DeclaredClaim, values: list[float | None]) -> str:
    about = "~" if claim.approximate else ""

    def one(value: float | None) -> str:
        if value is None:
            return NOT_REPORTED
        if claim.compare == "ratio" or claim.format == "ratio":
            return f"{about}{value:g}x"
        return f"{about}{value:.0%}" if claim.format == "percent" else f"{about}{value:g}"

    return " vs ".join(one(v) for v in values)


def _ours_text(claim: DeclaredClaim, measured: list[Measured]) -> str:
    values = [m.value for m in measured]
    if claim.compare == "ratio":
        top, bottom = values
        if top is None or bottom is None or bottom == 0:
            return NOT_RUN
        return f"{top / bottom:.2f}x ({top:.4f} / {bottom:.4f})"

    def one(m: Measured) -> str:
        if m.text:
            return m.text
        if m.value is None:
            return NOT_RUN
        if claim.format == "ratio":
            return f"{m.value:.2f}x"
        return f"{m.value:.1%}" if claim.format == "percent" else f"{m.value:.4g}"

    return " vs ".join(one(m) for m in measured)


def render_markdown(claims: list[Claim], *, preset: str | None, notes: list[str] = ()) -> str:
    which = preset or "each spec's own"
    lines = [f"# Mechanistic claims (preset: {which})", "",
             "| claim | paper | ours | runs |", "|---|---|---|---|"]
    lines += [f"| {c.claim} | {c.paper} | {c.ours}{MARK if c.why else ''} | {c.runs} |" for c in claims]
    lines += [f"{MARK} {rows_named(names, 'claims', '; ')}: not comparable: {why}"
              for names, why in fold([(c.claim, c.why) for c in claims if c.why])]
    lines += [f"note: {note}" for note in notes]
    lines += ["", "PCA counts depend on d_model: compare them across models of one shape, not with the paper's "
              "numbers at another scale. Paper sources: results/paper/reported.yaml."]
    return "\n".join(lines) + "\n"
