"""Ladder points from any CSV (`params,tokens,loss[,group]`) and the law's forecast at chosen points.

So a researcher can check the fit on a published ladder, or use a ladder run elsewhere, with the same law and
intervals as `predict TABLE` (exoformer/report/forecast/law.py).

Bounds (docs/input-limits.md): at most MAX_ROWS rows, and rows x bootstrap replicates at most
law.MAX_BOOTSTRAP_CELLS, since the fit's time and memory grow with their product; counts inside PARAMS_RANGE and
TOKENS_RANGE, in the CSV and in `--at`, so no point lies far enough off for the law to overflow; one row per
(group, params, tokens), since the law's intervals count each row as one run.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass

import numpy as np

from exoformer.errors import UserError
from exoformer.report.forecast.law import LawFit, check_bootstrap, fit_law
from exoformer.yaml_lines import read_limited

REQUIRED_COLUMNS = ("params", "tokens", "loss")
MAX_ROWS = 2_000
"""Rows of a points CSV: 2,000 rows at the default 1,000 replicates fit in about 5 s (a ladder has tens)."""
PARAMS_RANGE = (1e3, 1e15)
TOKENS_RANGE = (1e3, 1e16)
"""Counts a ladder or a forecast may name. The floor of 1e3 tokens keeps a CPU smoke ladder (about 1e5 tokens)."""
MAX_LOSS = 100.0
"""A loss is a cross-entropy in nats, ln(perplexity): ln of a 4M-token vocabulary is 15."""
FAR = 100.0
"""A forecast point whose compute 6ND (or parameters, or tokens) lies more than FAR times outside the ladder's range
is "far outside" it; any point whose tokens per parameter or compute lie outside the ladder's range is warned of."""
_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_NUMBER = re.compile(r"\A\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*\Z")


def printable(text: str) -> str:
    """`text` with each non-printable character written as its escape (\\x1b), so a CSV cannot drive a terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def parse_count(text: str, *, where: str, what: str = "count", bounds: tuple[float, float] | None = None) -> float:
    """A positive count such as 450e6, 450M, 10B or 1.5T (inside `bounds` when given)."""
    match = _NUMBER.match(str(text))
    value = float(match.group(1)) * _SUFFIX[match.group(2).lower()] if match else math.nan
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"{text!r} is not a positive count", where=where, fix="write e.g. 450e6, 450M, 10B")
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        low, high = (f"1e{round(math.log10(b))}" for b in bounds)
        raise UserError(f"{what} {text!r} is outside {low} to {high}", where=where,
                        fix=f"give {what} between {low} and {high}, e.g. " + ("450M" if what == "params" else "10B"))
    return value


def parse_at(text: str) -> tuple[float, float]:
    """`PARAMS:TOKENS` of `--at`, e.g. 450M:10B."""
    parts = str(text).split(":")
    if len(parts) != 2:
        raise UserError(f"{text!r} is not PARAMS:TOKENS", where="--at", fix="write e.g. --at 450M:10B")
    return (parse_count(parts[0], where="--at", what="params", bounds=PARAMS_RANGE),
            parse_count(parts[1], where="--at", what="tokens", bounds=TOKENS_RANGE))


@dataclass(frozen=True, slots=True)
class Point:
    group: str | None
    params: float
    tokens: float
    loss: float


def _loss(text: str, *, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise UserError(f"loss {text!r} is not a finite number", where=where, fix="mend or drop the row")
    if not 0 < value <= MAX_LOSS:
        raise UserError(f"loss {text!r} must be positive and at most {MAX_LOSS:g} (a cross-entropy in nats, "
                        "ln of the perplexity)", where=where, fix="write the run's validation loss, or drop the row")
    return value


def read_points(path: str) -> list[Point]:
    """The rows of a ladder CSV; a missing column, an unknown one, a row of the wrong width, a bad number or a
    repeated point names its file:line."""
    reader = csv.reader(io.StringIO(read_limited(path)))
    header: list[str] | None = None
    points: list[Point] = []
    seen: dict[tuple[str | None, float, float], int] = {}
    while True:
        try:
            fields = next(reader, None)
        except csv.Error as exc:
            raise UserError(f"not a CSV row ({exc})", where=f"{path}:{reader.line_num}",
                            fix="one row per run: params,tokens,loss") from None
        if fields is None:
            break
        if not fields:
            continue  # a blank line
        line = reader.line_num
        where = f"{path}:{line}"
        if header is None:
            header = [h.strip() for h in fields]
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            unknown = [printable(c) for c in header if c not in (*REQUIRED_COLUMNS, "group")]
            twice = sorted({c for c in header if header.count(c) > 1})
            if missing or unknown or twice:
                raise UserError(f"columns {[printable(h) for h in header]}: missing {missing}, unknown {unknown}"
                                + (f", twice {twice}" if twice else ""), where=where,
                                fix="the header is params,tokens,loss with an optional group column")
            continue
        if len(fields) != len(header):
            raise UserError(f"{len(fields)} fields where the header has {len(header)}", where=where,
                            fix=f"one value per column: {','.join(header)}")
        if len(points) == MAX_ROWS:
            raise UserError(f"more than {MAX_ROWS:,} rows", where=where,
                            fix=f"give at most {MAX_ROWS:,} runs (a ladder has tens), e.g. one law per file")
        row = dict(zip(header, (f.strip() for f in fields)))
        point = Point(group=row.get("group") or None,
                      params=parse_count(row["params"], where=where, what="params", bounds=PARAMS_RANGE),
                      tokens=parse_count(row["tokens"], where=where, what="tokens", bounds=TOKENS_RANGE),
                      loss=_loss(row["loss"], where=where))
        key = (point.group, point.params, point.tokens)
        if key in seen:
            raise UserError(f"params {point.params:g}, tokens {point.tokens:g} repeat line {seen[key]}"
                            + (f" (group {printable(point.group)})" if point.group else ""), where=where,
                            fix="average the point's seeds into one row: each row counts as one run")
        seen[key] = line
        points.append(point)
    if not points:
        raise UserError("no rows", where=path, fix="add one row per run: params,tokens,loss")
    return points


@dataclass(frozen=True, slots=True)
class Forecast:
    group: str | None
    params: float
    tokens: float
    loss: float | None
    lo: float | None
    hi: float | None
    """The law's 95% interval for the expected loss (bootstrap, floored by the ladder's own misfit)."""
    run_lo: float | None
    run_hi: float | None
    """Interval for the loss of one more run there (the law's interval plus the runs' spread about it)."""
    why: str = ""
    """Why there is no number (a degenerate law: LawFit.degenerate); then the numbers are None."""

    def to_json(self) -> dict:
        out = {"params": self.params, "tokens": self.tokens, "loss": self.loss, "lo": self.lo, "hi": self.hi,
               "run_lo": self.run_lo, "run_hi": self.run_hi, "why": self.why or None}
        return out if self.group is None else {"group": self.group, **out}


def fit_groups(points: list[Point], *, bootstrap: int, seed: int, where: str,
               forecasts: int = 0) -> dict[str | None, LawFit]:
    """One law per group (a CSV without a group column is one group, None), to be forecast at `forecasts` points:
    the rows and the forecasts of every law, times the replicates, are bounded together (one command's time and
    memory: 1,000 --at points x 100,000 replicates took 2.5 GB)."""
    groups: dict[str | None, list[Point]] = {}
    for point in points:
        groups.setdefault(point.group, []).append(point)
    cells = len(points) + len(groups) * forecasts
    check_bootstrap(bootstrap, where="--bootstrap", points=cells,
                    what=f"points ({len(points):,} rows + {len(groups)} law(s) x {forecasts:,} --at)" if forecasts
                    else "points")
    return {name: fit_law([p.params for p in rows], [p.tokens for p in rows], [p.loss for p in rows],
                          bootstrap=bootstrap, seed=seed,
                          where=where if name is None else f"{where} group {printable(name)}")
            for name, rows in groups.items()}


def far_from_ladder(points: list[Point], at: list[tuple[float, float]]) -> list[str]:
    """A warning per forecast point whose tokens per parameter or compute 6ND lie outside the ladder's range, saying
    how far; "far outside" when its compute, parameters or tokens lie more than FAR times outside. The law is
    extrapolated there: its interval carries the ladder's own misfit, not the unknown beyond it."""
    ranges = {what: (min(values), max(values)) for what, values in (
        ("compute 6ND", [6 * p.params * p.tokens for p in points]), ("params", [p.params for p in points]),
        ("tokens", [p.tokens for p in points]), ("tokens per parameter", [p.tokens / p.params for p in points]))}
    out = []
    for params, tokens in at:
        values = {"compute 6ND": 6 * params * tokens, "params": params, "tokens": tokens,
                  "tokens per parameter": tokens / params}
        parts, far = [], False
        for what, value in values.items():
            low, high = ranges[what]
            far_here = what != "tokens per parameter" and (value > FAR * high or value < low / FAR)
            far = far or far_here
            outside = not low * (1 - 1e-9) <= value <= high * (1 + 1e-9)
            if (what in ("compute 6ND", "tokens per parameter") and outside) or far_here:
                parts.append(f"the {what} {value:.3g} is " + (f"{value / high:.3g}x the ladder's largest"
                                                               if value > high else
                                                               f"1/{low / value:.3g} of the ladder's smallest"))
        if parts:
            how = "far outside its runs" if far else "outside its runs"
            out.append(f"warning: at {params:g}:{tokens:g} " + ", ".join(parts)
                       + f": the forecast extrapolates the law {how}")
    return out


def forecast(fits: dict[str | None, LawFit], at: list[tuple[float, float]]) -> list[Forecast]:
    """The law's loss and intervals per group and point; lower bounds held at 0 (a loss is never negative), a
    degenerate law's rows without numbers (its reason instead), and a value that is not a finite number refused
    rather than printed."""
    out = []
    for name, fit in fits.items():
        params, tokens = [a for a, _ in at], [b for _, b in at]
        why = fit.degenerate()
        if why:
            out += [Forecast(group=name, params=p, tokens=t, loss=None, lo=None, hi=None, run_lo=None, run_hi=None,
                             why=why) for p, t in zip(params, tokens)]
            continue
        with np.errstate(all="ignore"):
            centre = fit.predict(params, tokens)
            lo, hi = fit.interval(params, tokens)
            run_lo, run_hi = fit.interval(params, tokens, one_run=True)
        for p, t, c, a, b, ra, rb in zip(params, tokens, centre, lo, hi, run_lo, run_hi):
            values = [float(v) for v in (c, a, b, ra, rb)]
            if not all(math.isfinite(v) for v in values):
                raise UserError(f"the law's forecast at {p:g}:{t:g} is not a finite number"
                                + (f" (group {printable(name)})" if name is not None else ""), where="--at",
                                fix="forecast nearer the ladder's sizes and token counts")
            c, a, b, ra, rb = values
            out.append(Forecast(group=name, params=p, tokens=t, loss=c, lo=max(a, 0.0), hi=b, run_lo=max(ra, 0.0),
                                run_hi=rb))
    return out
