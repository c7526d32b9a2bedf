"""Replication verdicts proved by simulation with known truth (exoformer/report/stats/replication.py, power.py).

Tables are simulated per item: row r, seed k, item j scores theta_j + effect_r + u_rk + e_rkj, with fixed item
difficulties theta shared by every row, seed effects u (normal, or Student t with 3 df scaled to unit variance)
correlated between the rows of one seed, and item noise e correlated between the rows on one item. The truth on
these items is the difference of the row effects. Monte Carlo standard errors are stated beside each bound;
every random generator is seeded.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.report.stats import power as pw
from exoformer.report.stats import replication as rep
from exoformer.report.stats.replication import (
    CONTRADICTS,
    DIRECTION_ONLY,
    EQUIVALENT,
    INCONCLUSIVE,
    NOT_POWERED,
    ONE_SEED,
    REPLICATES,
    SIZE_UNDETERMINED,
    VERDICTS,
    PooledVariance,
    compare,
    compare_all,
    headline,
    holm,
    item_resamples,
    paired_items,
    pooled_seed_variance,
    seed_statistics,
    verdict_heads,
)

N_ITEMS = 40
SEED_SD = 0.3
"""sd of one row's seed effect, in units of one item's noise."""
SEED_RHO, ITEM_RHO = 0.3, 0.8
"""Correlation of two rows' seed effects within a seed, and of their item noise on one item."""
SIGNIFICANT = (*rep.DIRECTION_HOLDS, CONTRADICTS)
"""Verdicts that assert a direction (what Holm keeps at 5% per family when the rows do not differ)."""
REPLICATES_MC = 4000
"""Replicates per coverage check: Monte Carlo SE of a 95% coverage sqrt(.95 * .05 / 4000) = 0.0034, so the
93-97% band is +-5.8 SE around the nominal value."""


def _seed_effects(rng: np.random.Generator, size: tuple[int, ...], tails: str) -> np.ndarray:
    if tails == "t3":
        return rng.standard_t(3, size) / math.sqrt(3.0)  # unit variance
    return rng.normal(0.0, 1.0, size)


def simulate_rows(rng: np.random.Generator, *, replicates: int, effects: list[float], seeds: int,
                  tails: str = "normal", n_items: int = N_ITEMS) -> np.ndarray:
    """Per-item scores (replicates, rows, seeds, items) of a table with these row effects."""
    rows = len(effects)
    theta = rng.normal(0.0, 1.0, n_items)
    shared_u = _seed_effects(rng, (replicates, 1, seeds, 1), tails)
    own_u = _seed_effects(rng, (replicates, rows, seeds, 1), tails)
    u = SEED_SD * (math.sqrt(SEED_RHO) * shared_u + math.sqrt(1 - SEED_RHO) * own_u)
    shared_e = rng.normal(0.0, 1.0, (replicates, 1, seeds, n_items))
    own_e = rng.normal(0.0, 1.0, (replicates, rows, seeds, n_items))
    e = math.sqrt(ITEM_RHO) * shared_e + math.sqrt(1 - ITEM_RHO) * own_e
    return theta + np.asarray(effects, dtype=float)[None, :, None, None] + u + e


def true_sd_of_difference(n_items: int = N_ITEMS) -> float:
    """sd of one seed's difference of two rows' item means under `simulate_rows` (exact)."""
    return math.sqrt(2 * SEED_SD**2 * (1 - SEED_RHO) + 2 * (1 - ITEM_RHO) / n_items)


def seed_diffs(scores: np.ndarray, i: int, j: int) -> np.ndarray:
    """Per-seed differences (replicates, seeds) of row i - row j."""
    return (scores[:, i] - scores[:, j]).mean(axis=-1)


# ------------------------------------------------------------------------------------------------ coverage

@pytest.mark.parametrize("tails", ["normal", "t3"])
@pytest.mark.parametrize("seeds", [3, 5, 10])
def test_seed_interval_covers_the_truth_95_percent(tails: str, seeds: int) -> None:
    rng = np.random.default_rng(1000 + seeds + (7 if tails == "t3" else 0))
    truth = 0.25
    scores = simulate_rows(rng, replicates=REPLICATES_MC, effects=[truth, 0.0], seeds=seeds, tails=tails)
    s = seed_statistics(seed_diffs(scores, 0, 1))
    coverage = np.mean((s.ci[0] <= truth) & (truth <= s.ci[1]))
    assert 0.93 <= coverage <= 0.97, coverage  # MC SE 0.0034


def test_seed_interval_covers_on_binary_items_correlated_between_rows() -> None:
    """Accuracy-like 0/1 items: both rows answer item j of seed k from one uniform draw (strongly correlated)."""
    rng = np.random.default_rng(7)
    reps, seeds, n = REPLICATES_MC, 3, 200
    p_item = rng.uniform(0.3, 0.7, n)
    delta = 0.02
    u = rng.normal(0.0, 0.01, (reps, 2, seeds, 1))  # seed effects on the probability scale; clipping never binds
    uniform = rng.uniform(size=(reps, 1, seeds, n))
    prob = p_item + np.array([delta, 0.0])[None, :, None, None] + u
    scores = (uniform < prob).astype(float)
    s = seed_statistics(seed_diffs(scores, 0, 1))
    coverage = np.mean((s.ci[0] <= delta) & (delta <= s.ci[1]))
    assert 0.93 <= coverage <= 0.97, coverage  # MC SE 0.0034


@pytest.mark.parametrize("seeds", [3, 10])
def test_prediction_interval_holds_one_new_seed_95_percent(seeds: int) -> None:
    """The paper's single-seed difference, drawn from the same process, lands inside the PI 95% of the time."""
    rng = np.random.default_rng(2000 + seeds)
    scores = simulate_rows(rng, replicates=REPLICATES_MC, effects=[0.25, 0.0], seeds=seeds + 1)
    d = seed_diffs(scores, 0, 1)
    s = seed_statistics(d[:, :seeds])
    paper = d[:, seeds]
    coverage = np.mean((s.pi[0] <= paper) & (paper <= s.pi[1]))
    assert 0.93 <= coverage <= 0.97, coverage  # MC SE 0.0034
    # the old rule (the paper's single seed against the interval for the mean) misses it far more often
    assert np.mean((s.ci[0] <= paper) & (paper <= s.ci[1])) < 0.90


def test_prediction_interval_with_heavy_tailed_seeds_stays_near_95() -> None:
    """With t(3) seed effects one new seed is a heavy-tailed draw and the sd estimate from 10 seeds is skewed:
    the PI covers a little under 95% (about 93.5%); the bound documents how far."""
    rng = np.random.default_rng(3010)
    scores = simulate_rows(rng, replicates=REPLICATES_MC, effects=[0.25, 0.0], seeds=11, tails="t3")
    d = seed_diffs(scores, 0, 1)
    s = seed_statistics(d[:, :10])
    coverage = np.mean((s.pi[0] <= d[:, 10]) & (d[:, 10] <= s.pi[1]))
    assert 0.92 <= coverage <= 0.97, coverage  # MC SE 0.0038


def test_pooled_seed_variance_interval_covers() -> None:
    """Three seeds, six rows: the pooled residual variance (10 df) gives a t interval that still covers 95%."""
    rng = np.random.default_rng(11)
    effects = [0.25, 0.0, 0.1, -0.2, 0.3, 0.05]
    scores = simulate_rows(rng, replicates=REPLICATES_MC, effects=effects, seeds=3).mean(axis=-1)
    pooled = [pooled_seed_variance(table) for table in scores]  # (rows, seeds) of each replicate
    assert {p.df for p in pooled} == {10.0}
    d = scores[:, 0] - scores[:, 1]
    s = seed_statistics(d, pooled=PooledVariance(var=np.array([p.var for p in pooled]), df=10.0))
    coverage = np.mean((s.ci[0] <= 0.25) & (0.25 <= s.ci[1]))
    assert 0.93 <= coverage <= 0.97, coverage  # MC SE 0.0034
    own = seed_statistics(d)
    # t(10) instead of t(2) and a steadier sd: expected median width ratio about 0.6
    assert np.median(s.ci[1] - s.ci[0]) < 0.7 * np.median(own.ci[1] - own.ci[0])


# ------------------------------------------------------------------------------------------------ Holm

FAMILY = [(0, 1, 1.47), (0, 2, 0.5), (0, 3, -0.3), (2, 1, 2.0)]
"""(minuend row, subtrahend row, paper's difference) of a family sharing rows, as a table's claims do."""


@pytest.mark.parametrize("tails", ["normal", "t3"])
def test_holm_keeps_false_directional_verdicts_at_5_percent(tails: str) -> None:
    rng = np.random.default_rng(42 if tails == "normal" else 43)
    families = 20_000  # MC SE of a 5% family rate: sqrt(.05 * .95 / 20000) = 0.0015
    scores = simulate_rows(rng, replicates=families, effects=[0.0] * 4, seeds=3, tails=tails, n_items=8)
    heads, raw_heads = [], []
    ps = []
    per_claim = []
    for i, j, paper in FAMILY:
        s = seed_statistics(seed_diffs(scores, i, j))
        per_claim.append((s, paper))
        ps.append(s.p)
    adjusted = holm(np.stack(ps, axis=1))
    for c, (s, paper) in enumerate(per_claim):
        mde = pw.detectable_noncentrality(2.0, alpha=0.05 / len(FAMILY)) * s.sd / math.sqrt(3)
        heads.append(verdict_heads(s, paper, adjusted[:, c], mde=mde))
        raw_heads.append(verdict_heads(s, paper, s.p, mde=mde))
    false = np.isin(np.stack(heads, axis=1), SIGNIFICANT).any(axis=1).mean()
    unadjusted = np.isin(np.stack(raw_heads, axis=1), SIGNIFICANT).any(axis=1).mean()
    # Holm bounds the rate by 5%; with these moderately correlated claims it sits near the bound
    # (here 0.048 normal, 0.044 t3)
    assert false <= 0.05 + 3 * 0.0015, false
    assert unadjusted > 0.10, unadjusted  # without Holm the family's rate is well above 5%


def test_holm_adjustment_by_hand() -> None:
    p = np.array([[0.01, 0.04, 0.03, 0.005], [0.2, np.nan, 0.01, 0.5]])
    got = holm(p)
    np.testing.assert_allclose(got[0], [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(got[1], [0.4, np.nan, 0.03, 0.5])  # three tests: one seed stays out


# ------------------------------------------------------------------------------------------------ power

@pytest.mark.parametrize("seeds", [3, 5, 10])
def test_detection_rate_matches_the_power_formula(seeds: int) -> None:
    rng = np.random.default_rng(500 + seeds)
    sd = true_sd_of_difference()
    effect = 0.9 * pw.minimum_detectable_effect(sd=sd, seeds=seeds, df=seeds - 1)  # power a little under 80%
    formula = float(pw.power_at(effect, sd=sd, seeds=seeds, df=seeds - 1))
    scores = simulate_rows(rng, replicates=REPLICATES_MC, effects=[effect, 0.0], seeds=seeds)
    s = seed_statistics(seed_diffs(scores, 0, 1))
    detected = np.mean(s.p < 0.05)
    assert abs(detected - formula) <= 0.03, (detected, formula)  # MC SE <= 0.0079: 0.03 is 3.8 SE
    assert 0.6 < formula < 0.8
    # the verdict's own power (significant in the paper's direction, one tail) is what its heads give
    heads = verdict_heads(s, effect, s.p, mde=np.zeros(s.p.shape))
    own = rep.direction_power(effect, sd=sd, seeds=seeds)
    assert abs(np.isin(heads, rep.DIRECTION_HOLDS).mean() - own) <= 0.03, own


def test_seeds_needed_is_the_smallest_count_with_80_percent_power() -> None:
    sd, effect = 1.0, 0.7
    k = pw.seeds_needed(effect, sd=sd)
    assert k is not None
    assert float(pw.power_at(effect, sd=sd, seeds=k, df=k - 1)) >= 0.8
    assert float(pw.power_at(effect, sd=sd, seeds=k - 1, df=k - 2)) < 0.8
    assert pw.seeds_needed(0.0, sd=sd) is None
    assert pw.seeds_needed(1e-6, sd=sd) is None  # more than MAX_SEEDS


def test_power_formula_one_seed_sd_detects_one_sd_18_percent_with_three_seeds() -> None:
    """The figure of the issue: with 3 seeds a 1-sd effect is detected about 18% of the time."""
    assert 0.15 < float(pw.power_at(1.0, sd=1.0, seeds=3, df=2)) < 0.22


def variance_components(x: np.ndarray) -> tuple[float, float, float]:
    """(seed_var, item_var, item_effect_var) of a seeds x items table of per-item differences: a two-way analysis of
    variance with one score per cell, how `power --effect`'s --seed-sd and --item-sd are measured from runs.

    Expected mean squares: MS_seeds = item_var + n_items seed_var, MS_items = item_var + seeds item_effect_var,
    MS_residual = item_var."""
    k, n = x.shape
    grand, seed_means, item_means = x.mean(), x.mean(axis=1), x.mean(axis=0)
    ms_seeds = n * float(np.sum((seed_means - grand) ** 2)) / (k - 1)
    ms_items = k * float(np.sum((item_means - grand) ** 2)) / (n - 1)
    ms_resid = float(np.sum((x - seed_means[:, None] - item_means[None, :] + grand) ** 2)) / ((k - 1) * (n - 1))
    return max(0.0, (ms_seeds - ms_resid) / n), ms_resid, max(0.0, (ms_items - ms_resid) / k)


def test_variance_components_recover_the_simulated_ones() -> None:
    """The two parts of the sd `power --effect` plans with, sqrt(seed_sd^2 + item_sd^2 / items), are what seeds x
    items scores separate."""
    rng = np.random.default_rng(3)
    seeds, n, seed_sd, item_sd = 200, 400, 0.5, 2.0
    d = 0.1 + rng.normal(0.0, seed_sd, (seeds, 1)) + rng.normal(0.0, 1.0, n) + rng.normal(0.0, item_sd, (seeds, n))
    seed_var, item_var, item_effect_var = variance_components(d)
    assert abs(math.sqrt(seed_var) - seed_sd) < 0.06  # sd of a sd over 200 seeds: about 0.025
    assert abs(math.sqrt(item_var) - item_sd) < 0.02
    assert abs(math.sqrt(item_effect_var) - 1.0) < 0.1
    assert abs(math.sqrt(seed_var + item_var / n) - math.sqrt(seed_sd**2 + item_sd**2 / n)) < 0.06


# ------------------------------------------------------------------------------------------------ verdicts

def _pair(rng: np.random.Generator, seeds: int, effect: float, *, n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    scores = simulate_rows(rng, replicates=1, effects=[effect, 0.0], seeds=seeds, n_items=n)[0]
    return scores[0], scores[1]


def test_one_seed_is_always_one_seed() -> None:
    rng = np.random.default_rng(5)
    pooled = PooledVariance(var=0.01, df=12.0)
    for effect in (0.0, 0.5, 50.0, -50.0):
        a, b = _pair(rng, 1, effect)
        for kwargs in ({}, {"pooled": pooled}, {"margin": 1.0}):
            c = compare(a, b, 0.3, kind="accuracy", **kwargs)
            assert c.head == ONE_SEED and c.verdict.startswith("one seed: these two trained models")
            assert "no verdict about the architecture" in c.verdict and c.p is None
            assert c.item_ci is not None and c.item_ci[0] < c.estimate < c.item_ci[1]
    many = compare_all([_pair(rng, 1, 9.0) + (1.0,), _pair(rng, 3, 9.0) + (1.0,)], kind="loss")
    assert many[0].head == ONE_SEED and many[1].p_adjusted == many[1].p  # one seed is no member of the family
    pooled_many = compare_all([_pair(rng, 1, 9.0) + (1.0,), _pair(rng, 3, 9.0) + (1.0,)], kind="loss",
                              pooled=pooled)
    assert pooled_many[0].head == ONE_SEED and pooled_many[0].p is None
    assert pooled_many[1].p_adjusted == pooled_many[1].p  # not even with a pooled variance


def test_each_verdict_arises_where_its_rule_says() -> None:
    rng = np.random.default_rng(9)
    a, b = _pair(rng, 5, 5.0)  # a true difference of 5 (about 15 sd of one seed's difference)
    est = float(np.mean(a - b))
    assert compare(a, b, est, kind="accuracy").head == REPLICATES
    big = compare(a, b, 10 * est, kind="accuracy")
    assert big.head == DIRECTION_ONLY and "smaller than the paper's" in big.verdict
    small = compare(a, b, 0.05 * est, kind="accuracy")
    assert small.head == DIRECTION_ONLY and "larger than the paper's" in small.verdict
    assert compare(a, b, -est, kind="accuracy").head == CONTRADICTS
    a0, b0 = _pair(rng, 3, 0.0)
    weak = compare(a0, b0, 0.1, kind="loss")
    assert weak.head == NOT_POWERED and f"{weak.seeds_needed} seeds per row" in weak.verdict
    assert weak.mde is not None and 0.1 < weak.mde and "at the paper's effect (+0.1)" in weak.verdict
    strong = compare(a0, b0, 100.0, kind="loss")
    assert strong.head in (INCONCLUSIVE, CONTRADICTS, DIRECTION_ONLY)
    if strong.head == INCONCLUSIVE:
        assert strong.mde < 100.0
    a1, b1 = _pair(rng, 10, 0.0)
    assert compare(a1, b1, 0.0, kind="loss", margin=2.0).head == EQUIVALENT
    assert compare(a1, b1, 0.0, kind="loss", margin=1e-4).head == NOT_POWERED
    # the size holds the paper's value but cannot rule out 3x it: 1.2x our estimate with our sd of about 1/3
    a2, b2 = _pair(rng, 3, 1.0)
    est2 = float(np.mean(a2 - b2))
    open_size = compare(a2, b2, est2, kind="accuracy")
    assert open_size.head == SIZE_UNDETERMINED and "the direction holds" in open_size.verdict, open_size.verdict
    for c in (big, small, weak, strong, open_size):
        assert c.verdict.split(":")[0] in VERDICTS


def test_headline_counts_the_adjusted_verdicts() -> None:
    rng = np.random.default_rng(19)
    a, b = _pair(rng, 5, 5.0)
    est = float(np.mean(a - b))
    out = compare_all([(a, b, est), (a, b, -est), (a[:1], b[:1], est)], kind="accuracy")
    assert headline(out) == "1 of 3 claims replicate (1 contradicts, 1 one seed)"


def test_comparison_reports_intervals_and_methods() -> None:
    rng = np.random.default_rng(13)
    a, b = _pair(rng, 4, 0.3)
    c = compare(a, b, 0.3, kind="accuracy")
    d = (a - b).mean(axis=1)
    half = 3.182446305284263 * d.std(ddof=1) / 2.0  # t(0.975, 3) * sd / sqrt(4)
    np.testing.assert_allclose(c.ci, (d.mean() - half, d.mean() + half))
    np.testing.assert_allclose(c.pi, (d.mean() - half * math.sqrt(5), d.mean() + half * math.sqrt(5)))
    # the size: ours - paper's +- [t(0.975, 3) sd sqrt(1 + 1/4) + the default tolerance 0.1 x 0.3]
    gap = d.mean() - 0.3
    np.testing.assert_allclose(c.size, (gap - half * math.sqrt(5) - 0.03, gap + half * math.sqrt(5) + 0.03))
    assert c.df == 3 and "3 df" in c.ci_method and "one shared draw" in c.item_method and c.tolerance == 0.03
    line = c.line()
    assert line.startswith("paper +0.3, ours ") and c.verdict in line and "ours - paper's " in line
    assert "3 df" in c.methods() and "sqrt(9 + 1/4)" in c.methods()
    wide = compare(a, b, 0.3, kind="accuracy", tolerance=0.5)
    assert wide.size[1] - wide.size[0] == pytest.approx(c.size[1] - c.size[0] + 2 * (0.5 - 0.03))


def test_compare_all_matches_the_vectorised_rules() -> None:
    """The per-claim path (compare_all) and the batch path the simulations use give the same verdicts."""
    rng = np.random.default_rng(17)
    for _ in range(10):
        scores = simulate_rows(rng, replicates=1, effects=list(rng.normal(0, 0.3, 4)), seeds=3)
        claims = [(scores[0, i], scores[0, j], paper) for i, j, paper in FAMILY]
        got = [c.head for c in compare_all(claims, kind="accuracy", item_resamples=None)]
        stats_ = [seed_statistics(seed_diffs(scores, i, j)) for i, j, _ in FAMILY]
        adjusted = holm(np.stack([s.p for s in stats_], axis=1))[0]
        want = [verdict_heads(s, paper, adjusted[c:c + 1],
                              mde=pw.detectable_noncentrality(2.0, alpha=0.05 / 4) * s.sd / math.sqrt(3))[0]
                for c, (s, (_, _, paper)) in enumerate(zip(stats_, FAMILY, strict=True))]
        assert got == want


# ------------------------------------------------------------------------------------------------ items

def test_item_resampling_is_one_shared_draw_for_seeds_and_rows() -> None:
    """Row a is better on some items in every seed (an item effect on the difference, sd 1): one shared draw
    moves all seeds together, so the figure's sd is sd(item effect) / sqrt(items); independent draws per seed
    would shrink it by sqrt(seeds)."""
    rng = np.random.default_rng(21)
    seeds, n = 4, 500
    item_effect = rng.normal(0.0, 1.0, n)
    b = rng.normal(0.0, 1.0, (seeds, n))
    a = b + 0.2 + item_effect + rng.normal(0.0, 0.1, (seeds, n))
    c = compare(a, b, 0.2, kind="accuracy", item_resamples=4000, resample_seed=1)
    per_item = (a - b).mean(axis=0)
    analytic = per_item.std(ddof=0) / math.sqrt(n)
    assert abs(c.item_se / analytic - 1.0) < 0.05  # relative MC SE of a sd over 4000 resamples: 0.011
    assert c.item_se > 1.5 * item_effect.std() / math.sqrt(n * seeds)  # not per-seed draws


def test_one_item_has_no_item_figure() -> None:
    c = compare(np.array([[1.0], [2.0], [1.5]]), np.zeros((3, 1)), 1.0, kind="loss")
    assert c.item_se is None and c.item_ci is None and "one item" in c.item_method


def test_item_resampling_keeps_strata() -> None:
    """Items constant within each stratum: resampling within strata cannot move the mean; across them it would."""
    per_item = np.repeat([0.0, 1.0, 5.0], [10, 20, 30])
    strata = np.repeat([0, 1, 2], [10, 20, 30])
    rng = np.random.default_rng(0)
    assert np.ptp(item_resamples(per_item, resamples=500, strata=strata, rng=rng)) < 1e-12
    assert np.ptp(item_resamples(per_item, resamples=500, rng=rng)) > 0.1


@pytest.mark.parametrize("bad", [
    {"a": np.ones((3, 4)), "b": np.ones((3, 5))},
    {"a": np.ones(3), "b": np.ones(3)},
    {"a": np.full((3, 4), np.nan), "b": np.ones((3, 4))},
    {"kind": "perplexity"},
    {"item_resamples": 10},
    {"item_resamples": 10**9},
    {"paper": 0.0},
    {"margin": -1.0},
    {"alpha": 0.7},
    {"tolerance": -1.0},
    {"tolerance": float("nan")},
])
def test_bad_input_is_one_user_error(bad: dict) -> None:
    args = {"a": np.ones((3, 4)), "b": np.zeros((3, 4)), "paper": 1.0, "kind": "accuracy", **bad}
    with pytest.raises(UserError):
        compare(args.pop("a"), args.pop("b"), args.pop("paper"), **args)


# ------------------------------------------------------------------------------------------------ power verb

def test_power_verb_prints_seeds_and_hours(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["power", "--effect", "table1 avg6 dynamic - gated=1.47", "--effect", "b=2.13", "--seed-sd", "0.9",
               "--item-sd", "0", "--hours-per-run", "10"])
    out = capsys.readouterr().out
    k = rep.seeds_for_direction(1.47, sd=0.9, family=2)
    assert rc == 0 and f"the +1.47 table1 avg6 dynamic - gated claim needs {k} seeds per row" in out
    assert "for 80% power at its effect (+1.47)" in out and "size: no count of our seeds would" in out
    assert f"{2 * k * 10:.1f} GPU-hours" in out
    assert main(["power", "--effect", "x=abc", "--seed-sd", "1"]) == 2
    assert "error: --effect" in capsys.readouterr().err


def test_paired_items_weigh_tasks_equally_and_keep_common_documents() -> None:
    def run(acc_x: float, acc_y: float) -> dict:
        return {"x": {d: float(d < 10 * acc_x) for d in range(10)},
                "y": {d: float(d < 100 * acc_y) for d in range(100)}}

    a = [run(0.5, 0.2), run(0.6, 0.2)]
    b = [run(0.3, 0.1), run(0.3, 0.1)]
    b[1]["y"].pop(99)  # one document not scored by one run: dropped from every run
    xa, xb, strata = paired_items(a, b, tasks=["x", "y"])
    assert xa.shape == (2, 109) and np.bincount(strata).tolist() == [10, 99]
    # each row's value is the equal-weight mean of its two task accuracies, in percent
    np.testing.assert_allclose(xa.mean(axis=1), [100 * (0.5 + 20 / 99) / 2, 100 * (0.6 + 20 / 99) / 2])
    c = compare(xa, xb, 10.0, kind="accuracy", item_strata=strata)
    assert c.estimate == pytest.approx(float(xa.mean() - xb.mean()))
    with pytest.raises(UserError):
        paired_items(a, b, tasks=["z"])
    with pytest.raises(UserError):
        compare(xa, xb, 10.0, kind="accuracy", item_strata=strata[:-1])
