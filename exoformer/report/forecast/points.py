"""Ladder points from any CSV (`params,tokens,loss[,group]`) and the law's forecast at chosen points.

So a researcher can check the fit on a published ladder, or use a ladder run elsewhere, with the same law and
intervals as `predict TABLE` (exoformer/report/forecast/law.py).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass

from exoformer.errors import UserError
from exoformer.report.forecast.law import LawFit, fit_law
from exoformer.yaml_lines import read_limited

REQUIRED_COLUMNS = ("params", "tokens", "loss")
_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_NUMBER = re.compile(r"\A\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*\Z")


def parse_count(text: str, *, where: str) -> float:
    """A positive count such as 450e6, 450M, 10B or 1.5T."""
    match = _NUMBER.match(str(text))
    value = float(match.group(1)) * _SUFFIX[match.group(2).lower()] if match else math.nan
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"{text!r} is not a positive count", where=where, fix="write e.g. 450e6, 450M, 10B")
    return value


def parse_at(text: str) -> tuple[float, float]:
    """`PARAMS:TOKENS` of `--at`, e.g. 450M:10B."""
    parts = str(text).split(":")
    if len(parts) != 2:
        raise UserError(f"{text!r} is not PARAMS:TOKENS", where="--at", fix="write e.g. --at 450M:10B")
    return parse_count(parts[0], where="--at"), parse_count(parts[1], where="--at")


@dataclass(frozen=True, slots=True)
class Point:
    group: str | None
    params: float
    tokens: float
    loss: float


def read_points(path: str) -> list[Point]:
    """The rows of a ladder CSV; a missing column, an unknown one or a bad number names its file:line."""
    text = read_limited(path)
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    unknown = [c for c in header if c not in (*REQUIRED_COLUMNS, "group")]
    if missing or unknown:
        raise UserError(f"columns {header}: missing {missing}, unknown {unknown}", where=f"{path}:1",
                        fix="the header is params,tokens,loss with an optional group column")
    points = []
    for line, row in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
        where = f"{path}:{line}"
        loss = float(row["loss"]) if _NUMBER.match(row["loss"]) else math.nan
        if not math.isfinite(loss):
            raise UserError(f"loss {row['loss']!r} is not a finite number", where=where, fix="mend or drop the row")
        points.append(Point(group=row.get("group") or None, params=parse_count(row["params"], where=where),
                            tokens=parse_count(row["tokens"], where=where), loss=loss))
    if not points:
        raise UserError("no rows", where=path, fix="add one row per run: params,tokens,loss")
    return points


@dataclass(frozen=True, slots=True)
class Forecast:
    group: str | None
    params: float
    tokens: float
    loss: float
    lo: float
    hi: float
    run_lo: float
    run_hi: float
    """Interval for the loss of one more run there (the law's uncertainty plus the runs' spread about it)."""

    def to_json(self) -> dict:
        out = {"params": self.params, "tokens": self.tokens, "loss": self.loss, "lo": self.lo, "hi": self.hi}
        return out if self.group is None else {"group": self.group, **out}


def fit_groups(points: list[Point], *, bootstrap: int, seed: int, where: str) -> dict[str | None, LawFit]:
    """One law per group (a CSV without a group column is one group, None)."""
    groups: dict[str | None, list[Point]] = {}
    for point in points:
        groups.setdefault(point.group, []).append(point)
    return {name: fit_law([p.params for p in rows], [p.tokens for p in rows], [p.loss for p in rows],
                          bootstrap=bootstrap, seed=seed, where=where if name is None else f"{where} group {name}")
            for name, rows in groups.items()}


def forecast(fits: dict[str | None, LawFit], at: list[tuple[float, float]]) -> list[Forecast]:
    out = []
    for name, fit in fits.items():
        params, tokens = [a for a, _ in at], [b for _, b in at]
        centre = fit.predict(params, tokens)
        lo, hi = fit.interval(params, tokens)
        run_lo, run_hi = fit.interval(params, tokens, one_run=True)
        out += [Forecast(group=name, params=p, tokens=t, loss=float(c), lo=float(a), hi=float(b), run_lo=float(ra),
                         run_hi=float(rb))
                for p, t, c, a, b, ra, rb in zip(params, tokens, centre, lo, hi, run_lo, run_hi)]
    return out
