"""Seeds before paying: how many seeds per row give each claimed row difference 80% power at its effect, and the
GPU-hours they cost. The one planner of the `power` verb, for a table's paper differences and for claims given on
the command line alike.

The spread planned with is that of one seed's paired difference of the two rows (what the verdict's t test sees,
report/tables/verdicts.py): the claim's own paired seeds, as the verdict uses them (a spread pooled over the
table's rows is only the verdict's note); with one seed it is not measured (the caller must give it). The test and
its power are the verdict's own (replication.seeds_for_direction, seeds_for_size: two-sided t at alpha / m for the
m claims planned together, Holm's strictest level), planned over the uncertainty of a measured spread (its K - 1
df), so the seeds printed reach 80% when the true spread is drawn from what K seeds say of it.
A spread measured at one preset says nothing of the seed noise at another: runs priced at another preset get no
GPU-hours. Torch-free: the GPU-hours of one run come from the caller (budget/cost.py through `plan`, or given).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from exoformer.registry.registry import Registry
from exoformer.report.stats import power as pw
from exoformer.report.stats import replication as rep
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
    """Degrees of freedom of the measured sd (the claim's own seeds - 1): how uncertain it is. None: taken as known
    (a spread given by hand)."""
    seeds: int = 0
    """Paired seeds with both rows' values (0: not run, or a spread given by hand)."""
    how: str = "given"
    claim: PaperDifference | None = None
    """The paper's claim, for a table's difference."""
    preset: str | None = None
    """The preset the runs were read at (None: each spec's own)."""
    measured_at: str | None = None
    """The preset the spread was measured at (the reading's, else the minuend row spec's own)."""
    tolerance: float | None = None
    """The claim's declared size tolerance (None: replication's default)."""


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
        row = next(r for r in built.table.rows if r.id == claim.minuend)
        at = selection.preset or selection.spec(row.specs[0]).preset
        out.append(ClaimSpread(minuend=claim.minuend, subtrahend=claim.subtrahend, effect=claim.value, sd=sd, df=df,
                               seeds=k, how=how, claim=claim, preset=selection.preset, measured_at=at,
                               tolerance=claim.tolerance))
    return out


@dataclass(kw_only=True, slots=True, frozen=True)
class PlannedClaim:
    spread: ClaimSpread
    sd: float | None
    """The sd planned with (measured, or given)."""
    seeds_per_row: int | None
    """80% power for the direction at the paper's effect; None: no sd, no effect, or more than power.MAX_SEEDS."""
    gpu_hours: float | None
    """Both rows at seeds_per_row seeds each; None without a count or a price, or when `unpriced` says why."""
    given: bool = False
    """The sd was given (`seed_sd`), not measured in runs."""
    size_seeds: int | None = None
    """Seeds per row reading `replicates` 80% of the time were ours the paper's value (replication.seeds_for_size);
    None: see size_beyond, or more than replication.MAX_SIZE_SEEDS."""
    size_beyond: bool = False
    """No count of our seeds settles the size: the paper's single seed alone is too noisy."""
    size_ceiling: float = 1.0
    """P(`replicates`) with unboundedly many seeds over the sd's uncertainty (replication.size_ceiling)."""
    unpriced: str = ""
    """Why a counted claim has no GPU-hours (the spread was measured at another preset than the one priced)."""


def given_sd(spread: ClaimSpread, seed_sd: float | Mapping[str, float] | None) -> float | None:
    """The sd given for `spread`: one number for every claim, or per metric (the claim's column); None: none given."""
    if seed_sd is None or isinstance(seed_sd, int | float):
        return seed_sd
    return None if spread.claim is None else seed_sd.get(spread.claim.column)


def _plan_one(spread: ClaimSpread, sd: float | None, given: bool, *, family: int, alpha: float,
              size: bool) -> tuple[int | None, int | None, bool, float]:
    """(direction seeds, size seeds, size beyond our seeds, size ceiling) of one claim, by the verdict's own
    functions (replication.py)."""
    if sd is None:
        return None, None, False, 1.0
    sd_df = math.inf if given or spread.df is None else spread.df
    k = rep.seeds_for_direction(abs(spread.effect), sd=sd, family=family, alpha=alpha, sd_df=sd_df)
    if not size or spread.effect == 0:
        return k, None, False, 1.0
    tol = spread.tolerance
    if rep.size_beyond_our_seeds(spread.effect, sd=sd, tolerance=tol, alpha=alpha):
        return k, None, True, 0.0
    ceiling = rep.size_ceiling(spread.effect, sd=sd, tolerance=tol, sd_df=sd_df, alpha=alpha)
    return k, rep.seeds_for_size(spread.effect, sd=sd, family=family, alpha=alpha, tolerance=tol,
                                 sd_df=sd_df), False, ceiling


def plan_claims(spreads: Sequence[ClaimSpread], *, hours_per_run: Mapping[str, float | None],
                seed_sd: float | Mapping[str, float] | None = None, alpha: float = pw.ALPHA,
                holm: bool = True, priced_preset: str | None = None,
                size: bool = True) -> tuple[list[PlannedClaim], float | None]:
    """Seeds per row and GPU-hours per claim, and the total with each row run to the largest count its claims need
    (None when a claim has no count, a row no price, or a measured spread comes from another preset).

    `hours_per_run`: row -> GPU-hours of one of its runs (None: not priced); `seed_sd` replaces the measured spread
    (taken as known): one number for every claim, or metric (a claim's column) -> sd, the metrics left out keeping
    their measured spread; `holm=False` tests each claim at alpha instead of alpha / claims; `priced_preset`: the
    preset the prices are for (a measured spread from another one is not priced); `size=False` skips the size
    plan (a simulation)."""
    alpha = pw.check_alpha(alpha)
    family = max(1, len(spreads)) if holm else 1
    plans, need = [], {}
    for spread in spreads:
        given = given_sd(spread, seed_sd)
        sd = given if given is not None else spread.sd
        k, k_size, beyond, ceiling = _plan_one(spread, sd, given is not None, family=family, alpha=alpha, size=size)
        at = spread.measured_at or spread.preset
        elsewhere = given is None and sd is not None and None not in (priced_preset, at) and at != priced_preset
        unpriced = f"the spread was measured on preset {at}, not {priced_preset}" if elsewhere else ""
        prices = [hours_per_run.get(row) for row in (spread.minuend, spread.subtrahend)]
        hours = None if k is None or None in prices or unpriced else k * sum(prices)
        plans.append(PlannedClaim(spread=spread, sd=sd, seeds_per_row=k, gpu_hours=hours, given=given is not None,
                                  size_seeds=k_size, size_beyond=beyond, size_ceiling=ceiling, unpriced=unpriced))
        for row in (spread.minuend, spread.subtrahend):
            need[row] = max(need.get(row, 0), k or 0)
    if (any(p.seeds_per_row is None or p.unpriced for p in plans)
            or any(hours_per_run.get(row) is None for row in need)):
        return plans, None
    return plans, sum(k * hours_per_run[row] for row, k in need.items())
