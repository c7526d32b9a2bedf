"""`compare A B [C...]`: the runs of a few operands side by side, every number a table cell is made of, the
difference of each to the first operand, and a short header saying what differs between the runs.

Per run (exoformer/report/compare/operands.py says which run): each task's accuracy in its default metric
convention (exoformer/registry/tables.py DEFAULT_CONVENTION) and avg6, their mean, in % as `table` prints them; the
validate stage's val_ppl, val_ppl_ce, val_loss and val_loss_ce (the validate stage); the last point of the
validation curve (RunDir.val_curve). A number a run lacks reads "not evaluated" / "not run",
never a value. Each difference has its 95% interval by diff's rules in the column after it, the rule's word beside
its bounds (exoformer/report/compare/intervals.py; "none" and the reason under the table where there is none); --json
carries the bounds, rule and method; the CSV is the bare table. The header names each run (its directory, preset,
overrides), the resolved config keys whose values differ between the runs' spec files, each not-comparable note
once with the runs it concerns, and the stale notes of the picks. Torch-free.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass

from exoformer.registry.tables import DEFAULT_CONVENTION, TASKS
from exoformer.report import NO_VALUE, NOT_RUN
from exoformer.limits import DEFAULT_ITEM_RESAMPLES
from exoformer.report.compare.intervals import NONE, RULES, Interval, difference_interval, rule_text
from exoformer.report.compare.operands import Compared
from exoformer.report.tables.build import AVERAGE, run_values
from exoformer.run_identity import flat_fields
from exoformer.runs.status import set_words, yaml_word

NOT_EVALUATED = "not evaluated"
NOT_RECORDED = "not recorded"
"""A validation metric the run's validation record lacks (a record written before that metric existed)."""
FORMATS = ("md", "csv")
INTERVAL_NONE = "none"
"""An interval cell of a difference with no interval (the line under the table says why)."""
VALUED_KEYS = 8
"""The header shows each run's value for this many differing keys, then names the others."""


@dataclass(frozen=True, slots=True)
class Metric:
    key: str
    label: str
    decimals: int


METRICS = (*(Metric(task, f"{task} {DEFAULT_CONVENTION[task]} (%)", 2) for task in TASKS),
           Metric(AVERAGE, f"{AVERAGE} (%)", 2),
           Metric("val_ppl", "val_ppl", 2), Metric("val_ppl_ce", "val_ppl_ce", 2),
           Metric("val_loss", "val_loss", 4), Metric("val_loss_ce", "val_loss_ce", 4),
           Metric("curve_last", "val loss, last curve point", 4))
VALIDATION = {"val_ppl": "ppl", "val_ppl_ce": "ppl_ce", "val_loss": "loss", "val_loss_ce": "loss_ce"}
"""Column -> metric of the validate stage's rows (task "validation")."""

Value = float | str
"""A number, or the words saying why there is none."""


def run_metrics(compared: Compared) -> dict[str, Value]:
    """Every metric of METRICS for one run, from its rows as the selection reads them."""
    rows = run_values(compared.picked.rows)
    out: dict[str, Value] = {}
    tasks: list[Value] = []
    for task in TASKS:
        value = rows.get(task, {}).get(DEFAULT_CONVENTION[task], (None, None))[0]
        tasks.append(NOT_EVALUATED if value is None else 100 * value)
        out[task] = tasks[-1]
    numbers = [v for v in tasks if isinstance(v, float)]
    out[AVERAGE] = statistics.fmean(numbers) if len(numbers) == len(TASKS) else NOT_EVALUATED
    validation = rows.get("validation")
    for key, metric in VALIDATION.items():
        value = (validation or {}).get(metric, (None, None))[0]
        out[key] = value if value is not None else (NOT_RECORDED if validation else NOT_RUN)
    _, losses = compared.selection.curve(compared.picked)
    out["curve_last"] = losses[-1] if losses else NOT_RUN
    return out


def fmt(value: Value, decimals: int, *, sign: bool = False) -> str:
    if isinstance(value, str):
        return value
    if math.isnan(value):
        return NO_VALUE
    return f"{value:+.{decimals}f}" if sign else f"{value:.{decimals}f}"


def difference(value: Value, first: Value) -> Value:
    """value - first when both are numbers, else "-" (nothing to subtract)."""
    if isinstance(value, str) or isinstance(first, str):
        return "-"
    return value - first


# ------------------------------------------------------------------------------------------------ header

def config_diff(runs: list[Compared]) -> list[tuple[str, list[str]]]:
    """(key, each run's value) of every resolved config key (preset and section.field of the spec files) whose
    values differ between the runs; a key a run's spec file lacks reads "absent" (one that cannot be read: "not
    read")."""
    flats = [flat_fields(c.config) for c in runs]
    keys = list(dict.fromkeys(key for flat in flats for key in flat))
    shown = {key: [yaml_word(flat[key]) if key in flat else "not read" if c.config_problem else "absent"
                   for c, flat in zip(runs, flats)] for key in keys}
    read = [not c.config_problem for c in runs]  # a spec file not read differs in nothing
    return [(key, values) for key, values in shown.items()
            if len({v for v, ok in zip(values, read) if ok}) > 1]


def header_lines(runs: list[Compared]) -> list[str]:
    """Which run each letter is, what differs between them, and each note once."""
    lines = []
    for c in runs:
        sets = ",".join(set_words(c.identity.overrides)) or "none"
        lines.append(f"{c.letter}: {c.label}  (run {c.picked.path}; preset {c.identity.preset}; overrides {sets})")
    diff = config_diff(runs)
    if not diff:
        lines.append("differs: nothing in the resolved config")
    else:
        letters = [c.letter for c in runs]
        valued = [f"{key} ({', '.join(f'{l} {v}' for l, v in zip(letters, values))})"
                  for key, values in diff[:VALUED_KEYS]]
        lines.append("differs: " + "; ".join(valued))
        if len(diff) > VALUED_KEYS:
            lines.append("also differ: " + ", ".join(key for key, _ in diff[VALUED_KEYS:]))
    lines += [f"note: {c.letter}: {c.config_problem}; its config is not compared" for c in runs if c.config_problem]
    lines += comparability_lines(runs)
    return lines


def comparability_lines(runs: list[Compared]) -> list[str]:
    """Each thing a run differs in from the paper's recipe, once, with the runs it concerns; then the stale notes."""
    by_item: dict[str, list[str]] = {}
    for c in runs:
        for item in c.picked.differs:
            by_item.setdefault(item, []).append(c.letter)
    lines = []
    if by_item:
        lines.append("not comparable with the paper: " + "; ".join(f"{item} [{', '.join(letters)}]"
                                                                   for item, letters in by_item.items()))
    lines += [f"note: {note}" for note in dict.fromkeys(c.picked.note for c in runs if c.picked.note)]
    return lines


# ------------------------------------------------------------------------------------------------ table

def table_rows(runs: list[Compared], intervals: dict[tuple[str, str], Interval] | None = None
               ) -> tuple[list[str], list[list[str]], list[list[Value]]]:
    """(column names, text rows, raw rows): per metric each run's value, then each later run minus the first;
    with `intervals` ((metric key, letter) -> Interval), the text rows have a column after each difference with its
    95% interval and the rule's word (INTERVAL_NONE where there is none, "-" where there is no difference)."""
    values = [run_metrics(c) for c in runs]
    first = runs[0].letter
    later = [f"{c.letter} - {first}" for c in runs[1:]]
    columns = ["metric", *(f"{c.letter} {c.label}" for c in runs), *later]
    if intervals is not None:
        columns = [*columns[:len(runs) + 1], *(name for d in later for name in (d, f"{d} 95% interval"))]
    texts, raw = [], []
    for metric in METRICS:
        own = [v[metric.key] for v in values]
        diffs = [difference(v, own[0]) for v in own[1:]]
        shown = []
        for c, d in zip(runs[1:], diffs):
            shown.append(fmt(d, metric.decimals, sign=True))
            if intervals is not None:
                interval = intervals.get((metric.key, c.letter))
                shown.append("-" if interval is None else interval.text(metric.decimals) or INTERVAL_NONE)
        texts.append([metric.label, *(fmt(v, metric.decimals) for v in own), *shown])
        raw.append([metric.label, *own, *diffs])
    return columns, texts, raw


def difference_intervals(runs: list[Compared], *, n_boot: int) -> dict[tuple[str, str], Interval]:
    """(metric key, letter) -> the interval of that run's difference to the first (compare/intervals.py)."""
    values = [run_metrics(c) for c in runs]
    out = {}
    for metric in METRICS:
        for c, v in zip(runs[1:], values[1:]):
            if not isinstance(difference(v[metric.key], values[0][metric.key]), str):
                out[(metric.key, c.letter)] = difference_interval(runs[0], c, metric.key, n_boot=n_boot)
    return out


def interval_lines(intervals: dict[tuple[str, str], Interval], n_boot: int, first: str = "A") -> list[str]:
    """Under the table: what each rule tag of a difference means, for the rules used (an untagged difference has
    no interval, and says why)."""
    used = dict.fromkeys(i.rule for i in intervals.values())
    lines = [f"  {rule_text(rule, n_boot)}" for rule in used if rule != NONE]
    if lines:
        lines.insert(0, f"intervals (95%, of each difference to {first}; the word after each names its rule, as diff "
                        "applies it to the same rows):")
    by_method: dict[str, dict[str, None]] = {}
    for metric in METRICS:
        for (key, letter), i in intervals.items():
            if key == metric.key and i.rule == NONE:
                by_method.setdefault(i.method, {})[metric.label] = None
    lines += [f"no interval: {', '.join(labels)} ({method})" for method, labels in by_method.items()]
    return lines


def render(runs: list[Compared], fmt_name: str, *, n_boot: int = DEFAULT_ITEM_RESAMPLES) -> str:
    """The side-by-side table: markdown under its header lines with each difference's interval and rule, or CSV
    (the same table, numbers unrounded, no intervals: --json carries their bounds)."""
    if fmt_name == "csv":
        columns, texts, raw = table_rows(runs)
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[round(v, 10) if isinstance(v, float) else v for v in row] for row in raw])
        return buffer.getvalue()
    intervals = difference_intervals(runs, n_boot=n_boot)
    columns, texts, raw = table_rows(runs, intervals)
    lines = [*header_lines(runs), "", "| " + " | ".join(columns) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(columns) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in texts]
    lines += ["", *interval_lines(intervals, n_boot, runs[0].letter)]
    return "\n".join(lines) + "\n"


def _number(value: Value) -> float | str | None:
    """A JSON value: the number, None for NaN, else the words."""
    if isinstance(value, str):
        return value
    return None if math.isnan(value) else value


def render_json(runs: list[Compared], *, n_boot: int = DEFAULT_ITEM_RESAMPLES) -> str:
    """One JSON object: the runs, the differing config keys, the notes, and per metric each run's value and each
    difference to the first with its interval's bounds, rule and method."""
    import json

    intervals = difference_intervals(runs, n_boot=n_boot)
    values = [run_metrics(c) for c in runs]
    first = runs[0].letter
    metrics = []
    for metric in METRICS:
        own = [v[metric.key] for v in values]
        diffs = {}
        for c, v in zip(runs[1:], own[1:]):
            d = difference(v, own[0])
            interval = intervals.get((metric.key, c.letter))
            diffs[f"{c.letter} - {first}"] = {"value": None if isinstance(d, str) else _number(d),
                                              **(interval.as_json() if interval is not None else
                                                 {"low": None, "high": None, "rule": None,
                                                  "method": "no difference: a run has no number"})}
        metrics.append({"metric": metric.label, "key": metric.key,
                        "values": {c.letter: _number(v) for c, v in zip(runs, own)}, "differences": diffs})
    out = {"runs": [{"letter": c.letter, "label": c.label, "path": str(c.picked.path), "preset": c.identity.preset,
                     "overrides": list(set_words(c.identity.overrides))} for c in runs],
           "differs": [{"key": key, "values": dict(zip((c.letter for c in runs), vals))}
                       for key, vals in config_diff(runs)],
           "notes": comparability_lines(runs),
           "metrics": metrics,
           "interval_rules": {rule: rule_text(rule, n_boot) for rule in RULES}}
    return json.dumps(out, indent=2) + "\n"
