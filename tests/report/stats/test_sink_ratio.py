"""The attention-sink ratio (exoformer/report/stats/sink_ratio.py): ratio of means, with a delta-method t interval.

Sinks are log-normal per seed with known means; the truth is the ratio of the means.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from exoformer.errors import UserError
from exoformer.report.stats.sink_ratio import sink_ratio

SIGMA = 0.15


def draw(rng: np.random.Generator, mean: float, shape: tuple[int, ...], sigma: float = SIGMA) -> np.ndarray:
    """Log-normal values with this mean."""
    return rng.lognormal(math.log(mean) - sigma**2 / 2, sigma, shape)


@pytest.mark.parametrize("seeds", [3, 10])
def test_interval_covers_the_ratio_of_mean_sinks(seeds: int) -> None:
    """2000 replicates: MC SE 0.0049, the 93-97% band is +-4 SE."""
    rng = np.random.default_rng(seeds)
    gated, row = draw(rng, 0.2, (2000, seeds)), draw(rng, 0.1, (2000, seeds))
    hits = 0
    for x, y in zip(gated, row, strict=True):
        ci = sink_ratio(x, y).ci
        hits += int(ci[0] <= 2.0 <= ci[1])
    assert 0.93 <= hits / 2000 <= 0.97, hits / 2000


def test_ratio_of_means_is_consistent_where_the_mean_of_ratios_is_not() -> None:
    rng = np.random.default_rng(7)
    gated, row = draw(rng, 0.2, 200_000, 0.5), draw(rng, 0.1, 200_000, 0.5)
    assert sink_ratio(gated, row).estimate == pytest.approx(2.0, rel=0.01)
    assert np.mean(gated / row) > 2.4  # E[x / y] = 2 exp(sigma^2) = 2.57: Jensen's bias


def test_one_seed_has_no_interval_and_bad_input_is_a_user_error() -> None:
    one = sink_ratio([0.2], [0.1])
    assert one.estimate == pytest.approx(2.0) and one.ci is None and "no interval" in one.text()
    with pytest.raises(UserError):
        sink_ratio([0.2, 0.3], [0.1])
    with pytest.raises(UserError):
        sink_ratio([0.2], [0.0])
