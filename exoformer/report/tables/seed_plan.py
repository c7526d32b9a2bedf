"""Seeds before paying: how many seeds per row give each claimed row difference 80% power at its effect, and the
GPU-hours they cost. The one planner of the `power` verb, for a table's paper differences and for claims given on
the command line alike.

The spread planned with is that of one seed's paired difference of the two rows (what the verdict's t test sees,
report/tables/verdicts.py): the claim's own paired seeds (seeds - 1 df), as the verdict uses them (a spread
pooled over the table's rows is only the verdict's note); with one seed it is not measured (the caller must give
it). The test is the
verdict's: two-sided t at alpha / m for the m claims planned together (Holm's strictest level), report/stats/power.py.
Torch-free: the GPU-hours of one run come from the caller (budget/cost.py through `plan`, or given).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from exoformer.registry.registry import Registry
from exoformer.report.stats import power as pw
from exoformer.report.tables.compose import compose
from exoformer.report.tables.verdicts import PaperDifference, claimed_pairs, paper_differences


@dataclass(kw_only=True, slots=True, frozen=True)
class ClaimSpread:
    """A claimed difference of two rows and the seed spread measured (or given) for it."""

    minuend: str
    subtrahend: str
    effect: float
    sd: float | None
    """sd of one seed's paired difference; None when not measured (fewer than two seeds)."""
    df: float | None = None
    """Its degrees of freedom: (rows - 1)(seeds - 1) when pooled over a table's rows; None: the claim's own seeds."""
    seeds: int = 0
    """Paired seeds with both rows' values (0: not run, or a spread given by hand)."""
    how: str = "given"
    claim: PaperDifference | None = None
    """The paper's claim, for a table's difference."""
    preset: str | None = None

    def df_of(self, seeds: int) -> float:
        """The test's degrees of freedom with `seeds` per row, as the verdict counts them (replication.py): a
        spread pooled over R rows grows by R - 1 with each seed; else the claim's own seeds - 1."""
        if self.df is None or self.seeds < 2:
            return pw.own_seeds_df(seeds)
        return self.df * (seeds - 1) / (self.seeds - 1)


def measured_spreads(registry: Registry, runs_root: str | os.PathLike, table_id: str, *, preset: str | None = None,
                     overrides: list[str] | tuple[str, ...] = ()) -> list[ClaimSpread]:
    """The seed spread of each paper difference of `table_id` in the runs the `table` verb would read."""
    read = compose(registry, Path(runs_root), tables=[table_id], preset=preset, overrides=overrides).tables[table_id]
    built, selection = read.built, read.selection
    out = []
    for claim in (c for c in paper_differences(registry) if c.table == table_id):
        pairs = claimed_pairs(built, selection, claim)
        k = 0 if pairs is None else pairs.a.shape[0]
        if k >= 2:
            sd, df = float(np.std((pairs.a - pairs.b).mean(axis=1), ddof=1)), float(k - 1)
            how = f"its own {k} paired seeds ({k - 1} df)"
        else:
            sd, df, how = None, None, "not run" if k == 0 else "one seed: the seed spread is not measured"
        out.append(ClaimSpread(minuend=claim.minuend, subtrahend=claim.subtrahend, effect=claim.value, sd=sd, df=df,
                               seeds=k, how=how, claim=claim, preset=selection.preset))
    return out


@dataclass(kw_only=True, slots=True, frozen=True)
class PlannedClaim:
    spread: ClaimSpread
    sd: float | None
    """The sd planned with (measured, or given)."""
    seeds_per_row: int | None
    """None: no sd, no effect, or more than power.MAX_SEEDS seeds."""
    gpu_hours: float | None
    """Both rows at seeds_per_row seeds each; None without a count or a price."""
    given: bool = False
    """The sd was given (`seed_sd`), not measured in runs."""


def given_sd(spread: ClaimSpread, seed_sd: float | Mapping[str, float] | None) -> float | None:
    """The sd given for `spread`: one number for every claim, or per metric (the claim's column); None: none given."""
    if seed_sd is None or isinstance(seed_sd, int | float):
        return seed_sd
    return None if spread.claim is None else seed_sd.get(spread.claim.column)


def plan_claims(spreads: Sequence[ClaimSpread], *, hours_per_run: Mapping[str, float | None],
                seed_sd: float | Mapping[str, float] | None = None, alpha: float = pw.ALPHA,
                holm: bool = True) -> tuple[list[PlannedClaim], float | None]:
    """Seeds per row and GPU-hours per claim, and the total with each row run to the largest count its claims need
    (None when a claim has no count or a row no price).

    `hours_per_run`: row -> GPU-hours of one of its runs (None: not priced); `seed_sd` replaces the measured spread
    (its df then the claim's own seeds): one number for every claim, or metric (a claim's column) -> sd, the metrics
    left out keeping their measured spread; `holm=False` tests each claim at alpha instead of alpha / claims."""
    level = pw.check_alpha(alpha) / (max(1, len(spreads)) if holm else 1)
    plans, need = [], {}
    for spread in spreads:
        given = given_sd(spread, seed_sd)
        sd = given if given is not None else spread.sd
        df_of = pw.own_seeds_df if given is not None else spread.df_of
        k = None if sd is None else pw.seeds_needed(spread.effect, sd=sd, alpha=level, df_of=df_of)
        prices = [hours_per_run.get(row) for row in (spread.minuend, spread.subtrahend)]
        hours = None if k is None or None in prices else k * sum(prices)
        plans.append(PlannedClaim(spread=spread, sd=sd, seeds_per_row=k, gpu_hours=hours, given=given is not None))
        for row in (spread.minuend, spread.subtrahend):
            need[row] = max(need.get(row, 0), k or 0)
    if any(p.seeds_per_row is None for p in plans) or any(hours_per_run.get(row) is None for row in need):
        return plans, None
    return plans, sum(k * hours_per_run[row] for row, k in need.items())
