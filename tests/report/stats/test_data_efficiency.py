"""Data efficiency with an interval (exoformer/report/stats/data_efficiency.py), proved on curves with a known multiplier.

Validation curves follow a power law L(t) = 2.8 + 5 (s t / 1e7)^-0.35 logged every 1e7 tokens, where the scale s
is a run's efficiency: a reference at s / m needs m times the tokens of a row at s to reach any loss, so the
row's true multiplier is m. Seeds draw log s from a normal (a seed's efficiency), points add measurement noise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from exoformer.errors import UserError
from exoformer.report.stats.data_efficiency import (
    ABOVE,
    BELOW,
    EXACT,
    STABLE,
    WHOLE,
    Curve,
    data_efficiency,
    multiplier,
    smooth,
    tokens_to_target,
)

GRID = np.arange(1, 101) * 1e7
POINT_NOISE = 0.003


def loss_at(tokens: np.ndarray, scale: float) -> np.ndarray:
    return 2.8 + 5.0 * (tokens * scale / 1e7) ** -0.35


def make_curve(scale: float, rng: np.random.Generator, *, decay_start: float | None = None,
               decay_gain: float = 0.08) -> Curve:
    """A noisy curve; with `decay_start`, a WSD decay lowers the loss linearly by `decay_gain` by the end."""
    y = loss_at(GRID, scale) + rng.normal(0.0, POINT_NOISE, GRID.size)
    if decay_start is not None:
        y = y - decay_gain * np.clip((GRID - decay_start) / (GRID[-1] - decay_start), 0.0, None)
    return Curve.of(GRID, y)


def seeds_of(rng: np.random.Generator, m: float, seeds: int, *, sd: float = 0.03,
             **kwargs: float) -> tuple[list[Curve], list[Curve]]:
    """(row curves, reference curves) of `seeds` paired seeds, the row m times as efficient."""
    row = [make_curve(math.exp(rng.normal(0.0, sd)), rng, **kwargs) for _ in range(seeds)]
    ref = [make_curve(math.exp(rng.normal(0.0, sd)) / m, rng, **kwargs) for _ in range(seeds)]
    return row, ref


def naive_first_crossing(curve: Curve, target: float) -> float:
    """The rule this module replaces: the first logged point at or below the target, unsmoothed."""
    i = int(np.flatnonzero(curve.loss <= target)[0])
    if i == 0:
        return float(curve.tokens[0])
    t0, t1, y0, y1 = curve.tokens[i - 1], curve.tokens[i], curve.loss[i - 1], curve.loss[i]
    return float(t0 + (t1 - t0) * (y0 - target) / (y0 - y1))


def test_one_early_dip_leaves_the_multiplier_unchanged() -> None:
    rng = np.random.default_rng(0)
    row, ref = seeds_of(rng, 1.3, 3)
    clean = multiplier(row, ref)
    target = float(ref[0].loss[-1])
    dipped_loss = row[0].loss.copy()
    dipped_loss[8] = target - 0.2  # one noisy evaluation far below the target, at 9% of the run
    dipped = [Curve.of(GRID, dipped_loss), *row[1:]]
    with_dip = multiplier(dipped, ref)
    assert clean.ci is not None and clean.ci[0] <= with_dip.estimate <= clean.ci[1]
    assert clean.ci[0] <= 1.3 <= clean.ci[1]
    assert with_dip.per_seed[0] == pytest.approx(clean.per_seed[0], rel=1e-9)  # the median removes it exactly
    naive = float(ref[0].tokens[-1]) / naive_first_crossing(dipped[0], target)
    assert naive > 5.0  # first crossing at the dip: the unsmoothed rule reads a many-fold multiplier


def test_a_curve_that_never_reaches_the_target_gives_a_bound() -> None:
    rng = np.random.default_rng(1)
    row, ref = seeds_of(rng, 0.6, 3)  # the row is slower: it never reaches the reference's final loss
    eff = multiplier(row, ref)
    assert all(r.bound == ABOVE for r in eff.reaches)
    assert all(r.text().startswith("> ") for r in eff.reaches)
    assert eff.bound == "<" and eff.ci is None and eff.estimate is not None and eff.estimate <= 1.0
    assert eff.text().startswith("< ") and "never reached the target" in eff.text() and "not run" not in eff.text()


def test_a_curve_below_the_target_at_its_first_point_gives_a_lower_bound() -> None:
    rng = np.random.default_rng(2)
    row, ref = seeds_of(rng, 300.0, 2)  # the reference's final loss is what the row starts at
    eff = multiplier(row, ref)
    assert {r.bound for r in eff.reaches} == {BELOW}
    assert eff.bound == ">" and eff.text().startswith("> ")


def test_wsd_decay_caps_the_whole_run_multiplier_but_not_the_stable_phase() -> None:
    rng = np.random.default_rng(3)
    decay_start = 8e8  # the last 20% of the run decays
    row, ref = seeds_of(rng, 1.3, 4, decay_start=decay_start)
    out = data_efficiency(row, ref, decay_start=decay_start)
    stable, whole = out[STABLE], out[WHOLE]
    assert stable.ci is not None and stable.ci[0] <= 1.3 <= stable.ci[1]
    assert whole.estimate is not None and whole.estimate <= 1.0 / (1.0 - 0.2) + 0.01  # crossed during the decay
    assert all(r.bound == EXACT for r in whole.reaches) and all(r.tokens >= decay_start for r in whole.reaches)


def test_multiplier_interval_covers_the_true_multiplier() -> None:
    """95% t interval on the logs over 3 paired seeds. 2000 replicates: MC SE sqrt(.95 * .05 / 2000) = 0.0049,
    the 93-97% band is +-4 SE."""
    rng = np.random.default_rng(4)
    reps, hits = 2000, 0
    for _ in range(reps):
        row, ref = seeds_of(rng, 1.5, 3)
        eff = multiplier(row, ref)
        hits += int(eff.ci is not None and eff.ci[0] <= 1.5 <= eff.ci[1])
    assert 0.93 <= hits / reps <= 0.97, hits / reps


def test_smoothing_removes_one_point_and_makes_the_curve_monotone() -> None:
    y = np.array([5.0, 4.5, 4.2, 1.0, 3.9, 3.8, 3.85, 3.7])
    s = smooth(y)
    assert np.all(np.diff(s) <= 0) and s.min() > 3.6
    # the dip at 4 tokens becomes the median of its neighbourhood (3.9): the crossing of 3.95 lies between 4.2
    # (3 tokens) and 3.9 (4 tokens), at 3.83, where the raw curve would cross at 3.08 on its way to the dip
    assert tokens_to_target(Curve.of(np.arange(1, 9), y), 3.95).tokens == pytest.approx(3 + 0.25 / 0.3)


def test_bad_curves_are_one_user_error() -> None:
    with pytest.raises(UserError):
        Curve.of([1, 3, 2], [3.0, 2.0, 1.0])
    with pytest.raises(UserError):
        Curve.of([1, 2], [3.0, float("nan")])
    rng = np.random.default_rng(5)
    row, ref = seeds_of(rng, 1.3, 2)
    with pytest.raises(UserError):
        multiplier(row, ref[:1])
    with pytest.raises(UserError):
        data_efficiency(row, ref, decay_start=-1.0)
    with pytest.raises(UserError):
        multiplier(row, ref, end=1.0)  # no point before the end
