"""Forecast verdicts: the probability that a run at the target with K seeds per row gets the verdict `replicates`
(exoformer/report/stats/replication.py) for a paper difference, from a ladder's forecast of that difference, and
the probability that its direction holds.

The truth is uncertain twice: the row difference at the target is the forecast with its bootstrap spread, and the
seed sd is the ladder's, estimated with finitely many degrees of freedom. Both probabilities come from the
verdict's own functions: `replicates` from replication.verdict_rates (draws of a true difference and a true seed
sd, then K paired seeds judged by replication.seed_statistics and verdict_heads at Holm's strictest level
alpha / m), the direction from replication.direction_power and seeds_for_direction, the very numbers `power`
prints for the same claim and spread. No second formula. tests/report/forecast/test_ladder_forecast.py checks it
against runs drawn from a known law (docs/forecast.md).
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
"""The K searched for 80%: P(replicates) need not grow with K (a true difference away from the paper's value is
shown different with more seeds), so the counts are tried one by one."""


@dataclass(frozen=True, slots=True)
class VerdictForecast:
    probability: float
    """P(verdict `replicates`) with `seeds` seeds per row."""
    seeds: int
    seeds_for_80: int | None
    """The smallest K <= MAX_SEEDS_SEARCHED with P(replicates) >= 80%; None when none reaches it."""
    best: tuple[int, float]
    """(K, P) of the most likely K searched."""
    direction: float = math.nan
    """P(the direction holds: `replicates`, `size undetermined` or `direction only`) with `seeds` seeds per row."""
    seeds_for_direction: int | None = None
    """The smallest K giving the direction 80% (replication.seeds_for_direction: what `power` prints)."""


def replicate_probability(diff: float, diff_se: float, seed_sd: float, seed_dof: float, paper: float, seeds,
                          *, family: int = 1, alpha: float = pw.ALPHA, draws: int = DRAWS,
                          seed: int = 0) -> np.ndarray:
    """P(`replicates`) for each seed count in `seeds` (the same draws for every count: common random numbers)."""
    return rep.verdict_rates(diff, sd=seed_sd, paper=paper, seeds=seeds, family=family, alpha=alpha,
                             sd_df=seed_dof, effect_se=diff_se, draws=draws, seed=seed)[rep.REPLICATES]


def forecast_verdict(diff: float, diff_se: float, seed_sd: float, seed_dof: float, paper: float, *, seeds: int,
                     family: int = 1, alpha: float = pw.ALPHA, draws: int = DRAWS, seed: int = 0) -> VerdictForecast:
    """P(`replicates`) at `seeds` seeds per row and the seeds per row that give it 80% (pw.TARGET_POWER); the
    same for the direction alone."""
    counts = np.arange(2, MAX_SEEDS_SEARCHED + 1)
    probs = replicate_probability(diff, diff_se, seed_sd, seed_dof, paper, counts, family=family, alpha=alpha,
                                  draws=draws, seed=seed)
    at = float(probs[seeds - 2]) if 2 <= seeds <= MAX_SEEDS_SEARCHED else (
        0.0 if seeds < 2 else float(replicate_probability(diff, diff_se, seed_sd, seed_dof, paper, [seeds],
                                                          family=family, alpha=alpha, draws=draws, seed=seed)[0]))
    enough = np.flatnonzero(probs >= pw.TARGET_POWER)
    best = int(np.argmax(probs))
    toward = math.copysign(1.0, paper) * diff  # the true difference in the paper's direction
    direction = rep.direction_power(toward, sd=seed_sd, seeds=seeds, family=family, alpha=alpha, sd_df=seed_dof,
                                    effect_se=diff_se)
    need = rep.seeds_for_direction(toward, sd=seed_sd, family=family, alpha=alpha, sd_df=seed_dof,
                                   effect_se=diff_se)
    return VerdictForecast(probability=at, seeds=seeds, seeds_for_80=int(counts[enough[0]]) if len(enough) else None,
                           best=(int(counts[best]), float(probs[best])), direction=direction,
                           seeds_for_direction=need)
