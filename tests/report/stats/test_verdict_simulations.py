"""Why a claim's verdict rests on its own paired seeds, and why one Holm family covers all a command prints:
simulations with known truth (issue 42, items 1 and 8), through exoformer/report/stats/replication.py's batch
functions (seed_statistics, pooled_seed_variance, holm, verdict_heads).

A table is simulated as each row's per-seed value (its mean over items): row r, seed k scores
effect_r + c_k + u_rk, with c_k the data order of seed k shared by every row (it cancels in a paired difference)
and u_rk the row's own seed scatter. Every true effect is 0 (the null), so any directional verdict is false and
every 95% interval should cover 0. The claims of a table share a row, as Table 1's do (Dynamic E-ExoFormer against
Gated and Base, avg6 and perplexity). `pytest -s` prints the before/after numbers. Every generator is seeded.
"""

from __future__ import annotations

import math

import numpy as np

from exoformer.report.stats import power as pw
from exoformer.report.stats.replication import (
    CONTRADICTS,
    DIRECTION_ONLY,
    REPLICATES,
    holm,
    pooled_seed_variance,
    pooled_note,
    row_residuals,
    seed_statistics,
    verdict_heads,
)

FAMILIES = 20_000
"""Replicates per scenario: MC SE of a 5% family rate sqrt(.05 * .95 / 20000) = 0.0015; of a 95% coverage the same."""
MARGIN = 3 * math.sqrt(0.05 * 0.95 / FAMILIES)
"""Monte Carlo margin above the 5% bound (3 SE)."""
SEEDS = 3
ROWS = 9
"""Table 1's rows."""
CLAIMS = [(0, 1, 1.47), (0, 2, 2.13), (0, 3, 0.8)]
"""(minuend row, subtrahend row, paper's difference): three claims sharing row 0, as Table 1's do."""
DISJOINT = [(0, 1, -0.3), (2, 3, -0.3), (4, 5, -0.3)]
"""Three claims of disjoint row pairs, as the granularity table's (each NuResFormer against its ExoFormer)."""
SIGNIFICANT = (REPLICATES, DIRECTION_ONLY, CONTRADICTS)


def table(rng: np.random.Generator, row_sd: np.ndarray, *, families: int = FAMILIES) -> np.ndarray:
    """(families, rows, seeds) per-seed values under the null; `row_sd` (rows,) or (families, rows)."""
    sd = np.broadcast_to(np.asarray(row_sd, dtype=float), (families, ROWS))[:, :, None]
    shared = rng.normal(0.0, 1.0, (families, 1, SEEDS))  # the data order of seed k, the same for every row
    return shared + sd * rng.normal(0.0, 1.0, (families, ROWS, SEEDS))


def judge(values: np.ndarray, claims=CLAIMS, *, pooled: bool):
    """(p per claim (families, claims), coverage per claim, heads per claim) of a batch of tables."""
    pv = pooled_seed_variance(values) if pooled else None
    ps, cover, stats_ = [], [], []
    for i, j, _ in claims:
        s = seed_statistics(values[:, i] - values[:, j], pooled=pv)
        stats_.append(s)
        ps.append(s.p)
        cover.append(float(np.mean((s.ci[0] <= 0.0) & (0.0 <= s.ci[1]))))
    return np.stack(ps, axis=1), cover, stats_


def false_rate(stats_, adjusted: np.ndarray, claims=CLAIMS) -> float:
    """Share of families with at least one directional verdict (all false under the null)."""
    m = adjusted.shape[1]
    heads = [verdict_heads(s, paper, adjusted[:, c],
                           mde=pw.detectable_noncentrality(s.df[0], alpha=0.05 / m) * s.sd / math.sqrt(SEEDS))
             for c, (s, (_, _, paper)) in enumerate(zip(stats_, claims, strict=True))]
    return float(np.isin(np.stack(heads, axis=1), SIGNIFICANT).any(axis=1).mean())


def scenario(values: np.ndarray) -> dict[str, tuple[float, float, float]]:
    """how -> (lowest coverage, highest coverage, false directional verdicts with Holm over the 3 claims)."""
    out = {}
    for how, pooled in (("pooled over rows (before)", True), ("own paired seeds (after)", False)):
        p, cover, stats_ = judge(values, pooled=pooled)
        out[how] = (min(cover), max(cover), false_rate(stats_, holm(p)))
    return out


def show(title: str, rows: dict[str, tuple[float, ...]], header: str) -> None:
    print(f"\n{title}\n  {'':28}{header}")
    for how, numbers in rows.items():
        print(f"  {how:<28}" + "".join(f"{x:>14.1%}" for x in numbers))


COVER_HEADER = f"{'coverage min':>14}{'coverage max':>14}{'false (Holm)':>14}"


def check_own_passes_pooled_fails(got: dict[str, tuple[float, float, float]], *, pooled_fails: bool = True) -> None:
    lo, hi, false = got["own paired seeds (after)"]
    assert 0.93 <= lo and hi <= 0.97, (lo, hi)
    assert false <= 0.05 + MARGIN, false
    if pooled_fails:  # why the pooled figure is a note, not the verdict's basis
        lo, hi, false = got["pooled over rows (before)"]
        assert lo < 0.93 and false > 0.05 + MARGIN, (lo, false)


def test_one_row_at_three_times_the_seed_sd_pooling_undercovers_own_seeds_hold() -> None:
    """(a) The row every claim shares scatters 3x the others across seeds."""
    rng = np.random.default_rng(4201)
    got = scenario(table(rng, np.r_[3.0, np.ones(ROWS - 1)]))
    show(f"(a) one shared row at 3x seed sd, {SEEDS} seeds, {ROWS} rows, null, 3 claims", got, COVER_HEADER)
    check_own_passes_pooled_fails(got)


def test_row_specific_data_order_effects_pooling_undercovers_own_seeds_hold() -> None:
    """(b) Each row reacts to the data order in its own way: a per-row seed scatter drawn afresh for every table
    (log-normal, sd of the log 0.8), shared by the claims that use the row."""
    rng = np.random.default_rng(4202)
    row_sd = np.exp(rng.normal(0.0, 0.8, (FAMILIES, ROWS)))
    got = scenario(table(rng, row_sd))
    show("(b) row-specific data-order effects (per-row sd log-normal 0.8), null, 3 claims", got, COVER_HEADER)
    check_own_passes_pooled_fails(got)


def test_equal_rows_both_hold() -> None:
    """The pooling assumption true (every row alike): both pass; the pooled figure is then the narrower one."""
    rng = np.random.default_rng(4203)
    got = scenario(table(rng, np.ones(ROWS)))
    show("equal rows (pooling's assumption holds), null, 3 claims", got, COVER_HEADER)
    check_own_passes_pooled_fails(got, pooled_fails=False)
    lo, hi, false = got["pooled over rows (before)"]
    assert 0.93 <= lo and hi <= 0.97 and false <= 0.05 + MARGIN


def test_one_holm_family_over_all_claims_of_two_tables() -> None:
    """(c) `claims` prints 3 claims of each of 2 tables under one headline: Holm per table lets at least one false
    verdict through about 10% of the time; one family over the 6 keeps it at 5%."""
    rng = np.random.default_rng(4204)
    p1, _, s1 = judge(table(rng, np.ones(ROWS)), pooled=False)
    p2, _, s2 = judge(table(rng, np.ones(ROWS)), DISJOINT, pooled=False)
    stats_, claims = s1 + s2, CLAIMS + DISJOINT
    per_table = false_rate(stats_, np.concatenate([holm(p1), holm(p2)], axis=1), claims)
    one_family = false_rate(stats_, holm(np.concatenate([p1, p2], axis=1)), claims)
    show("(c) 6 claims of 2 tables under one headline, null", {"Holm per table (before)": (per_table,),
                                                               "Holm over all 6 (after)": (one_family,)},
         f"{'P(any false)':>14}")
    assert one_family <= 0.05 + MARGIN, one_family
    assert per_table > 0.05 + MARGIN, per_table  # why the family is every claim the command prints


def test_the_pooled_note_names_the_rows_that_scatter_most() -> None:
    values = np.array([[10.0, 13.0, 7.0], [5.0, 5.1, 4.9], [6.0, 6.2, 5.9], [4.0, 4.1, 3.8]])
    assert int(np.argmax(row_residuals(values))) == 0
    note = pooled_note(values[0] - values[1], values, ["dynamic", "gated", "base", "resformer"])
    assert note.startswith("if all rows share one spread: sd ") and "pooled over 4 rows (6 df)" in note
    assert "largest residuals: dynamic, " in note
    batch = pooled_seed_variance(np.stack([values, values + 1.0]))  # a batch of tables, one variance each
    np.testing.assert_allclose(batch.var, [pooled_seed_variance(values).var] * 2)
