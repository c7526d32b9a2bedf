"""Seeds before paying: for each row difference a table's paper claims, how many seeds per row give 80% power at
the paper's effect, from the seed spread measured in the runs we have (of any preset) or given by the caller.

The spread is that of one seed's paired difference of the two rows (what the verdict's t test sees,
report/tables/verdicts.py): the seed variance pooled over the table's rows that have every seed when two or more do,
else the claim's own seeds; with one seed it is not measured (the caller must give it). The test is the verdict's:
two-sided t at alpha / m for the m claims of the table (Holm's strictest level), report/stats/power.py. Torch-free: the
GPU-hours come from the caller (budget/cost.py through `plan`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from exoformer.registry.registry import Registry
from exoformer.report.stats import power as pw
from exoformer.report.tables.compose import compose
from exoformer.report.tables.verdicts import PaperDifference, claimed_pairs, paper_differences, pooled_variance


@dataclass(kw_only=True, slots=True, frozen=True)
class ClaimSpread:
    """One claim of a table and the seed spread measured for it."""

    claim: PaperDifference
    seeds: int
    """Paired seeds with both rows' values (0: not run)."""
    sd: float | None
    """sd of one seed's paired difference; None when not measured (fewer than two seeds)."""
    df: float | None
    """Its degrees of freedom: (rows - 1)(seeds - 1) when pooled over the table's rows, else seeds - 1."""
    how: str
    preset: str | None

    def df_of(self, seeds: int) -> float:
        """The test's degrees of freedom with `seeds` per row, as the verdict counts them (replication.py): a
        spread pooled over R rows grows by R - 1 with each seed."""
        if self.df is None or self.seeds < 2:
            return float(seeds - 1)
        return self.df * (seeds - 1) / (self.seeds - 1)


def measured_spreads(registry: Registry, runs_root: str | os.PathLike, table_id: str, *, preset: str | None = None,
                     overrides: list[str] | tuple[str, ...] = ()) -> list[ClaimSpread]:
    """The seed spread of each paper difference of `table_id` in the runs the `table` verb would read."""
    read = compose(registry, Path(runs_root), tables=[table_id], preset=preset, overrides=overrides).tables[table_id]
    built, selection = read.built, read.selection
    out = []
    for claim in (c for c in paper_differences(registry) if c.table == table_id):
        pairs = claimed_pairs(built, selection, claim)
        if pairs is None:
            out.append(ClaimSpread(claim=claim, seeds=0, sd=None, df=None, how="not run", preset=selection.preset))
            continue
        k = pairs.a.shape[0]
        pooled = pooled_variance(built, selection, pairs)
        if pooled is not None:
            sd, df = math.sqrt(float(pooled.var)), pooled.df
            how = f"pooled over the table's rows, {k} seeds ({df:g} df)"
        elif k >= 2:
            sd, df = float(np.std((pairs.a - pairs.b).mean(axis=1), ddof=1)), float(k - 1)
            how = f"its own {k} paired seeds ({k - 1} df)"
        else:
            sd, df, how = None, None, "one seed: the seed spread is not measured"
        out.append(ClaimSpread(claim=claim, seeds=k, sd=sd, df=df, how=how, preset=selection.preset))
    return out


@dataclass(kw_only=True, slots=True, frozen=True)
class ClaimPlan:
    spread: ClaimSpread
    sd: float | None
    """The sd planned with (measured, or given)."""
    seeds_per_row: int | None
    """None: no sd, no effect, or more than power.MAX_SEEDS seeds."""
    gpu_hours: float | None
    """Both rows at seeds_per_row seeds each; None without a count or a GPU price."""

    def line(self) -> str:
        c = self.spread.claim
        head = f"{c.table}: {c.minuend} - {c.subtrahend}, {c.column} (paper {c.value:+g})"
        if self.sd is None:
            return f"{head}: {self.spread.how}; give --seed-sd (the sd of one seed's difference) to plan it"
        if self.seeds_per_row is None:
            return f"{head}: sd {self.sd:.3g}: more than {pw.MAX_SEEDS} seeds per row for 80% power"
        hours = "" if self.gpu_hours is None else f": {self.gpu_hours:,.1f} GPU-hours"
        return f"{head}: sd {self.sd:.3g}, needs {self.seeds_per_row} seeds per row for 80% power{hours}"


def plan_claims(spreads: list[ClaimSpread], *, hours_per_run: dict[str, float | None],
                seed_sd: float | None = None, alpha: float = pw.ALPHA) -> list[ClaimPlan]:
    """Seeds per row and GPU-hours per claim; `hours_per_run`: row id -> GPU-hours of one of its runs at the
    target preset (None: not priced); `seed_sd` overrides every measured spread."""
    level = pw.check_alpha(alpha) / max(1, len(spreads))
    out = []
    for spread in spreads:
        sd = seed_sd if seed_sd is not None else spread.sd
        df_of = pw.own_seeds_df if seed_sd is not None else spread.df_of
        k = None if sd is None else pw.seeds_needed(spread.claim.value, sd=sd, alpha=level, df_of=df_of)
        rows = (spread.claim.minuend, spread.claim.subtrahend)
        prices = [hours_per_run.get(row) for row in rows]
        hours = None if k is None or any(p is None for p in prices) else k * sum(prices)
        out.append(ClaimPlan(spread=spread, sd=sd, seeds_per_row=k, gpu_hours=hours))
    return out


def table_hours(plans: list[ClaimPlan], hours_per_run: dict[str, float | None]) -> float | None:
    """The table's GPU-hours: each row run to the largest seed count any of its claims needs."""
    need: dict[str, int] = {}
    for p in plans:
        if p.seeds_per_row is None:
            return None
        for row in (p.spread.claim.minuend, p.spread.claim.subtrahend):
            need[row] = max(need.get(row, 0), p.seeds_per_row)
    if any(hours_per_run.get(row) is None for row in need):
        return None
    return sum(k * hours_per_run[row] for row, k in need.items())
