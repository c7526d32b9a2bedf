"""Data efficiency as an effective-token multiplier against a reference row, with a 95% interval over seeds.

The paper: Dynamic ExoFormer "matches the baseline's validation loss with 1.84x fewer tokens" (docs/paper.md).
For seed k of a row and seed k of the reference (paired by position), in one phase of training:
- each curve is smoothed (SMOOTHING). A running median of 3 removes any single noisy point. A quadratic in log
  tokens over the last third of the points sets the end level from many points, not one lucky low point.
  Isotonic regression then makes "first reaches" one crossing;
- a row that ends at or below the reference's smoothed end: the row's tokens to that level are read, and the
  multiplier is the reference's end tokens / those tokens (the paper's reading);
- a row that ends above it: the reference's tokens to the row's smoothed end are read, and the multiplier is
  those tokens / the row's end tokens.
If the row is the reference with its tokens scaled by m, both readings give m exactly. Near 1x the two levels
differ by less than the noise, so the choice of reading adds no bias there. A seed that misses a noisy target is
thus measured, not censored: no "< y" bound on the architecture (docs/replication.md, "Data efficiency").
Only a crossing before a curve's first logged point is censored (a multiplier beyond the logged range). Then the
row has no number: "not measured", with the count of such seeds.
The estimate is the geometric mean of the per-seed multipliers; its interval a Student t interval on their logs
(seeds - 1 df). Why not a censored-data (Tobit) likelihood for the missed seeds: a censored seed carries only a
bound, and with 3 seeds of unknown spread that likelihood needs its own small-sample calibration. The reading on
the other curve is a measurement, and the t interval covers 92-97% at 1.05-1.84x, with 3 or 5 seeds, under
constant LR and WSD (tests/report/stats/test_data_efficiency.py).
Phases: the whole run, and the stable phase before the warmup-stable-decay schedule's decay (the caller passes
its start in tokens). Under WSD a gap left at the end of the stable phase closes during the decay, so the
whole-run multiplier is capped near 1 / (1 - decay fraction) by definition, not by architecture: the stable phase
is the architecture's figure. Torch-free.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.optimize import isotonic_regression

from exoformer.errors import UserError

SMOOTHING = ("running median of 3 validation points (Tukey's end rule), a quadratic in log tokens fitted to the "
             "last third of them (outlying points dropped), then isotonic (non-increasing) regression")
STABLE, WHOLE = "stable phase", "whole run"
EXACT, ABOVE, BELOW = "exact", "above", "below"
"""Tokens to a level: measured; more than the curve's last tokens (never reached); at most its first tokens."""
ROW, REFERENCE = "row", "reference"
"""Which curve a seed's crossing was read on."""
TAIL_FRACTION = 1 / 3
"""Share of a curve's last points that fix its end level: enough points to average out logging noise."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Curve:
    """One run's in-training validation curve: tokens seen and validation loss, one entry per logged point."""

    tokens: np.ndarray
    loss: np.ndarray

    @classmethod
    def of(cls, tokens: Sequence[float], loss: Sequence[float], *, where: str = "curve") -> Curve:
        t, y = np.asarray(tokens, dtype=float), np.asarray(loss, dtype=float)
        if t.ndim != 1 or t.shape != y.shape or t.size < 1:
            raise UserError(f"tokens and loss must be 1-d of one length, got {t.shape} and {y.shape}", where=where,
                            fix="pass the logged validation points of one run")
        if not (np.all(np.isfinite(t)) and np.all(np.isfinite(y))) or np.any(np.diff(t) <= 0) or t[0] < 0:
            raise UserError("tokens must be finite, non-negative and strictly increasing, losses finite",
                            where=where, fix="read the run's validation lines in step order")
        return cls(tokens=t, loss=y)

    def until(self, end: float) -> Curve:
        """The points logged at or before `end` tokens."""
        keep = self.tokens <= end
        return Curve(tokens=self.tokens[keep], loss=self.loss[keep])


def _median3(y: np.ndarray) -> np.ndarray:
    """Running median of 3; each end is the median of itself, its smoothed neighbour and the line through the next
    two smoothed points (Tukey's end-point rule), so a single noisy end point is removed too."""
    if y.size < 3:
        return y.copy()
    left, mid, right = y[:-2], y[1:-1], y[2:]
    inner = np.maximum(np.minimum(left, mid), np.minimum(np.maximum(left, mid), right))  # median of three
    if inner.size < 2:
        return np.concatenate([y[:1], inner, y[-1:]])
    first = np.median([y[0], inner[0], 3 * inner[0] - 2 * inner[1]])
    last = np.median([y[-1], inner[-1], 3 * inner[-1] - 2 * inner[-2]])
    return np.concatenate([[first], inner, [last]])


def _tail_fit(tokens: np.ndarray, raw: np.ndarray, y: np.ndarray, tail_from: float | None) -> np.ndarray:
    """`y` with its last third replaced by a least-squares fit in log tokens, so the end level averages many points.
    From 6 points: a quadratic to the raw losses, refitted once without points more than 4 robust sd off it (a
    single noisy point is dropped; Gaussian noise loses almost none). A power law is nearly quadratic in log tokens
    over a third of a run; a line would be biased by about 0.5% in the multiplier, and a fit to the running
    medians by 1-2% when the points are noisy (tests/report/stats/test_data_efficiency.py). From 3 points: a line
    to the running medians. The fit starts at or after `tail_from` tokens (the WSD decay's start: a fit across its
    kink would bend the curve before it)."""
    n = max(3, math.ceil(TAIL_FRACTION * y.size))
    if tail_from is not None:
        n = min(n, int(np.count_nonzero(tokens >= tail_from)))
    if y.size < 4 or n < 3 or tokens[-n] <= 0:
        return y
    u = np.log(tokens[-n:])
    design = np.vander(u - u[-1], 3 if n >= 6 else 2)
    if n < 6:
        coef, *_ = np.linalg.lstsq(design, y[-n:], rcond=None)
        return np.concatenate([y[:-n], design @ coef])
    coef, *_ = np.linalg.lstsq(design, raw[-n:], rcond=None)
    resid = raw[-n:] - design @ coef
    keep = np.abs(resid) <= 4.0 * 1.4826 * float(np.median(np.abs(resid))) + 1e-12
    if keep.sum() >= 4 and not keep.all():
        coef, *_ = np.linalg.lstsq(design[keep], raw[-n:][keep], rcond=None)
    return np.concatenate([y[:-n], design @ coef])


def smooth(curve: Curve, *, tail_from: float | None = None) -> np.ndarray:
    """SMOOTHING of a curve's losses: running median of 3, the tail fit, then non-increasing isotonic regression."""
    y = _tail_fit(curve.tokens, curve.loss, _median3(curve.loss), tail_from)
    return isotonic_regression(y, increasing=False).x


@dataclass(kw_only=True, slots=True, frozen=True)
class Reach:
    tokens: float
    bound: str
    """EXACT, ABOVE (never reached: more than `tokens`) or BELOW (reached by the first point: at most `tokens`)."""
    on: str = ROW
    """The curve read: ROW (the row's tokens to the reference's end level) or REFERENCE (the other way round)."""

    def text(self) -> str:
        return {EXACT: f"{self.tokens:.4g}", ABOVE: f"> {self.tokens:.4g}", BELOW: f"<= {self.tokens:.4g}"}[self.bound]


def _crossing(tokens: np.ndarray, smoothed: np.ndarray, level: float, on: str) -> Reach:
    """Where a smoothed curve first reaches `level` (linear interpolation between the bracketing points)."""
    hit = np.flatnonzero(smoothed <= level)
    if hit.size == 0:
        return Reach(tokens=float(tokens[-1]), bound=ABOVE, on=on)
    i = int(hit[0])
    if i == 0:
        return Reach(tokens=float(tokens[0]), bound=BELOW, on=on)
    t0, t1, y0, y1 = tokens[i - 1], tokens[i], smoothed[i - 1], smoothed[i]
    return Reach(tokens=float(t0 + (t1 - t0) * (y0 - level) / (y0 - y1)), bound=EXACT, on=on)


def tokens_to_target(curve: Curve, target: float) -> Reach:
    """Where the smoothed curve first reaches `target`."""
    return _crossing(curve.tokens, smooth(curve), target, ROW)


def pair_multiplier(mine: Curve, ref: Curve, *, tail_from: float | None = None) -> tuple[float, Reach]:
    """One seed pair's multiplier, read on whichever curve reaches the other's smoothed end (module docstring)."""
    own, theirs = smooth(mine, tail_from=tail_from), smooth(ref, tail_from=tail_from)
    if own[-1] <= theirs[-1]:
        reach = _crossing(mine.tokens, own, float(theirs[-1]), ROW)
        return (float(ref.tokens[-1]) / reach.tokens if reach.tokens > 0 else math.inf), reach
    reach = _crossing(ref.tokens, theirs, float(own[-1]), REFERENCE)
    return reach.tokens / float(mine.tokens[-1]), reach


@dataclass(kw_only=True, slots=True)
class Efficiency:
    """The multiplier of one row against one reference in one phase, over paired seeds."""

    phase: str
    per_seed: list[float]
    """The multiplier of each seed pair (a bound where that pair's crossing lies before a first logged point)."""
    reaches: list[Reach]
    estimate: float | None
    """Geometric mean over seeds; None when any seed is censored."""
    ci: tuple[float, float] | None
    """95% t interval (on the logs, seeds - 1 df); None with one seed or any censored seed."""

    @property
    def censored(self) -> int:
        return sum(r.bound != EXACT for r in self.reaches)

    def text(self) -> str:
        k = len(self.per_seed)
        if self.estimate is None:
            return (f"not measured: {self.censored} of {k} seeds cross before the first logged point "
                    f"(beyond the logged range; {self.phase})")
        interval = f" [{self.ci[0]:.3g}, {self.ci[1]:.3g}]" if self.ci is not None else " (one seed: no interval)"
        return f"{self.estimate:.3g}x{interval} ({self.phase})"


def multiplier(row: Sequence[Curve], reference: Sequence[Curve], *, end: float | None = None,
               phase: str = WHOLE, alpha: float = 0.05, tail_from: float | None = None) -> Efficiency:
    """The effective-token multiplier of `row` against `reference` (curves paired by seed position) up to `end`;
    `tail_from`: where the end-level fit may start (smooth)."""
    if len(row) != len(reference) or not row:
        raise UserError(f"{len(row)} row curves but {len(reference)} reference curves", where="data efficiency",
                        fix="pair seed k of the row with seed k of the reference")
    ratios, reaches = [], []
    for k, (mine, ref) in enumerate(zip(row, reference, strict=True)):
        if end is not None:
            mine, ref = mine.until(end), ref.until(end)
        if ref.tokens.size == 0 or mine.tokens.size == 0:
            raise UserError(f"seed {k} has no validation point before {end:g} tokens", where="data efficiency",
                            fix="log validation during the stable phase (train.val_every)")
        ratio, reach = pair_multiplier(mine, ref, tail_from=tail_from)
        ratios.append(ratio)
        reaches.append(reach)
    logs = np.log(np.asarray(ratios))
    measured = all(r.bound == EXACT for r in reaches) and bool(np.all(np.isfinite(logs)))
    estimate = float(np.exp(logs.mean())) if measured else None
    ci = None
    if measured and len(ratios) >= 2:
        k = len(ratios)
        half = _t_quantile(1 - alpha / 2, k - 1) * float(logs.std(ddof=1)) / math.sqrt(k)
        ci = (float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half)))
    return Efficiency(phase=phase, per_seed=ratios, reaches=reaches, estimate=estimate, ci=ci)


@functools.lru_cache(maxsize=256)
def _t_quantile(q: float, df: int) -> float:
    return float(stats.t.ppf(q, df))


def data_efficiency(row: Sequence[Curve], reference: Sequence[Curve], *,
                    decay_start: float | None) -> dict[str, Efficiency]:
    """The multiplier for the whole run and, when the schedule decays (`decay_start` tokens), the stable phase."""
    if decay_start is not None and not (math.isfinite(decay_start) and decay_start > 0):
        raise UserError(f"the decay start must be a positive token count, got {decay_start!r}",
                        where="decay_start", fix="train.steps * (1 - decay fraction) * tokens per step")
    out = {WHOLE: multiplier(row, reference, phase=WHOLE, tail_from=decay_start)}
    if decay_start is not None:
        out[STABLE] = multiplier(row, reference, end=decay_start, phase=STABLE)
    return out
