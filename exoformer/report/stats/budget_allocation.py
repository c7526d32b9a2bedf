"""Seeds per row from a fixed budget: the allocation that decides the most claims in expectation.

A claim compares two rows over paired seeds, so its seeds are min(n_a, n_b); a row shared by several claims
(Table 1's dynamic-e-exoformer is in all three) is paid once and serves them all. The value of an allocation is
the expected number of claims reaching a decisive verdict at the paper's effect: the sum of each claim's power
there, the verdict's own direction power (replication.direction_power: its t test at Holm's strictest level
alpha / m with seeds - 1 df, averaged over a measured spread's uncertainty), exactly what `power TABLE` plans
with for the same seeds (equivalence claims: power.equivalence_power). The search is
exhaustive over every row's count when the grid is small, else greedy by gain per GPU-hour then a local search
moving seeds between rows, then seeds that buy less than 0.001 expected claims are dropped (the cheapest of the
nearly best); it never returns less than equal seeds per row at the same budget (within that 0.001). Rules in plain
words: docs/replication.md "Spending a fixed budget". Pure numpy/scipy; torch-free.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from exoformer.errors import UserError
from exoformer.report.stats import power as pw
from exoformer.report.stats import replication as rep

MAX_SEEDS_PER_ROW = 200
"""The most seeds per row the search considers (a budget that buys more is spread no further)."""
EXHAUSTIVE_CELLS = 400_000
"""Grids of at most this many allocations are searched exhaustively."""
TIE = 1e-3
"""Allocations within this many expected claims of the best count as tied: the cheapest is taken."""


@dataclass(kw_only=True, slots=True, frozen=True)
class BudgetClaim:
    """A claim the budget may decide: two rows, the paper's difference, the sd of one seed's paired difference."""

    label: str
    minuend: str
    subtrahend: str
    effect: float
    sd: float
    margin: float | None = None
    sd_df: float = math.inf
    """Degrees of freedom of the measured sd (seeds - 1 of the runs it came from); inf when given as known."""


@dataclass(kw_only=True, slots=True)
class Allocation:
    seeds: dict[str, int]
    """Row -> seeds."""
    power: list[float]
    """Per claim: power at the paper's effect at alpha / m."""
    gpu_hours: float
    expected_decisive: float
    method: str


def claim_power(claim: BudgetClaim, pairs: int | np.ndarray, *, level: float) -> np.ndarray:
    """Power at the paper's effect with `pairs` paired seeds (0 below 2 seeds: no test), at `level`."""
    pairs = np.asarray(pairs)
    n = np.maximum(pairs, 2)
    if claim.margin is None:
        power = np.vectorize(lambda k: rep.direction_power(abs(claim.effect), sd=claim.sd, seeds=int(k),
                                                           alpha=level, sd_df=claim.sd_df))(n)
    else:
        power = np.vectorize(lambda k: pw.equivalence_power(claim.effect, margin=claim.margin, sd=claim.sd,
                                                            seeds=int(k), df=k - 1, alpha=level))(n)
    return np.where(pairs >= 2, power, 0.0)


def rows_of(claims: Sequence[BudgetClaim]) -> list[str]:
    return list(dict.fromkeys(r for c in claims for r in (c.minuend, c.subtrahend)))


def evaluate(claims: Sequence[BudgetClaim], seeds: Mapping[str, int], hours_per_run: Mapping[str, float], *,
             alpha: float = pw.ALPHA, method: str = "given") -> Allocation:
    """The power of each claim, the cost and the expected decisive claims of one allocation."""
    level = alpha / len(claims)
    power = [float(claim_power(c, min(seeds[c.minuend], seeds[c.subtrahend]), level=level)) for c in claims]
    hours = float(sum(seeds[r] * hours_per_run[r] for r in rows_of(claims)))
    return Allocation(seeds={r: int(seeds[r]) for r in rows_of(claims)}, power=power, gpu_hours=hours,
                      expected_decisive=float(sum(power)), method=method)


def equal_allocation(claims: Sequence[BudgetClaim], hours_per_run: Mapping[str, float], budget: float, *,
                     alpha: float = pw.ALPHA) -> Allocation:
    """Every row the same seeds, as many as the budget buys."""
    rows = rows_of(claims)
    per_seed = sum(hours_per_run[r] for r in rows)
    n = min(MAX_SEEDS_PER_ROW, int(math.floor(budget / per_seed + 1e-9)))
    return evaluate(claims, {r: n for r in rows}, hours_per_run, alpha=alpha, method="equal seeds per row")


def allocate(claims: Sequence[BudgetClaim], hours_per_run: Mapping[str, float], budget: float, *,
             alpha: float = pw.ALPHA) -> Allocation:
    """The seeds per row within `budget` GPU-hours that maximise the expected number of decisive claims."""
    _check(claims, hours_per_run, budget, alpha)
    rows = rows_of(claims)
    caps = [min(MAX_SEEDS_PER_ROW, int(math.floor(budget / hours_per_run[r] + 1e-9))) for r in rows]
    table = _power_table(claims, max(caps), alpha)
    if math.prod(c + 1 for c in caps) <= EXHAUSTIVE_CELLS:
        best = _exhaustive(claims, rows, caps, table, hours_per_run, budget)
        method = "exhaustive"
    else:
        best = _local_search(claims, rows, _greedy(claims, rows, caps, table, hours_per_run, budget), caps, table,
                             hours_per_run, budget)
        best = _trim(claims, rows, best, table, hours_per_run)
        method = "greedy, then local search"
    found = evaluate(claims, dict(zip(rows, best, strict=True)), hours_per_run, alpha=alpha, method=method)
    equal = equal_allocation(claims, hours_per_run, budget, alpha=alpha)
    return equal if equal.expected_decisive > found.expected_decisive + TIE else found


def _check(claims: Sequence[BudgetClaim], hours: Mapping[str, float], budget: float, alpha: float) -> None:
    pw.check_alpha(alpha)
    if not claims:
        raise UserError("no claim to allocate seeds to", where="claims", fix="name a table with paper differences")
    if not (math.isfinite(budget) and budget > 0):
        raise UserError(f"the budget must be a positive number of GPU-hours, got {budget!r}", where="--gpu-hours",
                        fix="e.g. --gpu-hours 500")
    for r in rows_of(claims):
        h = hours.get(r)
        if h is None or not (math.isfinite(h) and h > 0):
            raise UserError(f"row {r} has no positive price per run ({h!r})", where="hours_per_run",
                            fix="price the runs with `plan` on a profile (--profile)")
    for c in claims:
        if not (math.isfinite(c.sd) and c.sd > 0):
            raise UserError(f"claim {c.label} has no positive seed sd ({c.sd!r})", where="--seed-sd",
                            fix="measure it (run TABLE --all-seeds) or give --seed-sd")


def _power_table(claims: Sequence[BudgetClaim], cap: int, alpha: float) -> np.ndarray:
    """(claims, cap + 1): power of each claim with 0..cap paired seeds."""
    level = alpha / len(claims)
    return np.array([claim_power(c, np.arange(cap + 1), level=level) for c in claims])


def _value(claims, rows, counts: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Expected decisive claims of allocations `counts` (..., rows)."""
    index = {r: i for i, r in enumerate(rows)}
    total = np.zeros(counts.shape[:-1])
    for j, c in enumerate(claims):
        pairs = np.minimum(counts[..., index[c.minuend]], counts[..., index[c.subtrahend]])
        total = total + table[j][pairs]
    return total


def _exhaustive(claims, rows, caps, table, hours, budget) -> list[int]:
    grids = np.meshgrid(*[np.arange(c + 1) for c in caps], indexing="ij")
    counts = np.stack([g.ravel() for g in grids], axis=-1)
    cost = counts @ np.array([hours[r] for r in rows])
    value = np.where(cost <= budget + 1e-9, _value(claims, rows, counts, table), -1.0)
    best = np.flatnonzero(value >= value.max() - TIE)
    choice = best[np.argmin(cost[best])]  # the cheapest of the (nearly) best
    return [int(x) for x in counts[choice]]


def _greedy(claims, rows, caps, table, hours, budget) -> list[int]:
    """Raise one claim's pairs at a time (its rows to that count), best gain per GPU-hour first."""
    n = np.zeros(len(rows), dtype=int)
    index = {r: i for i, r in enumerate(rows)}
    price = np.array([hours[r] for r in rows])
    while True:
        spent = float(n @ price)
        best, best_rate = None, 0.0
        base = float(_value(claims, rows, n, table))
        for c in claims:
            a, b = index[c.minuend], index[c.subtrahend]
            for step in (1, 2, 4):
                target = max(2, min(n[a], n[b]) + step)
                trial = n.copy()
                trial[a], trial[b] = max(n[a], target), max(n[b], target)
                if np.any(trial > caps):
                    continue
                extra = float(trial @ price) - spent
                if extra <= 0 or spent + extra > budget + 1e-9:
                    continue
                rate = (float(_value(claims, rows, trial, table)) - base) / extra
                if rate > best_rate:
                    best, best_rate = trial, rate
        if best is None:
            return [int(x) for x in n]
        n = best


def _local_search(claims, rows, start, caps, table, hours, budget) -> list[int]:
    """Move seeds between rows (one row down by 1-2, another up as far as the budget allows) while it helps."""
    price = np.array([hours[r] for r in rows])
    n = np.array(start)
    current = float(_value(claims, rows, n, table))
    improved = True
    while improved:
        improved = False
        for i, j in itertools.permutations(range(len(rows)), 2):
            for down in (0, 1, 2):
                trial = n.copy()
                trial[i] = max(0, trial[i] - down)
                room = budget - float(trial @ price)
                trial[j] = min(caps[j], trial[j] + int(math.floor(room / price[j] + 1e-9)))
                value = float(_value(claims, rows, trial, table))
                if value > current + 1e-12:
                    n, current, improved = trial, value, True
    return [int(x) for x in n]


def _trim(claims, rows, start, table, hours) -> list[int]:
    """Drop seeds that buy less than TIE expected claims in all, the dearest row first."""
    n = np.array(start)
    floor = float(_value(claims, rows, n, table)) - TIE
    order = np.argsort([-hours[r] for r in rows], kind="stable")
    changed = True
    while changed:
        changed = False
        for i in order:
            if n[i] == 0:
                continue
            trial = n.copy()
            trial[i] -= 1
            if float(_value(claims, rows, trial, table)) >= floor:
                n, changed = trial, True
    return [int(x) for x in n]


def seeds_for_power(claim: BudgetClaim, *, m: int, alpha: float = pw.ALPHA,
                    power: float = pw.TARGET_POWER) -> int | None:
    """Seeds per row a claim needs alone for `power` at alpha / m (replication.seeds_for_direction, as `power
    TABLE`)."""
    level = alpha / m
    if claim.margin is None:
        return rep.seeds_for_direction(abs(claim.effect), sd=claim.sd, alpha=level, power=power, sd_df=claim.sd_df)
    return pw.seeds_needed_equivalence(claim.effect, margin=claim.margin, sd=claim.sd, alpha=level, power=power)
