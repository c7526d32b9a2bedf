"""The noncentral t arithmetic under the replication verdict's power, and the equivalence planner.

Plan a claim's seeds with the verdict's own functions in exoformer/report/stats/replication.py
(`direction_power`, `seeds_for_direction`, `seeds_for_size`, `verdict_rates`): they fix the test (Holm's
strictest level alpha / m, the claim's own seeds - 1 df, the paper's sign, the size rule) and plan over the
uncertainty of a measured spread. `power`, `predict` and report/tables/seed_plan.py call those, never this
module's counts directly. Here: the two-sided power at a known sd,

    power = P(|T| > t_{1-alpha/2, df}),  T ~ noncentral t(df, effect / (sd / sqrt(seeds)))

(scipy.stats.nct), where `sd` is the standard deviation of one seed's D_k: sd^2 = seed_var + item_var / n_items;
the minimum detectable effect behind the verdict `not powered`; the search for the smallest sufficient seed count;
and the equivalence power of margin claims. `seeds_needed` is the two-sided count at a known sd, the plug-in
plan the tests compare the verdict's against (docs/replication.md). Torch-free.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
from scipy import optimize, stats

from exoformer.errors import UserError

ALPHA = 0.05
TARGET_POWER = 0.80
MAX_SEEDS = 10_000
"""The largest seed count a plan searches; beyond it a claim reads "more than 10000 seeds" (seeds_needed None)."""
MAX_MAGNITUDE = 1e6
"""The largest |effect|, seed sd or item sd `power` takes, in the metric's units (an accuracy in %, a perplexity):
far above any metric's range, and far below where a square overflows (1e308 did)."""
MAX_ITEMS = 1_000_000_000
"""The most items a row's value may average."""
MAX_HOURS_PER_RUN = 1_000_000.0
"""GPU-hours of one run `power` prices: times MAX_SEEDS seeds and two rows the total stays finite (1e308 printed
inf)."""


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
