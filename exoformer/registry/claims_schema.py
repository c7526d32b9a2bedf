"""The paper's claims as data (experiments/claims.yaml, section `claims:`), parsed strictly.

Every claim of the paper is declared here once. A claim reads per-run metrics from the rows of declared tables
(our number: the mean over the row's seeds that have it) and compares them as the paper states them: `value`
(one read), `ratio` (first / second), `versus` (first vs second), `difference` (a gap between two rows of a
column, with a replication verdict) or `column_max` (a column's best over an unknown row). Metrics computed
across runs (data efficiency, the attention-sink ratio) are declared with the metric (`derived`, parsed here).
`paper` gives the paper's numbers, one per read for `versus` and one otherwise, each a reported cell (table,
row, column of results/paper/reported.yaml) or a literal `value` (with its source tag and paper version). Unknown keys
and wrong types are one-line errors with file:line; names are checked against the registry by
`check_claims` (run by `validate` and by the `claims` verb). Torch-free.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any

from exoformer.errors import UserError, did_you_mean
from exoformer.registry.sweeps import check_name

COMPARISONS = {"value": 1, "ratio": 2, "versus": 2, "difference": 2, "column_max": 1}
"""Comparison -> how many reads it takes. `difference`: the paper's gap between two rows of one column (first -
second; judged by exoformer/report/tables/verdicts.py); `column_max`: the paper's best value of a column over an unknown
row (min where lower is better; its read names no row)."""
TABLE_CLAIMS = ("difference", "column_max")
"""Comparisons read from a table's cells (their metric is a column of the table), shown by `diff` and the verdicts."""
FORMATS = ("number", "percent", "ratio")
CLAIM_KEYS = ("claim", "compare", "reads", "paper", "format", "approximate", "margin", "tolerance")
READ_KEYS = ("table", "row", "metric", "label")
CELL_KEYS = ("table", "row", "column")
DERIVED_KEYS = ("estimator", "reference", "input")
ESTIMATORS = {"tokens_to_loss": False, "reference_over_own": True}
"""A derived metric's estimator (exoformer/report/tables/derived.py) -> whether it names an `input` metric."""
LITERAL_KEYS = ("value", "source", "version", "note")


@dataclass(kw_only=True, slots=True, frozen=True)
class Read:
    """One measured number: `metric` of the runs of `table`'s row `row`, shown as `label`."""

    table: str
    row: str
    metric: str
    label: str
    source: str


@dataclass(kw_only=True, slots=True, frozen=True)
class PaperNumber:
    """The paper's number: a reported cell (table, row, column) or a literal value."""

    table: str | None = None
    row: str | None = None
    column: str | None = None
    value: float | None = None
    source: str = ""
    version: str = ""
    note: str = ""


@dataclass(kw_only=True, slots=True, frozen=True)
class DeclaredClaim:
    id: str
    claim: str
    compare: str
    reads: tuple[Read, ...]
    paper: tuple[PaperNumber, ...]
    format: str = "number"
    """How a value is shown: number, percent (a fraction shown in %) or ratio (1.23x)."""
    approximate: bool = False
    """The paper says "about" (shown as ~)."""
    margin: float | None = None
    """A `difference` claim of "no loss" or "matches": the equivalence margin in the metric's units (the verdict
    is `equivalent` when our 90% interval lies inside +-margin, docs/replication.md); None: a directional claim."""
    tolerance: float | None = None
    """A `difference` claim's between-implementation tolerance on its size, in the metric's units: how far two
    faithful implementations' true effects may differ (docs/replication.md, "The verdicts"); None: the default,
    a tenth of the paper's effect."""
    source: str = ""


@dataclass(kw_only=True, slots=True, frozen=True)
class Derived:
    """A metric computed across runs: seed k of a table row against seed k of the `reference` row."""

    estimator: str
    table: str
    row: str
    input: str | None = None
    """The per-run metric the estimator divides (reference_over_own)."""
    source: str = ""


def _line(file: str, container: Any, key: Any = None) -> str:
    lines = getattr(container, "key_lines", None) or {}
    line = lines.get(key) if key is not None else None
    line = line or getattr(container, "line", None)
    return f"{file}:{line}" if line else file


def _check_keys(body: Any, allowed: tuple[str, ...], file: str, what: str) -> None:
    if not isinstance(body, dict):
        raise UserError(f"{what} must be a mapping", where=_line(file, body), fix=f"write {', '.join(allowed)}")
    for key in body:
        if key not in allowed:
            raise UserError(f"unknown key {key!r} in {what}", where=_line(file, body, key),
                            fix=did_you_mean(str(key), allowed))


def _text(body: dict, key: str, file: str, what: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{what} needs {key}: (a non-empty string)", where=_line(file, body, key),
                        fix=f"write {key}: <text>")
    return value


def _items(body: dict, key: str, file: str, what: str) -> list:
    value = body.get(key)
    if not isinstance(value, list) or not value:
        raise UserError(f"{what} needs {key}: (a non-empty list)", where=_line(file, body, key),
                        fix=f"write {key}: [- ...]")
    return value


def _item_where(file: str, items: Any, index: int) -> str:
    lines = getattr(items, "item_lines", None)
    return f"{file}:{lines[index]}" if lines and index < len(lines) else _line(file, items)


def parse_read(body: Any, file: str, where: str, what: str, *, row: bool = True) -> Read:
    _check_keys(body, READ_KEYS if row else ("table", "metric"), file, what)
    table, metric = _text(body, "table", file, what), _text(body, "metric", file, what)
    row = _text(body, "row", file, what) if row else ""
    label = body.get("label", row)
    if not isinstance(label, str):
        raise UserError(f"{what}: label must be a string", where=_line(file, body, "label"), fix="quote it")
    return Read(table=table, row=row, metric=metric, label=label, source=where)


def parse_derived(body: Any, file: str, where: str, what: str) -> Derived:
    """A metric's `derived:` mapping: {estimator, reference: {table, row}[, input]}."""
    _check_keys(body, DERIVED_KEYS, file, what)
    estimator = body.get("estimator")
    if estimator not in ESTIMATORS:
        raise UserError(f"{what}: estimator must be one of {', '.join(ESTIMATORS)}, got {estimator!r}",
                        where=_line(file, body, "estimator"), fix=did_you_mean(str(estimator), ESTIMATORS))
    reference = body.get("reference")
    _check_keys(reference, ("table", "row"), file, f"{what} reference")
    table, row = (_text(reference, k, file, f"{what} reference") for k in ("table", "row"))
    needs = ESTIMATORS[estimator]
    if needs != ("input" in body):
        raise UserError(f"{what}: estimator {estimator} {'needs' if needs else 'takes no'} input:",
                        where=_line(file, body), fix="name the per-run metric it divides" if needs
                        else "remove input:")
    return Derived(estimator=estimator, table=table, row=row, input=_text(body, "input", file, what) if needs else None,
                   source=where)


def parse_paper_number(body: Any, file: str, where: str, what: str) -> PaperNumber:
    keys = LITERAL_KEYS if isinstance(body, dict) and "value" in body else CELL_KEYS
    _check_keys(body, keys, file, what)
    if keys is LITERAL_KEYS:
        value = body["value"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{what}: value must be a number, got {value!r}", where=_line(file, body, "value"),
                            fix="write value: 2.0 (or name a reported cell: table, row, column)")
        return PaperNumber(value=float(value), source=str(body.get("source", "")),
                           version=str(body.get("version", "")), note=str(body.get("note", "")))
    table, row, column = (_text(body, k, file, what) for k in CELL_KEYS)
    return PaperNumber(table=table, row=row, column=column, source=where)


def parse_claim(cid: Any, body: Any, file: str, where: str) -> DeclaredClaim:
    what = f"claim {cid!r}"
    check_name(str(cid), where=where, what="claim id")
    _check_keys(body, CLAIM_KEYS, file, what)
    text = _text(body, "claim", file, what)
    compare = body.get("compare")
    if compare not in COMPARISONS:
        raise UserError(f"{what}: compare must be one of {', '.join(COMPARISONS)}, got {compare!r}",
                        where=_line(file, body, "compare"), fix=did_you_mean(str(compare), COMPARISONS))
    raw_reads = _items(body, "reads", file, what)
    reads = tuple(parse_read(r, file, _item_where(file, raw_reads, i), f"{what} read {i + 1}",
                             row=compare != "column_max") for i, r in enumerate(raw_reads))
    if len(reads) != COMPARISONS[compare]:
        raise UserError(f"{what}: compare {compare} takes {COMPARISONS[compare]} reads, got {len(reads)}",
                        where=_line(file, body, "reads"), fix="list one read per measured number")
    raw_paper = _items(body, "paper", file, what)
    paper = tuple(parse_paper_number(p, file, _item_where(file, raw_paper, i), f"{what} paper number {i + 1}")
                  for i, p in enumerate(raw_paper))
    wanted = len(reads) if compare == "versus" else 1
    if len(paper) != wanted:
        raise UserError(f"{what}: compare {compare} takes {wanted} paper number(s), got {len(paper)}",
                        where=_line(file, body, "paper"), fix="give one paper number per compared value")
    fmt = body.get("format", "number")
    if fmt not in FORMATS:
        raise UserError(f"{what}: format must be one of {', '.join(FORMATS)}, got {fmt!r}",
                        where=_line(file, body, "format"), fix=did_you_mean(str(fmt), FORMATS))
    approximate = body.get("approximate", False)
    if not isinstance(approximate, bool):
        raise UserError(f"{what}: approximate must be true or false", where=_line(file, body, "approximate"),
                        fix="write approximate: true when the paper says 'about'")
    margin = body.get("margin")
    if margin is not None and (compare != "difference" or isinstance(margin, bool)
                               or not isinstance(margin, int | float) or not math.isfinite(margin) or margin <= 0):
        raise UserError(f"{what}: margin must be a positive number on a difference claim, got {margin!r}",
                        where=_line(file, body, "margin"),
                        fix="write margin: 0.5 (in the column's units) on a `compare: difference` claim, or leave it out")
    tolerance = body.get("tolerance")
    if tolerance is not None and (compare != "difference" or isinstance(tolerance, bool)
                                  or not isinstance(tolerance, int | float) or not math.isfinite(tolerance)
                                  or tolerance < 0):
        raise UserError(f"{what}: tolerance must be a number >= 0 on a difference claim, got {tolerance!r}",
                        where=_line(file, body, "tolerance"),
                        fix="write tolerance: 0.2 (in the column's units) on a `compare: difference` claim, or leave "
                            "it out for the default (a tenth of the paper's effect)")
    return DeclaredClaim(id=str(cid), claim=text, compare=compare, reads=reads, paper=paper, format=fmt,
                         approximate=approximate, margin=None if margin is None else float(margin),
                         tolerance=None if tolerance is None else float(tolerance), source=where)


def parse_claims(section: Any, file: str) -> dict[str, DeclaredClaim]:
    """The `claims:` section of one registry file, in file order."""
    return {str(cid): parse_claim(cid, body, file, _line(file, section, cid)) for cid, body in section.items()}


def check_claims(registry: Any) -> None:
    """Every table, row, metric and reported column a claim or a derived metric names exists (a typo would read
    'not run')."""
    check_derived(registry)
    for claim in registry.claims.values():
        for read in claim.reads:
            if claim.compare == "column_max" and read.table not in registry.tables:
                raise UserError(f"claim {claim.id!r} names unknown table {read.table!r}", where=read.source,
                                fix=did_you_mean(read.table, registry.tables))
            if claim.compare != "column_max":
                _row(registry, read.table, read.row, read.source, claim.id)
            if read.metric not in registry.metrics:
                raise UserError(f"claim {claim.id!r} reads unknown metric {read.metric!r}", where=read.source,
                                fix=did_you_mean(read.metric, registry.metrics))
            columns = registry.tables[read.table].columns
            if claim.compare in TABLE_CLAIMS and read.metric not in columns:
                raise UserError(f"claim {claim.id!r}: table {read.table!r} has no column {read.metric!r}",
                                where=read.source, fix=did_you_mean(read.metric, columns))
        for number in claim.paper:
            if number.table is None:
                continue
            _row(registry, number.table, number.row, number.source, claim.id)
            columns = registry.tables[number.table].columns
            if number.column not in columns:
                raise UserError(f"claim {claim.id!r}: table {number.table!r} has no column {number.column!r}",
                                where=number.source, fix=did_you_mean(str(number.column), columns))


def check_derived(registry: Any) -> None:
    """Every reference row and input metric a derived metric names exists."""
    for metric in registry.metrics.values():
        derived = getattr(metric, "derived", None)
        if derived is None:
            continue
        _row(registry, derived.table, derived.row, derived.source, f"metric {metric.id}")
        if derived.input is not None and derived.input not in registry.metrics:
            raise UserError(f"metric {metric.id!r} divides unknown metric {derived.input!r}", where=derived.source,
                            fix=did_you_mean(derived.input, registry.metrics))


def _row(registry: Any, table_id: str, row_id: str | None, where: str, claim_id: str) -> None:
    who = claim_id if claim_id.startswith("metric ") else f"claim {claim_id!r}"
    if table_id not in registry.tables:
        raise UserError(f"{who} names unknown table {table_id!r}", where=where,
                        fix=did_you_mean(table_id, registry.tables))
    rows = {r.id: r for r in registry.tables[table_id].rows}
    if row_id not in rows:
        raise UserError(f"{who}: table {table_id!r} has no row {row_id!r}", where=where,
                        fix=did_you_mean(str(row_id), rows))
