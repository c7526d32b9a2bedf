"""Kendall's tau-b: rank agreement between two orderings of the same rows, ties allowed.

tau_b = (C - D) / sqrt((n0 - n1) (n0 - n2)), with C / D the concordant / discordant pairs,
n0 = n(n-1)/2, n1 = pairs tied in x, n2 = pairs tied in y (a pair tied in both counts in both).
Pairs tied in either variable are neither concordant nor discordant. O(n^2): tables have tens of rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MIN_RANK_ROWS = 4
"""Fewest rows whose rank agreement carries information: rows in random order fall in perfect order with chance
1/n!, which is 1/6 for 3 rows and 1/24 for 4 (the first count below 5%)."""


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """tau-b of the pairs where both values are finite numbers (a missing value ranks nowhere); None when it is
    undefined (fewer than 2 such pairs, or one side all tied)."""
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length ({len(x)} vs {len(y)})")
    pairs = [(a, b) for a, b in zip(x, y) if _finite(a) and _finite(b)]
    x, y = [a for a, _ in pairs], [b for _, b in pairs]
    n = len(x)
    concordant = discordant = tied_x = tied_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0:
                tied_x += 1
            if dy == 0:
                tied_y += 1
            if dx == 0 or dy == 0:
                continue
            if (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    n0 = n * (n - 1) // 2
    denominator = math.sqrt((n0 - tied_x) * (n0 - tied_y))
    if denominator == 0:
        return None
    return (concordant - discordant) / denominator


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
