"""Does our difference between two rows replicate the paper's? Direction and size apart, honest intervals, Holm.

The rules, in plain words, with the method and degrees of freedom of each interval: docs/replication.md.
In short, for two rows a, b scored per item (an lm-eval document, a validation batch) by each seed, paired by
seed (row k of each) and by item (column j of each):
- one seed's difference D_k = mean_j (a_kj - b_kj); our estimate the mean of D_k over seeds;
- direction: a Student t interval over the claim's own paired D_k (seeds - 1 df; a seed variance pooled over a
  table's rows is only a note, `pooled_note`: one row scattering more than the others would make it undercover),
  its two-sided p, Holm-adjusted over all the claims a command prints (`compare_all`); seeds are never
  bootstrapped (a bootstrap over fewer than 8 seeds undercovers, and the t interval is exact for normal D_k);
- item sampling: a separate figure, one shared resample of the items per replicate for every seed and both
  rows (the rows answered the same items);
- size: an interval for ours minus the paper's that carries the paper's single-seed noise and a declared
  between-implementation tolerance; "replicates" only where the size test also rules out 3x the paper's effect
  (`size_tests`);
- verdicts: replicates / size undetermined / direction only / contradicts / not powered / inconclusive /
  equivalent / one seed.
The verdict's own power and seed counts (`direction_power`, `seeds_for_direction`, `seeds_for_size`,
`verdict_rates`) are what `power`, `predict` and the budget planner call. Pure numpy/scipy; torch-free. The
noncentral t arithmetic underneath: exoformer/report/stats/power.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from exoformer import limits
from exoformer.errors import UserError
from exoformer.report.stats import power as pw

REPLICATES, SIZE_UNDETERMINED = "replicates", "size undetermined"
DIRECTION_ONLY, CONTRADICTS = "direction only", "contradicts"
INCONCLUSIVE, NOT_POWERED, EQUIVALENT, ONE_SEED = "inconclusive", "not powered", "equivalent", "one seed"
VERDICTS = (REPLICATES, SIZE_UNDETERMINED, DIRECTION_ONLY, CONTRADICTS, INCONCLUSIVE, NOT_POWERED, EQUIVALENT,
            ONE_SEED)
"""Every verdict line starts with one of these."""
DIRECTION_HOLDS = (REPLICATES, SIZE_UNDETERMINED, DIRECTION_ONLY)
"""Significant after Holm in the paper's direction: what `power` plans 80% of."""
DECISIVE = (REPLICATES, DIRECTION_ONLY, CONTRADICTS, EQUIVALENT)
"""Verdicts that settle both what they test: more seeds would not change what they say (only sharpen it)."""
SIZE_FACTOR = 3.0
""""replicates" needs the size test to rule out this multiple of the paper's effect."""
DEFAULT_TOLERANCE_FRACTION = 0.1
"""The between-implementation tolerance when a claim declares none: this fraction of |paper| (docs/replication.md)."""
MAX_SIZE_SEEDS = 60
"""The largest seed count `seeds_for_size` tries (by simulation); beyond it the line says "more than 60"."""
SIZE_DRAWS = 4000
"""Draws per seed count in `seeds_for_size`: Monte Carlo SE of an 80% rate 0.6 points."""
_GRID = 256
"""Quadrature points over the seed sd's uncertainty (and 64 over the effect's) in `direction_power`."""
KINDS = {"accuracy": "higher", "loss": "lower"}
"""Which side is better for each kind of metric."""
ALPHA = pw.ALPHA
DEFAULT_ITEM_RESAMPLES = limits.DEFAULT_ITEM_RESAMPLES
ITEM_RESAMPLES_RANGE = limits.OPTION_BOUNDS["--bootstrap"]
"""Bounds on the item resamples: fewer gives a percentile interval noisier than its width; more buys nothing."""
_CHUNK_CELLS = 1 << 22
"""Index cells drawn at once by the item resampling (bounded memory however many items)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class PooledVariance:
    """A seed variance pooled across a table's rows: the variance of one seed's paired difference of two rows."""

    var: float | np.ndarray
    """One value, or one per claim of a batch (simulations)."""
    df: float

    def __post_init__(self) -> None:
        var = np.asarray(self.var, dtype=float)
        if not (np.all(np.isfinite(var)) and np.all(var >= 0) and math.isfinite(self.df) and self.df >= 1):
            raise UserError(f"a pooled variance needs var >= 0 and df >= 1, got var={self.var!r}, df={self.df!r}",
                            where="pooled", fix="use pooled_seed_variance(values) on the table's rows")


def _residuals(values: np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.ndim < 2 or x.shape[-2] < 2 or x.shape[-1] < 2 or not np.all(np.isfinite(x)):
        raise UserError(f"pooling needs a finite (rows >= 2, seeds >= 2) array, got shape {x.shape}",
                        where="values", fix="pass only the rows that have every seed")
    return x - x.mean(axis=-1, keepdims=True) - x.mean(axis=-2, keepdims=True) + x.mean(axis=(-2, -1), keepdims=True)


def pooled_seed_variance(values: np.ndarray) -> PooledVariance:
    """The pooled variance of a paired difference from a table's (rows, seeds) values, each row's mean over items
    (or a batch of tables, (..., rows, seeds), for simulations: var then one per table).

    Two-way analysis of variance (rows x seeds, seed k of every row paired): the residual mean square estimates
    the variance of one row's seed deviation around row + seed means, so one seed's difference of two rows has
    twice it, with (rows - 1)(seeds - 1) degrees of freedom. Assumes the seed scatter is alike across rows: when
    one row scatters more (the row every claim of a table shares, say), the pooled figure understates that row's
    claims' spread, so verdicts use each claim's own paired seeds and this figure is only a note (`pooled_note`)."""
    resid = _residuals(values)
    r, k = resid.shape[-2:]
    df = (r - 1) * (k - 1)
    var = 2.0 * np.sum(resid**2, axis=(-2, -1)) / df
    return PooledVariance(var=float(var) if np.ndim(var) == 0 else var, df=float(df))


def row_residuals(values: np.ndarray) -> np.ndarray:
    """Each row's sum of squared residuals in the rows x seeds analysis of variance of `pooled_seed_variance`:
    the rows that scatter most across seeds beyond the rows' and seeds' means."""
    return np.sum(_residuals(values) ** 2, axis=-1)


def pooled_note(diffs: np.ndarray, values: np.ndarray, rows: Sequence[str], *, alpha: float = ALPHA,
                largest: int = 2) -> str:
    """What a claim's interval would be if every row of its table shared one seed spread: the pooled figure as a
    note beside the verdict (never the verdict's), naming the rows with the largest residuals (those whose
    spread the pooling assumption is most doubtful for). `diffs`: the claim's per-seed differences; `values`:
    the table's (rows, seeds) values in the claim's column, `rows` naming them."""
    pooled = pooled_seed_variance(values)
    s = seed_statistics(np.asarray(diffs, dtype=float)[None, :], pooled=pooled, alpha=alpha)
    order = np.argsort(-row_residuals(values), kind="stable")[:largest]
    names = ", ".join(str(rows[i]) for i in order)
    return (f"if all rows share one spread: sd {float(s.sd[0]):.3g} pooled over {len(rows)} rows "
            f"({pooled.df:g} df), 95% interval {_interval((float(s.ci[0][0]), float(s.ci[1][0])))}; largest "
            f"residuals: {names}")


# ------------------------------------------------------------------------------------------------ statistics

@dataclass(kw_only=True, slots=True)
class SeedStatistics:
    """The seed-level statistics of a batch of claims (arrays over the batch); see `seed_statistics`."""

    seeds: int
    estimate: np.ndarray
    sd: np.ndarray
    """sd of one seed's difference (own seeds, or pooled); NaN with one seed and nothing pooled."""
    df: np.ndarray
    ci: tuple[np.ndarray, np.ndarray]
    pi: tuple[np.ndarray, np.ndarray]
    p: np.ndarray
    """Two-sided p of "no difference" (t test)."""
    equivalence_ci: tuple[np.ndarray, np.ndarray] | None
    """The 90% t interval (margin claims)."""
    p_equivalence: np.ndarray | None
    """p of "the difference is at least the margin" (two one-sided t tests), for margin claims."""


def seed_statistics(diffs: np.ndarray, *, pooled: PooledVariance | None = None, alpha: float = ALPHA,
                    margin: float | None = None) -> SeedStatistics:
    """t statistics of per-seed differences `diffs` (batch, seeds); vectorised over the batch for simulations."""
    d = np.asarray(diffs, dtype=float)
    batch, k = d.shape
    est = d.mean(axis=1)
    if pooled is not None:
        var = np.broadcast_to(np.asarray(pooled.var, dtype=float), (batch,)).copy()
        df = np.full(batch, float(pooled.df))
    elif k >= 2:
        var, df = d.var(axis=1, ddof=1), np.full(batch, float(k - 1))
    else:
        var, df = np.full(batch, np.nan), np.full(batch, np.nan)
    sd = np.sqrt(var)
    se = sd / math.sqrt(k)
    t975 = stats.t.ppf(1.0 - alpha / 2.0, df)
    spread = t975 * sd * math.sqrt(1.0 + 1.0 / k)
    with np.errstate(divide="ignore", invalid="ignore"):
        tstat = np.where(se > 0, est / np.where(se > 0, se, 1.0), np.where(est == 0, 0.0, np.inf))
    p = np.where(np.isnan(se), np.nan, 2.0 * stats.t.sf(np.abs(tstat), df))
    eq_ci = p_eq = None
    if margin is not None:
        t95 = stats.t.ppf(1.0 - alpha, df)
        eq_ci = (est - t95 * se, est + t95 * se)
        with np.errstate(divide="ignore", invalid="ignore"):
            above = np.where(se > 0, stats.t.sf((est + margin) / np.where(se > 0, se, 1.0), df),
                             (est <= -margin).astype(float))
            below = np.where(se > 0, stats.t.cdf((est - margin) / np.where(se > 0, se, 1.0), df),
                             (est >= margin).astype(float))
        p_eq = np.where(np.isnan(se), np.nan, np.maximum(above, below))
    return SeedStatistics(seeds=k, estimate=est, sd=sd, df=df, ci=(est - t975 * se, est + t975 * se),
                          pi=(est - spread, est + spread), p=p, equivalence_ci=eq_ci, p_equivalence=p_eq)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values along the last axis; NaN (no test: one seed) stays out of the family."""
    p = np.asarray(p, dtype=float)
    order = np.argsort(p, axis=-1)  # NaN sorts last
    ranked = np.take_along_axis(p, order, axis=-1)
    m = np.sum(~np.isnan(p), axis=-1, keepdims=True)
    steps = m - np.arange(p.shape[-1])
    adjusted = np.minimum(1.0, np.maximum.accumulate(np.where(np.isnan(ranked), 0.0, ranked * steps), axis=-1))
    adjusted = np.where(np.isnan(ranked), np.nan, adjusted)
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out


def tolerance_of(paper: np.ndarray | float, tolerance: np.ndarray | float | None = None) -> np.ndarray:
    """The between-implementation tolerance: the declared one, else DEFAULT_TOLERANCE_FRACTION x |paper|."""
    if tolerance is None:
        return DEFAULT_TOLERANCE_FRACTION * np.abs(np.asarray(paper, dtype=float))
    return np.asarray(tolerance, dtype=float)


def size_half_width(s: SeedStatistics, *, factor: float = 1.0, tolerance: np.ndarray | float = 0.0,
                    alpha: float = ALPHA) -> np.ndarray:
    """Half-width of the 95% interval of ours - factor x paper's: t(df) sd sqrt(factor^2 + 1/K) + tolerance.

    The paper's value is one seed's difference, with the sd of one of our seeds' (factor^2 of it once scaled);
    ours is a mean of K. The pivot (mean - factor x paper) / (sd sqrt(factor^2 + 1/K)) is Student t with the
    claim's df whatever the true effects, so the test of "ours = factor x paper's" holds its level exactly."""
    t = stats.t.ppf(1.0 - alpha / 2.0, s.df)
    return t * s.sd * np.sqrt(factor**2 + 1.0 / s.seeds) + np.asarray(tolerance, dtype=float)


def size_tests(s: SeedStatistics, paper: np.ndarray | float, *, tolerance: np.ndarray | float | None = None,
               alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """(same size, 3x ruled out) per claim of a batch.

    Same size: 0 lies in the interval of ours - paper's (`size_half_width`). 3x ruled out: SIZE_FACTOR x paper's
    lies outside its own interval, whose width carries 3x the paper's seed noise. Checking only that the first
    interval is narrower than |paper| would read a 3x truth as "replicates" more often than an equal one when
    the paper's seed drew high (tests/report/stats/test_verdict_simulations.py)."""
    paper = np.broadcast_to(np.asarray(paper, dtype=float), s.estimate.shape)
    tol = tolerance_of(paper, tolerance)
    same = np.abs(s.estimate - paper) <= size_half_width(s, tolerance=tol, alpha=alpha)
    ruled_out = np.abs(s.estimate - SIZE_FACTOR * paper) > size_half_width(s, factor=SIZE_FACTOR, tolerance=tol,
                                                                           alpha=alpha)
    return same, ruled_out


def verdict_heads(s: SeedStatistics, paper: np.ndarray | float, p_adjusted: np.ndarray, *, mde: np.ndarray,
                  alpha: float = ALPHA, margin: float | None = None,
                  equivalence_powered: np.ndarray | None = None,
                  tolerance: np.ndarray | float | None = None) -> np.ndarray:
    """The verdict keyword of each claim of a batch (the rules of docs/replication.md), vectorised.

    Direction: significant at the Holm-adjusted p, in the paper's sign. Size (`size_tests`): replicates when
    our size holds the paper's and rules out 3x it; size undetermined when it holds both; direction only when
    it is shown different. `tolerance`: declared per claim (None: DEFAULT_TOLERANCE_FRACTION x |paper|)."""
    paper = np.broadcast_to(np.asarray(paper, dtype=float), s.estimate.shape)
    if s.seeds < 2:
        return np.full(s.estimate.shape, ONE_SEED, dtype=object)
    significant = p_adjusted < alpha
    if margin is not None:
        powered = np.ones_like(significant) if equivalence_powered is None else equivalence_powered
        return np.where(significant, EQUIVALENT, np.where(powered, INCONCLUSIVE, NOT_POWERED)).astype(object)
    holds = significant & (np.sign(s.estimate) == np.sign(paper))
    same, ruled_out = size_tests(s, paper, tolerance=tolerance, alpha=alpha)
    return np.select([holds & same & ruled_out, holds & same, holds, significant, np.abs(paper) < mde],
                     [REPLICATES, SIZE_UNDETERMINED, DIRECTION_ONLY, CONTRADICTS, NOT_POWERED],
                     INCONCLUSIVE).astype(object)


# ------------------------------------------------------------------------------------------------ planning

def _sd_draws(sd: float, sd_df: float) -> np.ndarray:
    """Quadrature points of the true seed sd given an estimate `sd` with `sd_df` df (scaled inverse chi-square:
    the fiducial distribution of sigma); just `sd` when it is taken as known (sd_df infinite)."""
    if not math.isfinite(sd_df):
        return np.array([sd])
    u = (np.arange(_GRID) + 0.5) / _GRID
    return sd * np.sqrt(sd_df / stats.chi2.ppf(u, sd_df))


def direction_power(effect: float, *, sd: float, seeds: int, family: int = 1, alpha: float = ALPHA,
                    sd_df: float = math.inf, effect_se: float = 0.0,
                    df_of: Callable[[int], float] | None = None) -> float:
    """P(the verdict's direction holds: significant at alpha / family, Holm's strictest step, in the paper's sign)
    with `seeds` per row, when the true difference is `effect` (signed: positive is the paper's direction).

    Exact for normal D_k at a known sd (noncentral t, one tail). With `sd_df` finite the sd is an estimate and
    the power is averaged over its scaled inverse chi-square; with `effect_se` over a normal true effect
    (predictive power: what planning from a 3-seed spread needs to reach 80% in fact)."""
    df = float(seeds - 1) if df_of is None else max(float(df_of(seeds)), 1.0)
    if seeds < 2 or not df >= 1:
        return 0.0
    sigma = _sd_draws(sd, sd_df)[:, None]
    if effect_se > 0:
        u = (np.arange(64) + 0.5) / 64
        effects = effect + effect_se * stats.norm.ppf(u)[None, :]
    else:
        effects = np.array([[effect]])
    crit = stats.t.ppf(1.0 - alpha / family / 2.0, df)
    with np.errstate(divide="ignore", invalid="ignore"):
        nc = np.where(sigma > 0, effects * math.sqrt(seeds) / np.where(sigma > 0, sigma, 1.0),
                      np.sign(effects) * np.inf)
    finite = np.isfinite(nc)
    p = np.where(finite, stats.nct.sf(crit, df, np.where(finite, nc, 0.0)), (nc > 0).astype(float))
    return float(np.mean(np.nan_to_num(p, nan=0.0)))


def seeds_for_direction(effect: float, *, sd: float, family: int = 1, alpha: float = ALPHA,
                        sd_df: float = math.inf, effect_se: float = 0.0, power: float = pw.TARGET_POWER,
                        df_of: Callable[[int], float] | None = None, max_seeds: int = pw.MAX_SEEDS) -> int | None:
    """The smallest seeds per row with `direction_power` >= `power` (80%); None: no effect, or over max_seeds."""
    if not (math.isfinite(effect) and math.isfinite(sd)) or sd < 0 or (effect == 0 and effect_se == 0):
        return None
    return pw.smallest_enough(lambda k: direction_power(effect, sd=sd, seeds=k, family=family, alpha=alpha,
                                                        sd_df=sd_df, effect_se=effect_se, df_of=df_of) >= power,
                              max_seeds=max_seeds)


def verdict_rates(truth: float, *, sd: float, paper: float, seeds: Sequence[int] | np.ndarray, family: int = 1,
                  alpha: float = ALPHA, tolerance: float | None = None, sd_df: float = math.inf,
                  effect_se: float = 0.0, draws: int = SIZE_DRAWS, seed: int = 0) -> dict[str, np.ndarray]:
    """head -> its share of simulated runs, for each seed count in `seeds` (the same draws for every count).

    Each draw takes a true difference (normal around `truth`, sd `effect_se`) and a true seed sd (`_sd_draws`'s
    distribution), then K paired seeds judged by `seed_statistics` and `verdict_heads` at Holm's strictest step
    (p x family). The verdict itself is what is simulated: no second formula."""
    counts = np.atleast_1d(np.asarray(seeds, dtype=int))
    rng = np.random.default_rng(seed)
    true = truth + effect_se * rng.standard_normal(draws)
    sigma = sd * np.sqrt(sd_df / rng.chisquare(sd_df, draws)) if math.isfinite(sd_df) else np.full(draws, sd)
    noise = rng.standard_normal((draws, int(counts.max())))
    out = {head: np.zeros(counts.size) for head in VERDICTS}
    for i, k in enumerate(counts):
        s = seed_statistics(true[:, None] + sigma[:, None] * noise[:, :k], alpha=alpha)
        mde = pw.detectable_noncentrality(float(k - 1), alpha=alpha / family) * s.sd / math.sqrt(k)
        heads = verdict_heads(s, paper, np.minimum(1.0, s.p * family), mde=mde, alpha=alpha, tolerance=tolerance)
        for head in VERDICTS:
            out[head][i] = float(np.mean(heads == head))
    return out


def _widest_sd(paper: float, tolerance: float | None, alpha: float) -> float:
    """The widest true seed sd at which the paper's single seed still rules out 3x its effect, were our mean
    exact and equal to it: 2|paper| > z sd x 3 + tolerance (at or below 0: none does)."""
    tol = float(tolerance_of(paper, tolerance))
    z = float(stats.norm.ppf(1.0 - alpha / 2.0))
    return ((SIZE_FACTOR - 1.0) * abs(paper) - tol) / (z * SIZE_FACTOR)


def size_beyond_our_seeds(paper: float, *, sd: float, tolerance: float | None = None, alpha: float = ALPHA) -> bool:
    """True when no count of our seeds could rule out 3x the paper's effect, were ours equal to it.

    With infinitely many seeds our mean is exact and the 3x interval keeps only the paper's one seed
    (`_widest_sd`). Past that, only more seeds of the paper's own would help."""
    return sd >= _widest_sd(paper, tolerance, alpha)


def size_ceiling(paper: float, *, sd: float, tolerance: float | None = None, sd_df: float = math.inf,
                 alpha: float = ALPHA) -> float:
    """P(`replicates`) with unboundedly many of our seeds were ours the paper's value: the chance the true sd
    lets the paper's single seed rule out 3x (`size_beyond_our_seeds`), over the sd's scaled inverse chi-square.
    Below 80%, no seed count plans it: the measured spread is too uncertain."""
    limit = _widest_sd(paper, tolerance, alpha)
    if limit <= 0 or sd < 0:
        return 0.0
    if not math.isfinite(sd_df) or sd == 0:
        return float(sd < limit)
    return float(stats.chi2.sf(sd_df * sd**2 / limit**2, sd_df))  # P(sigma < limit), sigma^2 = df sd^2 / chi2


def seeds_for_size(paper: float, *, sd: float, family: int = 1, alpha: float = ALPHA,
                   tolerance: float | None = None, sd_df: float = math.inf, power: float = pw.TARGET_POWER,
                   max_seeds: int = MAX_SIZE_SEEDS, seed: int = 0) -> int | None:
    """The smallest seeds per row at which `replicates` reads `power` (80%) of the time if our effect equals the
    paper's value (by `verdict_rates`); None: `size_ceiling` below `power`, or over max_seeds."""
    if not (math.isfinite(paper) and math.isfinite(sd)) or paper == 0 or sd < 0:
        return None
    if size_ceiling(paper, sd=sd, tolerance=tolerance, sd_df=sd_df, alpha=alpha) < power:
        return None
    counts = np.arange(2, max_seeds + 1)
    rates = verdict_rates(paper, sd=sd, paper=paper, seeds=counts, family=family, alpha=alpha, tolerance=tolerance,
                          sd_df=sd_df, seed=seed)[REPLICATES]
    enough = np.flatnonzero(rates >= power)
    return int(counts[enough[0]]) if enough.size else None


# ------------------------------------------------------------------------------------------------ items

def item_resamples(per_item: np.ndarray, *, resamples: int, strata: np.ndarray | None = None,
                   rng: np.random.Generator) -> np.ndarray:
    """Replicates of the mean of `per_item` (one value per item) under resampling of the items with replacement.

    Callers pass the seed-mean of the per-item differences, so each replicate is one shared draw of items for
    every seed and both rows. With `strata` (a label per item, e.g. the task), items are redrawn within each
    stratum, keeping its size (avg6's tasks each keep their document count)."""
    x = np.asarray(per_item, dtype=float)
    groups = [np.arange(x.size)] if strata is None else [np.flatnonzero(strata == s) for s in np.unique(strata)]
    total = np.zeros(resamples)
    for members in groups:
        values = x[members]
        step = max(1, _CHUNK_CELLS // max(1, values.size))
        for start in range(0, resamples, step):
            stop = min(resamples, start + step)
            idx = rng.integers(0, values.size, size=(stop - start, values.size))
            total[start:stop] += values[idx].sum(axis=1)
    return total / x.size


def check_item_resamples(value: object, *, where: str = "item_resamples") -> int:
    low, high = ITEM_RESAMPLES_RANGE
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not low <= int(value) <= high:
        raise UserError(f"the item resample count must be an integer in [{low}, {high}], got {value!r}",
                        where=where, fix=f"{DEFAULT_ITEM_RESAMPLES}")
    return int(value)


# ------------------------------------------------------------------------------------------------ comparisons

@dataclass(kw_only=True, slots=True)
class Comparison:
    """One claim: our difference mean(a) - mean(b) against the paper's, with intervals and a verdict."""

    paper: float
    margin: float | None
    seeds: int
    estimate: float
    """Our mean difference over the paired seeds."""
    ci: tuple[float, float] | None
    """95% t interval for the mean difference over seeds on these items; None with one seed and nothing pooled."""
    pi: tuple[float, float] | None
    """95% prediction interval for one seed's difference (where the paper's single-seed value would fall)."""
    p: float | None
    """Two-sided p of no difference (of the equivalence test for a margin claim); None with one seed."""
    p_adjusted: float | None
    """Holm-adjusted p over the claims compared together (equal to p for one claim)."""
    verdict: str
    mde: float | None
    """Minimum detectable effect at 80% power with these seeds, at Holm's strictest level alpha / m."""
    seeds_needed: int | None
    """Seeds per row for 80% power at the paper's effect, over the uncertainty of our sd (`seeds_for_direction`;
    to show equivalence, for a margin claim)."""
    power: float | None
    """Power at the paper's effect with these seeds (at alpha / m)."""
    sd: float | None
    df: float | None
    ci_method: str
    pi_method: str
    tolerance: float = 0.0
    """The declared between-implementation tolerance (metric units) the size interval carries."""
    size: tuple[float, float] | None = None
    """95% interval of ours - the paper's: its noise and ours, plus the tolerance; None with one seed."""
    size_seeds: int | None = None
    """For `size undetermined`: seeds per row that make `replicates` 80% likely were ours the paper's value."""
    size_beyond: bool = False
    """For `size undetermined`: the paper's one seed alone is too noisy for any count of ours."""
    size_ceiling: float = 1.0
    """For `size undetermined`: P(`replicates`) with unboundedly many seeds, over our sd's uncertainty."""
    equivalence_ci: tuple[float, float] | None = None
    """90% t interval (margin claims): equivalent when inside +-margin."""
    item_se: float | None = None
    """Standard error from item sampling alone (a separate figure; not part of ci)."""
    item_ci: tuple[float, float] | None = None
    item_method: str = ""

    @property
    def head(self) -> str:
        """The verdict keyword (one of VERDICTS)."""
        return next(v for v in VERDICTS if self.verdict.startswith(v))

    def line(self) -> str:
        """The claim's one line: paper, ours [interval], the size interval of ours - paper's, verdict, seeds."""
        ours = _fmt(self.estimate) + ("" if self.ci is None else f" {_interval(self.ci)}")
        size = "" if self.size is None or self.margin is not None else (
            f", ours - paper's {_fmt(self.estimate - self.paper)} {_interval(self.size)}")
        need = "" if self.head == ONE_SEED and self.seeds_needed is None else f"; {_need(self)}"
        return f"paper {_fmt(self.paper)}, ours {ours}{size}: {self.verdict}" + (
            "" if self.head == NOT_POWERED else need)

    def methods(self) -> str:
        """How each interval of the line was computed (for the closing note)."""
        parts = [f"ours: {self.ci_method}", f"ours - paper's: {self.pi_method}"]
        if self.equivalence_ci is not None:
            parts.append(f"equivalence: 90% t interval ({self.df:g} df)")
        if self.item_method:
            parts.append(self.item_method)
        return "; ".join(parts)


def _check_pair(a: object, b: object, where: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.ndim != 2 or x.shape != y.shape or x.shape[0] < 1 or x.shape[1] < 1:
        raise UserError(f"a and b must be (seeds, items) arrays of one shape, got {x.shape} and {y.shape}",
                        where=where, fix="pair row k of a with row k of b, column j with column j; one item: "
                                         "reshape(-1, 1)")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise UserError("a or b holds a non-finite score", where=where, fix="drop the missing items from both rows")
    return x, y


def _check_claim(paper: object, kind: object, margin: object, where: str) -> tuple[float, float | None]:
    if kind not in KINDS:
        raise UserError(f"unknown kind {kind!r}", where=where, fix=f"one of {', '.join(KINDS)}")
    if isinstance(paper, bool) or not isinstance(paper, int | float | np.floating) or not math.isfinite(paper):
        raise UserError(f"the paper's difference must be a finite number, got {paper!r}", where=where,
                        fix="the claimed mean(a) - mean(b) in the same units")
    if margin is not None and (not isinstance(margin, int | float | np.floating) or not margin > 0
                               or not math.isfinite(margin)):
        raise UserError(f"the equivalence margin must be a positive number, got {margin!r}", where=where,
                        fix="declare the metric's margin, e.g. 0.5")
    if margin is None and paper == 0:
        raise UserError("a claimed difference of 0 is a claim of no difference: it needs an equivalence margin",
                        where=where, fix="pass margin=... (the metric's margin)")
    return float(paper), None if margin is None else float(margin)


def _fmt(x: float) -> str:
    return f"{x:+.3g}"


def _interval(pair: tuple[float, float]) -> str:
    return f"[{_fmt(pair[0])}, {_fmt(pair[1])}]"


@dataclass(kw_only=True, slots=True)
class _Measured:
    d: np.ndarray
    paper: float
    margin: float | None
    stats: SeedStatistics
    primary_p: float  # NaN with one seed


def _measure(a: object, b: object, paper: object, kind: object, margin: object, *, pooled: PooledVariance | None,
             alpha: float, where: str) -> _Measured:
    x, y = _check_pair(a, b, where)
    paper_f, margin_f = _check_claim(paper, kind, margin, where)
    d = x - y
    s = seed_statistics(d.mean(axis=1)[None, :], pooled=pooled, alpha=alpha, margin=margin_f)
    primary = s.p if margin_f is None else s.p_equivalence
    # one seed is no test, even with a pooled variance: it stays out of the Holm family
    p = float(primary[0]) if s.seeds >= 2 else math.nan
    return _Measured(d=d, paper=paper_f, margin=margin_f, stats=s, primary_p=p)


def _finish(m: _Measured, *, p_adjusted: float, family_size: int, alpha: float, pooled: PooledVariance | None,
            tolerance: float | None, item_resamples_: int | None, strata: np.ndarray | None,
            rng: np.random.Generator) -> Comparison:
    s, k = m.stats, m.stats.seeds
    level = alpha / family_size
    tol = float(tolerance_of(m.paper, tolerance))
    sd = float(s.sd[0]) if np.isfinite(s.sd[0]) else None
    df = float(s.df[0]) if np.isfinite(s.df[0]) else None
    mde = seeds = power = None
    if sd is not None and df is not None:
        mde = pw.minimum_detectable_effect(sd=sd, seeds=k, df=df, alpha=level)
        def df_of(n: int) -> float:
            return float(n - 1) if pooled is None else (df if k < 2 else df * (n - 1) / (k - 1))

        if m.margin is None:
            power = direction_power(abs(m.paper), sd=sd, seeds=k, family=family_size, alpha=alpha, sd_df=df,
                                    df_of=df_of)
            seeds = seeds_for_direction(abs(m.paper), sd=sd, family=family_size, alpha=alpha, sd_df=df, df_of=df_of)
        else:
            power = pw.equivalence_power(m.paper, margin=m.margin, sd=sd, seeds=k, df=df, alpha=level)
            seeds = pw.seeds_needed_equivalence(m.paper, margin=m.margin, sd=sd, alpha=level, df_of=df_of)
    ci = pi = eq = size = None
    if sd is not None:
        ci, pi = (float(s.ci[0][0]), float(s.ci[1][0])), (float(s.pi[0][0]), float(s.pi[1][0]))
        half = float(size_half_width(s, tolerance=tol, alpha=alpha)[0])
        gap = float(s.estimate[0]) - m.paper
        size = (gap - half, gap + half)
        if s.equivalence_ci is not None:
            eq = (float(s.equivalence_ci[0][0]), float(s.equivalence_ci[1][0]))
    if pooled is not None:
        ci_method = f"t interval, seed variance pooled over the table's rows ({df:g} df)"
    elif k >= 2:
        ci_method = f"t interval over {k} paired seeds ({df:g} df)"
    else:
        ci_method = "one seed: no interval over seeds"
    pi_method = ("none" if size is None else
                 f"(ours - paper's) +- [t(0.975, {df:g}) sd sqrt(1 + 1/{k}) + tolerance {tol:.3g}] (the paper's value "
                 f"is one seed); 3x the paper's ruled out when ours - 3 x paper's lies beyond t(0.975, {df:g}) sd "
                 f"sqrt(9 + 1/{k}) + tolerance")
    head = verdict_heads(s, m.paper, np.array([p_adjusted]), mde=np.array([np.inf if mde is None else mde]),
                         alpha=alpha, margin=m.margin, tolerance=tol,
                         equivalence_powered=None if power is None else np.array([power >= pw.TARGET_POWER]))[0]
    out = Comparison(paper=m.paper, margin=m.margin, seeds=k, estimate=float(s.estimate[0]), ci=ci, pi=pi,
                     p=None if k < 2 else m.primary_p, p_adjusted=None if k < 2 else p_adjusted, verdict=head, mde=mde,
                     seeds_needed=seeds, power=power, sd=sd, df=df, ci_method=ci_method, pi_method=pi_method,
                     tolerance=tol, size=size, equivalence_ci=eq)
    if head == SIZE_UNDETERMINED:
        out.size_beyond = size_beyond_our_seeds(m.paper, sd=sd, tolerance=tol, alpha=alpha)
        out.size_ceiling = size_ceiling(m.paper, sd=sd, tolerance=tol, sd_df=df, alpha=alpha)
        out.size_seeds = None if out.size_beyond else seeds_for_size(m.paper, sd=sd, family=family_size,
                                                                     alpha=alpha, tolerance=tol, sd_df=df)
    if item_resamples_ is not None and m.d.shape[1] < 2:
        out.item_method = "one item per seed: no item resampling"
    elif item_resamples_ is not None:
        reps = item_resamples(m.d.mean(axis=0), resamples=item_resamples_, strata=strata, rng=rng)
        out.item_se = float(np.std(reps, ddof=1))
        out.item_ci = (float(np.percentile(reps, 2.5)), float(np.percentile(reps, 97.5)))
        out.item_method = (f"item resampling: {item_resamples_} resamples of the {m.d.shape[1]} items"
                           + (" within their strata" if strata is not None else "")
                           + ", one shared draw for every seed and both rows (percentile interval)")
    out.verdict = _wording(out, alpha=alpha, family_size=family_size)
    return out


def _need(c: Comparison) -> str:
    at = f"at the paper's effect ({_fmt(c.paper)})"
    if c.seeds_needed is not None:
        what = "to show equivalence" if c.margin is not None else f"80% power {at}"
        return f"{c.seeds_needed} seeds per row would give {what}"
    if c.sd is None:
        return "the seeds needed are not known (one seed, no pooled variance)"
    return f"more than {pw.MAX_SEEDS} seeds per row would be needed for 80% power {at}"


def _size_need(c: Comparison) -> str:
    """What would determine an undetermined size."""
    three = f"{_fmt(SIZE_FACTOR * c.paper)}"
    if c.size_beyond:
        return (f"no count of our seeds would: the paper's single seed (sd about {c.sd:.3g}, as ours) and the "
                f"tolerance {c.tolerance:.3g} cannot tell {_fmt(c.paper)} from {three}; only more seeds of the "
                "paper's own would")
    if c.size_seeds is None and c.size_ceiling < pw.TARGET_POWER:
        return (f"more seeds: they measure our spread, now from {c.seeds} seeds ({c.df:g} df), which leaves a "
                f"{1 - c.size_ceiling:.0%} chance that the paper's single seed is too noisy to tell {_fmt(c.paper)} "
                f"from {three} at any count")
    if c.size_seeds is None:
        return f"more than {MAX_SIZE_SEEDS} seeds per row would be needed to tell {_fmt(c.paper)} from {three}"
    return (f"{c.size_seeds} seeds per row would tell {_fmt(c.paper)} from {three} 80% of the time, were ours "
            "equal to the paper's")


def _wording(c: Comparison, *, alpha: float, family_size: int) -> str:
    """The verdict line: its keyword, then why, in plain words."""
    head = c.verdict
    holm = "" if c.p_adjusted is None else (
        f"Holm-adjusted p {c.p_adjusted:.2g} over {family_size} claims" if family_size > 1 else f"p {c.p:.2g}")
    if head == ONE_SEED:
        items = f", item-sampling 95% {_interval(c.item_ci)}" if c.item_ci is not None else ""
        return (f"{ONE_SEED}: these two trained models differ by {_fmt(c.estimate)} on these items{items}; "
                "no verdict about the architecture")
    if head == EQUIVALENT:
        return f"{EQUIVALENT}: 90% interval {_interval(c.equivalence_ci)} inside +-{c.margin:g} ({holm})"
    if c.margin is not None:
        beyond = ""
        if c.ci is not None and (c.ci[0] > c.margin or c.ci[1] < -c.margin):
            beyond = "; our 95% interval lies beyond the margin"
        base = (f"not shown equivalent within +-{c.margin:g}: 90% interval {_interval(c.equivalence_ci)} "
                f"({holm}){beyond}")
        return f"{head}: {base}" + ("; " + _need(c) if head == NOT_POWERED else "")
    three = _fmt(SIZE_FACTOR * c.paper)
    if head == REPLICATES:
        return (f"{REPLICATES}: same direction, significant ({holm}); same size: ours - paper's holds 0 and "
                f"rules out 3x the paper's ({three})")
    if head == SIZE_UNDETERMINED:
        return (f"{SIZE_UNDETERMINED}: the direction holds (same direction, significant, {holm}); ours - paper's "
                f"holds 0 but cannot rule out 3x the paper's ({three}); {_size_need(c)}")
    if head == DIRECTION_ONLY:
        larger = c.size[0] > 0 if c.paper > 0 else c.size[1] < 0
        return (f"{DIRECTION_ONLY}: same direction, significant ({holm}), our effect "
                f"{'larger' if larger else 'smaller'} than the paper's {_fmt(c.paper)} (ours - paper's excludes 0)")
    if head == CONTRADICTS:
        return f"{CONTRADICTS}: significant in the other direction ({holm})"
    if head == NOT_POWERED:
        return (f"{NOT_POWERED}: not significant ({holm}); the paper's effect {abs(c.paper):.3g} is below the "
                f"minimum detectable effect {c.mde:.3g} with {c.seeds} seeds; {_need(c)}")
    return f"{INCONCLUSIVE}: not significant ({holm}) though powered for the paper's effect (mde {c.mde:.3g})"


def compare(a: np.ndarray, b: np.ndarray, paper: float, *, kind: str, margin: float | None = None,
            pooled: PooledVariance | None = None, alpha: float = ALPHA,
            item_resamples: int | None = DEFAULT_ITEM_RESAMPLES, item_strata: np.ndarray | None = None,
            resample_seed: int | np.random.Generator = 0, tolerance: float | None = None) -> Comparison:
    """One claim alone (a family of one: no Holm adjustment). See `compare_all` for the claims of a table."""
    return compare_all([(a, b, paper)], kind=kind, margins=[margin], pooled=pooled, alpha=alpha,
                       item_resamples=item_resamples, item_strata=[item_strata], resample_seed=resample_seed,
                       tolerances=[tolerance])[0]


def compare_all(claims: Sequence[tuple[np.ndarray, np.ndarray, float]], *, kind: str | Sequence[str],
                margins: Sequence[float | None] | None = None,
                pooled: PooledVariance | Sequence[PooledVariance | None] | None = None,
                alpha: float = ALPHA, item_resamples: int | None = DEFAULT_ITEM_RESAMPLES,
                item_strata: Sequence[np.ndarray | None] | None = None,
                resample_seed: int | np.random.Generator = 0,
                tolerances: Sequence[float | None] | None = None) -> list[Comparison]:
    """The claims shown together (all a command prints), Holm-adjusted so the family's false-verdict rate stays at
    alpha.

    `claims`: (a, b, paper) per claim; `kind`: one for all or one per claim; `margins`: the equivalence margin of
    each claim of "no loss" or "matches" (None for a directional claim); `pooled`: None (the default, each claim's
    own paired seeds, seeds - 1 df) or a pooled seed variance (pooled_seed_variance), one for all claims or one per
    claim, which assumes every row shares one spread; `item_resamples`: None skips the item-sampling figure;
    `item_strata`: per claim, each item's task (or None), for resampling within tasks; `resample_seed` fixes the
    draws (the same runs give the same figure); `tolerances`: per claim, the declared between-implementation
    tolerance of its size (None: DEFAULT_TOLERANCE_FRACTION x |paper|).
    Claims with one seed are no test and stay out of the family."""
    alpha = pw.check_alpha(alpha)
    n = len(claims)
    kinds = [kind] * n if isinstance(kind, str) else list(kind)
    margins = [None] * n if margins is None else list(margins)
    strata = [None] * n if item_strata is None else [None if s is None else np.asarray(s) for s in item_strata]
    pooled_each = [pooled] * n if pooled is None or isinstance(pooled, PooledVariance) else list(pooled)
    tols = [None] * n if tolerances is None else list(tolerances)
    if len(kinds) != n or len(margins) != n or len(strata) != n or len(pooled_each) != n or len(tols) != n:
        raise UserError(f"{n} claims but {len(kinds)} kinds, {len(margins)} margins, {len(strata)} strata, "
                        f"{len(pooled_each)} pooled variances, {len(tols)} tolerances", where="compare_all",
                        fix="one kind (or one for all), one margin, strata, pooled variance and tolerance per claim")
    for i, tol in enumerate(tols):
        if tol is not None and (isinstance(tol, bool) or not isinstance(tol, int | float | np.floating)
                                or not math.isfinite(tol) or tol < 0):
            raise UserError(f"the size tolerance must be a number >= 0, got {tol!r}", where=f"tolerances[{i}]",
                            fix="declare the metric's between-implementation tolerance, e.g. 0.2, or leave it out")
    if item_resamples is not None:
        item_resamples = check_item_resamples(item_resamples)
    measured = []
    for i, (claim, kind_i, margin_i, pooled_i) in enumerate(zip(claims, kinds, margins, pooled_each, strict=True)):
        if len(claim) != 3:
            raise UserError(f"claim {i} has {len(claim)} parts", where=f"claims[{i}]", fix="pass (a, b, paper)")
        a, b, paper = claim
        measured.append(_measure(a, b, paper, kind_i, margin_i, pooled=pooled_i, alpha=alpha, where=f"claims[{i}]"))
    adjusted = holm(np.array([m.primary_p for m in measured]))
    family = max(1, int(np.sum(np.isfinite(adjusted))))
    rng = resample_seed if isinstance(resample_seed, np.random.Generator) else np.random.default_rng(resample_seed)
    for i, (m, labels) in enumerate(zip(measured, strata, strict=True)):
        if labels is not None and labels.shape != (m.d.shape[1],):
            raise UserError(f"item_strata[{i}] has shape {labels.shape}, not one label per item",
                            where=f"item_strata[{i}]", fix="one label (e.g. the task) per column of a and b")
    return [_finish(m, p_adjusted=float(p_adj), family_size=family, alpha=alpha, pooled=pooled_i, tolerance=tol,
                    item_resamples_=item_resamples, strata=labels, rng=rng)
            for m, p_adj, labels, pooled_i, tol in zip(measured, adjusted, strata, pooled_each, tols, strict=True)]


def headline(comparisons: Sequence[Comparison]) -> str:
    """A table's headline from its Holm-adjusted verdicts: "k of m claims replicate", then the other counts."""
    counts = {v: sum(c.head == v for c in comparisons) for v in VERDICTS}
    rest = ", ".join(f"{n} {v}" for v, n in counts.items() if n and v != REPLICATES)
    return f"{counts[REPLICATES]} of {len(comparisons)} claims replicate" + (f" ({rest})" if rest else "")


# ------------------------------------------------------------------------------------------------ inputs

ItemScores = dict[str, dict[int, float]]
"""One run's per-item scores: task -> {document id: score} (exoformer.eval.samples, one metric per task)."""


def paired_items(a_seeds: Sequence[ItemScores], b_seeds: Sequence[ItemScores], *, tasks: Sequence[str],
                 scale: float = 100.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b, strata) for `compare`: the documents every seed of both rows scored, columns paired by (task, doc).

    A column averaging several tasks (avg6) weighs each task equally, as the table does: a document of a task
    with n_t kept documents is scaled by N / (T n_t), so the plain mean over the N columns is the mean over the
    T tasks of each task's mean; `strata` labels each column with its task for the item resampling. `scale`
    turns 0/1 scores into the table's percent."""
    if len(a_seeds) != len(b_seeds) or not a_seeds or not tasks:
        raise UserError(f"{len(a_seeds)} seeds of a but {len(b_seeds)} of b, {len(tasks)} tasks", where="items",
                        fix="pair seed k of each row and name the tasks the column averages")
    runs = [*a_seeds, *b_seeds]
    columns: list[tuple[int, object]] = []
    weights: list[float] = []
    kept = {}
    for t, task in enumerate(tasks):
        missing = [i for i, run in enumerate(runs) if task not in run]
        if missing:
            raise UserError(f"task {task!r} has no per-item scores in {len(missing)} of the runs", where="items",
                            fix="evaluate the runs again with per-sample results kept")
        docs = sorted(set.intersection(*(set(run[task]) for run in runs)))
        if not docs:
            raise UserError(f"no document of task {task!r} was scored by every run", where="items",
                            fix="evaluate every run on the same documents")
        kept[task] = docs
        columns += [(t, d) for d in docs]
    n_total, n_tasks = len(columns), len(tasks)
    for task in tasks:
        weights += [n_total / (n_tasks * len(kept[task]))] * len(kept[task])
    w = scale * np.asarray(weights)

    def table(seeds: Sequence[ItemScores]) -> np.ndarray:
        return np.array([[run[tasks[t]][d] for t, d in columns] for run in seeds], dtype=float) * w

    strata = np.array([t for t, _ in columns])
    return table(a_seeds), table(b_seeds), strata
