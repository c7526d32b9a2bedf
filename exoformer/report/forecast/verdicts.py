"""Forecast verdicts: the probability that a run at the target with K seeds per row gets the verdict `replicates`
(exoformer/report/stats/replication.py) for a paper difference, from a ladder's forecast of that difference.

The truth is uncertain twice: the row difference at the target is the forecast with its bootstrap spread, and the
seed sd is the ladder's, estimated with finitely many degrees of freedom. Each draw takes a true difference and a
true seed sd from those, then K paired seeds, and applies the verdict's own rules (replication.seed_statistics and
replication.verdict_heads, its t test at Holm's strictest level alpha / m for the m claims of the table, as
report/tables/seed_plan.py plans): the probability is the share of draws judged `replicates`. No second power formula:
the verdict code itself is what is simulated. tests/report/forecast/test_ladder_forecast.py checks it against runs drawn
from a known law (docs/forecast.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from exoformer.report.stats import power as pw
from exoformer.report.stats import replication as rep

DRAWS = 5_000
"""Draws per seed count: the Monte Carlo error of a probability is at most 0.7 points."""
MAX_SEEDS_SEARCHED = 40
"""The K searched for 80%: P(replicates) need not grow with K (a tighter prediction interval can leave the paper's
value outside), so the counts are tried one by one."""


@dataclass(frozen=True, slots=True)
class VerdictForecast:
    probability: float
    """P(verdict `replicates`) with `seeds` seeds per row."""
    seeds: int
    seeds_for_80: int | None
    """The smallest K <= MAX_SEEDS_SEARCHED with P >= 80%; None when none reaches it."""
    best: tuple[int, float]
    """(K, P) of the most likely K searched."""


def replicate_probability(diff: float, diff_se: float, seed_sd: float, seed_dof: float, paper: float, seeds,
                          *, family: int = 1, alpha: float = pw.ALPHA, draws: int = DRAWS,
                          seed: int = 0) -> np.ndarray:
    """P(`replicates`) for each seed count in `seeds` (the same draws for every count: common random numbers)."""
    counts = np.atleast_1d(np.asarray(seeds, dtype=int))
    rng = np.random.default_rng(seed)
    true = diff + diff_se * rng.standard_normal(draws)
    sd = seed_sd * np.sqrt(seed_dof / rng.chisquare(seed_dof, draws)) if math.isfinite(seed_dof) else \
        np.full(draws, seed_sd)
    noise = rng.standard_normal((draws, int(counts.max())))
    out = []
    for k in counts:
        d = true[:, None] + sd[:, None] * noise[:, :k]
        s = rep.seed_statistics(d, alpha=alpha)
        p_adjusted = np.minimum(1.0, s.p * family)
        heads = rep.verdict_heads(s, paper, p_adjusted, mde=np.zeros(draws), alpha=alpha)
        out.append(float(np.mean(heads == rep.REPLICATES)))
    return np.array(out)


def forecast_verdict(diff: float, diff_se: float, seed_sd: float, seed_dof: float, paper: float, *, seeds: int,
                     family: int = 1, alpha: float = pw.ALPHA, draws: int = DRAWS, seed: int = 0) -> VerdictForecast:
    """P(`replicates`) at `seeds` seeds per row and the seeds per row that give it 80% (pw.TARGET_POWER)."""
    counts = np.arange(2, MAX_SEEDS_SEARCHED + 1)
    probs = replicate_probability(diff, diff_se, seed_sd, seed_dof, paper, counts, family=family, alpha=alpha,
                                  draws=draws, seed=seed)
    at = float(probs[seeds - 2]) if 2 <= seeds <= MAX_SEEDS_SEARCHED else (
        0.0 if seeds < 2 else float(replicate_probability(diff, diff_se, seed_sd, seed_dof, paper, [seeds],
                                                          family=family, alpha=alpha, draws=draws, seed=seed)[0]))
    enough = np.flatnonzero(probs >= pw.TARGET_POWER)
    best = int(np.argmax(probs))
    return VerdictForecast(probability=at, seeds=seeds, seeds_for_80=int(counts[enough[0]]) if len(enough) else None,
                           best=(int(counts[best]), float(probs[best])))
