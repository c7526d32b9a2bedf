"""Power of the paired-seed t test, and how many seeds a claim needs before anyone pays for them.

The replication verdict (exoformer/report/stats/replication.py, docs/replication.md) tests the mean over seeds of one
seed's paired difference between two rows, D_k = mean over items of (a_kj - b_kj), with a two-sided Student t
test. Its power at a true difference `effect` is exact for normal D_k:

    power = P(|T| > t_{1-alpha/2, df}),  T ~ noncentral t(df, effect / (sd / sqrt(seeds)))

(scipy.stats.nct), where `sd` is the standard deviation of one seed's D_k. That sd has two parts, measured from
existing runs by `variance_components` (a two-way seeds x items analysis of variance):

    sd^2 = seed_var + item_var / n_items

`seed_var` is what seed changes (data order, initialisation) do to a row difference beyond item noise, and
`item_var` the residual variance of one item's difference within a seed. Planning for a family of claims
tested together (Holm), `family_size` m tests at alpha / m, Holm's strictest step, so the seeds found give at
least the stated power. Torch-free.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from exoformer.errors import UserError

ALPHA = 0.05
TARGET_POWER = 0.80
MAX_SEEDS = 10_000
"""The largest seed count a plan searches; beyond it a claim reads "more than 10000 seeds" (seeds_needed None)."""


def check_alpha(alpha: float, *, where: str = "alpha") -> float:
    if not (isinstance(alpha, int | float) and 0.0 < float(alpha) < 0.5):
        raise UserError(f"the test level must lie in (0, 0.5), got {alpha!r}", where=where, fix="0.05")
    return float(alpha)


def power_at(effect: float | np.ndarray, *, sd: float | np.ndarray, seeds: int | np.ndarray,
             df: float | np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Power of the two-sided t test at level `alpha` (vectorised over all arguments; exact for normal D_k)."""
    se = np.asarray(sd, dtype=float) / np.sqrt(np.asarray(seeds, dtype=float))
    df = np.asarray(df, dtype=float)
    effect = np.abs(np.asarray(effect, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        nc = np.where(se > 0, effect / np.where(se > 0, se, 1.0), np.where(effect > 0, np.inf, 0.0))
    crit = stats.t.ppf(1.0 - alpha / 2.0, df)
    finite = np.isfinite(nc)
    safe_nc = np.where(finite, nc, 0.0)
    return np.where(finite, _two_sided(crit, df, safe_nc), 1.0)


def _two_sided(crit: np.ndarray | float, df: np.ndarray | float, nc: np.ndarray | float) -> np.ndarray:
    """P(|T| > crit) for T ~ noncentral t(df, nc >= 0); the far tail as sf at -nc (scipy's cdf there can be NaN)."""
    return stats.nct.sf(crit, df, nc) + np.nan_to_num(stats.nct.sf(crit, df, -np.asarray(nc)), nan=0.0)


@functools.lru_cache(maxsize=1024)
def detectable_noncentrality(df: float, *, alpha: float = ALPHA, power: float = TARGET_POWER) -> float:
    """The noncentrality (effect / standard error) the two-sided t test with `df` detects with `power`."""
    crit = float(stats.t.ppf(1.0 - alpha / 2.0, df))

    def gap(nc: float) -> float:
        return float(_two_sided(crit, df, nc)) - power

    high = crit + 10.0
    while gap(high) < 0:
        high *= 2.0
    return float(optimize.brentq(gap, 0.0, high, xtol=1e-10))


def minimum_detectable_effect(*, sd: float, seeds: int, df: float, alpha: float = ALPHA,
                              power: float = TARGET_POWER) -> float:
    """The smallest true difference the test detects with `power` (80%) with these seeds and this sd."""
    return detectable_noncentrality(df, alpha=alpha, power=power) * sd / math.sqrt(seeds)


def own_seeds_df(seeds: int) -> float:
    """Degrees of freedom of the t test from a claim's own paired seeds: seeds - 1."""
    return float(seeds - 1)


def smallest_enough(enough: Callable[[int], bool], *, max_seeds: int = MAX_SEEDS) -> int | None:
    """The smallest k in [2, max_seeds] with enough(k), for an `enough` that stays true once true; else None."""
    if not enough(max_seeds):
        return None
    if enough(2):
        return 2
    low, high = 2, max_seeds  # enough(high) holds and enough(low) does not
    while high - low > 1:
        mid = (low + high) // 2
        if enough(mid):
            high = mid
        else:
            low = mid
    return high


def seeds_needed(effect: float, *, sd: float, alpha: float = ALPHA, power: float = TARGET_POWER,
                 df_of: Callable[[int], float] = own_seeds_df, max_seeds: int = MAX_SEEDS) -> int | None:
    """Seeds per row giving the two-sided t test `power` at `effect`; None for no effect or over max_seeds.

    `df_of(k)` is the test's degrees of freedom with k seeds per row (k - 1 for a claim's own seeds; a pooled
    variance over a table's rows grows with every row's seeds)."""
    if not (math.isfinite(effect) and math.isfinite(sd)) or effect == 0 or sd < 0:
        return None
    if sd == 0:
        return 2
    return smallest_enough(
        lambda k: float(power_at(effect, sd=sd, seeds=k, df=max(df_of(k), 1.0), alpha=alpha)) >= power,
        max_seeds=max_seeds)


def equivalence_power(effect: float, *, margin: float, sd: float, seeds: int, df: float,
                      alpha: float = ALPHA) -> float:
    """Probability that the (1 - 2 alpha) t interval lies inside +-margin when the true difference is `effect`.

    Normal approximation with the t quantile (the interval's half-width taken at its expected sd): exact as
    seeds grow, slightly optimistic for very few seeds."""
    se = sd / math.sqrt(seeds)
    if se == 0:
        return 1.0 if abs(effect) < margin else 0.0
    half = float(stats.t.ppf(1.0 - alpha, max(df, 1.0))) * se
    if half >= margin:
        return 0.0
    inside = stats.norm.cdf((margin - half - effect) / se) - stats.norm.cdf((-margin + half - effect) / se)
    return float(max(0.0, inside))


def seeds_needed_equivalence(effect: float, *, margin: float, sd: float, alpha: float = ALPHA,
                             power: float = TARGET_POWER, df_of: Callable[[int], float] = own_seeds_df,
                             max_seeds: int = MAX_SEEDS) -> int | None:
    """Seeds per row to show equivalence within +-margin with `power` when the truth is `effect`; None if never."""
    if not (math.isfinite(effect) and math.isfinite(sd)) or sd < 0 or abs(effect) >= margin:
        return None
    return smallest_enough(lambda k: equivalence_power(effect, margin=margin, sd=sd, seeds=k, df=df_of(k),
                                                       alpha=alpha) >= power, max_seeds=max_seeds)


@dataclass(kw_only=True, slots=True, frozen=True)
class VarianceComponents:
    """Seed and item variance of a row difference (or of one row), from a seeds x items table of scores."""

    seed_var: float
    """Variance over seeds of the difference beyond item noise (method of moments, clipped at 0)."""
    item_var: float
    """Residual variance of one item's difference within a seed (seed x item interaction and noise)."""
    item_effect_var: float
    """Variance of the items' own mean differences across items (what an item resample moves)."""
    seeds: int
    n_items: int

    def seed_level_sd(self, n_items: int | None = None) -> float:
        """sd of one seed's difference averaged over `n_items` items (default: the measured count)."""
        n = self.n_items if n_items is None else n_items
        return math.sqrt(self.seed_var + self.item_var / n)


def variance_components(scores: np.ndarray) -> VarianceComponents:
    """Two-way analysis of variance (seeds x items, one score per cell) of per-item differences a - b.

    Expected mean squares: MS_seeds = item_var + n_items seed_var, MS_items = item_var + seeds item_effect_var,
    MS_residual = item_var. Given one row's own scores instead of a difference, the components are that row's;
    a difference of two rows with independent seed effects then has twice the seed variance."""
    x = np.asarray(scores, dtype=float)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 2 or not np.all(np.isfinite(x)):
        raise UserError(f"variance components need a finite (seeds >= 2, items >= 2) array, got shape {x.shape}",
                        where="scores", fix="pass per-item scores of at least two seeds and two items")
    k, n = x.shape
    grand = x.mean()
    seed_means, item_means = x.mean(axis=1), x.mean(axis=0)
    ms_seeds = n * float(np.sum((seed_means - grand) ** 2)) / (k - 1)
    ms_items = k * float(np.sum((item_means - grand) ** 2)) / (n - 1)
    resid = x - seed_means[:, None] - item_means[None, :] + grand
    ms_resid = float(np.sum(resid**2)) / ((k - 1) * (n - 1))
    return VarianceComponents(seed_var=max(0.0, (ms_seeds - ms_resid) / n), item_var=ms_resid,
                              item_effect_var=max(0.0, (ms_items - ms_resid) / k), seeds=k, n_items=n)


# ------------------------------------------------------------------------------------------------ planning

@dataclass(kw_only=True, slots=True, frozen=True)
class PlannedClaim:
    """One claim of a table to plan for: the two rows it differs and the paper's difference."""

    label: str
    minuend: str
    subtrahend: str
    effect: float


@dataclass(kw_only=True, slots=True, frozen=True)
class SeedPlan:
    claim: PlannedClaim
    seeds_per_row: int | None
    """Seeds per row for the target power at the paper's effect; None: more than MAX_SEEDS (or no effect)."""
    gpu_hours: float | None
    """GPU-hours of the runs still missing for this claim alone (both rows), at hours_per_run each."""

    def line(self, *, power: float = TARGET_POWER, cost: bool = True) -> str:
        """"the +1.47 avg6 claim needs N seeds per row for 80% power: X GPU-hours" (without cost: no hours)."""
        c = self.claim
        if self.seeds_per_row is None:
            need = "no finite seed count (zero effect)" if c.effect == 0 else f"more than {MAX_SEEDS} seeds per row"
            return f"the {c.effect:+g} {c.label} claim needs {need} for {power:.0%} power"
        hours = f": {self.gpu_hours:.1f} GPU-hours" if cost else ""
        return (f"the {c.effect:+g} {c.label} claim needs {self.seeds_per_row} seeds per row for {power:.0%} "
                f"power{hours}")


def check_hours(hours_per_run: float) -> float:
    if isinstance(hours_per_run, bool) or not isinstance(hours_per_run, int | float) or not (
            math.isfinite(hours_per_run) and hours_per_run >= 0):
        raise UserError(f"the GPU-hours of one run must be a finite non-negative number, got {hours_per_run!r}",
                        where="hours_per_run", fix="the profile's GPU-hours per run, e.g. 12.5")
    return float(hours_per_run)


def plan_seeds(claims: Sequence[PlannedClaim], *, seed_sd: float, item_sd: float = 0.0, n_items: int = 1,
               hours_per_run: float, seeds_run: dict[str, int] | None = None, alpha: float = ALPHA,
               power: float = TARGET_POWER, holm: bool = True) -> tuple[list[SeedPlan], float | None]:
    """Per claim, the seeds per row for `power` at the paper's effect and their GPU-hours; and the table's total.

    `seed_sd` and `item_sd` are the square roots of VarianceComponents.seed_var and .item_var (measured, or given);
    `seeds_run` the seeds each row already has (their cost is not counted again). The total runs each row to
    the largest count any of its claims needs; None when some claim needs more than MAX_SEEDS."""
    alpha = check_alpha(alpha)
    hours = check_hours(hours_per_run)
    for name, value in (("seed_sd", seed_sd), ("item_sd", item_sd)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise UserError(f"a standard deviation must be finite and non-negative, got {value!r}", where=name,
                            fix="e.g. 0.3")
    if isinstance(n_items, bool) or not isinstance(n_items, int) or n_items < 1:
        raise UserError(f"the item count must be a positive integer, got {n_items!r}", where="n_items",
                        fix="the items a row's value averages, e.g. 10042")
    have = dict(seeds_run or {})
    sd = math.sqrt(seed_sd**2 + item_sd**2 / n_items)
    level = alpha / (len(claims) if holm and claims else 1)
    plans, per_row = [], {}
    for claim in claims:
        k = seeds_needed(claim.effect, sd=sd, alpha=level, power=power)
        cost = None
        if k is not None:
            missing = sum(max(0, k - have.get(row, 0)) for row in (claim.minuend, claim.subtrahend))
            cost = missing * hours
            for row in (claim.minuend, claim.subtrahend):
                per_row[row] = max(per_row.get(row, 0), k)
        plans.append(SeedPlan(claim=claim, seeds_per_row=k, gpu_hours=cost))
    if any(p.seeds_per_row is None for p in plans):
        return plans, None
    total = sum(max(0, k - have.get(row, 0)) for row, k in per_row.items()) * hours
    return plans, total
