"""Data efficiency as an effective-token multiplier against a reference row, with a 95% interval over seeds.

The paper: Dynamic ExoFormer "matches the baseline's validation loss with 1.84x fewer tokens" (docs/paper.md).
For seed k of a row and seed k of the reference (paired by position), in one phase of training:
- target: the reference's measured validation loss at the end of the phase (its last logged point; not
  smoothed, since smoothing an endpoint of a falling curve biases it upward);
- tokens to target: where the row's smoothed validation curve first reaches the target, by linear interpolation
  between the two smoothed points that bracket it. The smoothing (SMOOTHING) is a running median of 3 logged
  points, which removes any single noisy point whatever its size, then isotonic (non-increasing) regression
  (scipy.optimize.isotonic_regression), which makes "first reaches" one well-defined crossing;
- the multiplier: the reference's tokens at the end of the phase / the row's tokens to target (> 1: the row
  needs fewer tokens);
- censoring: a row that never reaches the target in the phase has tokens "> its last tokens", so its multiplier
  is an upper bound; one that is already below it at its first logged point has tokens "<= its first tokens",
  a lower bound. Never "not run".
The estimate is the geometric mean of the per-seed multipliers, its interval a Student t interval on their logs
(seeds - 1 df), given when every seed is measured; with censored seeds the summary is the bound their values
give (each censored seed at its bound).
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

SMOOTHING = "running median of 3 validation points, then isotonic (non-increasing) regression"
STABLE, WHOLE = "stable phase", "whole run"
EXACT, ABOVE, BELOW = "exact", "above", "below"
"""Tokens to target: measured; more than the curve's last tokens (never reached); at most its first tokens."""


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


def smooth(loss: np.ndarray) -> np.ndarray:
    """SMOOTHING of a loss sequence: a running median of 3 (ends kept), then non-increasing isotonic regression."""
    y = np.asarray(loss, dtype=float)
    if y.size >= 3:
        left, mid, right = y[:-2], y[1:-1], y[2:]
        inner = np.maximum(np.minimum(left, mid), np.minimum(np.maximum(left, mid), right))  # median of three
        y = np.concatenate([y[:1], inner, y[-1:]])
    return isotonic_regression(y, increasing=False).x


@dataclass(kw_only=True, slots=True, frozen=True)
class Reach:
    tokens: float
    bound: str
    """EXACT, ABOVE (never reached: more than `tokens`) or BELOW (reached by the first point: at most `tokens`)."""

    def text(self) -> str:
        return {EXACT: f"{self.tokens:.4g}", ABOVE: f"> {self.tokens:.4g}", BELOW: f"<= {self.tokens:.4g}"}[self.bound]


def tokens_to_target(curve: Curve, target: float) -> Reach:
    """Where the smoothed curve first reaches `target` (linear interpolation between bracketing points)."""
    y = smooth(curve.loss)
    hit = np.flatnonzero(y <= target)
    if hit.size == 0:
        return Reach(tokens=float(curve.tokens[-1]), bound=ABOVE)
    i = int(hit[0])
    if i == 0:
        return Reach(tokens=float(curve.tokens[0]), bound=BELOW)
    t0, t1, y0, y1 = curve.tokens[i - 1], curve.tokens[i], y[i - 1], y[i]
    return Reach(tokens=float(t0 + (t1 - t0) * (y0 - target) / (y0 - y1)), bound=EXACT)


@dataclass(kw_only=True, slots=True)
class Efficiency:
    """The multiplier of one row against one reference in one phase, over paired seeds."""

    phase: str
    per_seed: list[float]
    """Reference tokens / row tokens for each seed pair (a bound where that seed's reach is censored)."""
    reaches: list[Reach]
    estimate: float | None
    """Geometric mean over seeds; None when the seeds are censored both ways."""
    ci: tuple[float, float] | None
    """95% t interval (on the logs, seeds - 1 df); None with one seed or any censored seed."""
    bound: str | None
    """"<" (an upper bound: some seed never reached the target) or ">" (a lower bound), else None."""

    def text(self) -> str:
        k = len(self.per_seed)
        if self.estimate is None:
            return f"not known: seeds censored both ways ({self.phase})"
        if self.bound is not None:
            censored = sum(r.bound != EXACT for r in self.reaches)
            how = "never reached the target" if self.bound == "<" else "were below it at their first point"
            return f"{self.bound} {self.estimate:.3g}x ({censored} of {k} seeds {how}; {self.phase})"
        interval = f" [{self.ci[0]:.3g}, {self.ci[1]:.3g}]" if self.ci is not None else " (one seed: no interval)"
        return f"{self.estimate:.3g}x{interval} ({self.phase})"


def multiplier(row: Sequence[Curve], reference: Sequence[Curve], *, end: float | None = None,
               phase: str = WHOLE, alpha: float = 0.05) -> Efficiency:
    """The effective-token multiplier of `row` against `reference` (curves paired by seed position) up to `end`."""
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
        reach = tokens_to_target(mine, float(ref.loss[-1]))
        ratios.append(float(ref.tokens[-1]) / reach.tokens if reach.tokens > 0 else math.inf)
        reaches.append(reach)
    kinds = {r.bound for r in reaches} - {EXACT}
    logs = np.log(np.asarray(ratios))
    estimate = None if len(kinds) > 1 or not np.all(np.isfinite(logs)) else float(np.exp(logs.mean()))
    bound = None if not kinds or estimate is None else ("<" if kinds == {ABOVE} else ">")
    ci = None
    if not kinds and len(ratios) >= 2:
        k = len(ratios)
        half = _t_quantile(1 - alpha / 2, k - 1) * float(logs.std(ddof=1)) / math.sqrt(k)
        ci = (float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half)))
    return Efficiency(phase=phase, per_seed=ratios, reaches=reaches, estimate=estimate, ci=ci, bound=bound)


@functools.lru_cache(maxsize=256)
def _t_quantile(q: float, df: int) -> float:
    return float(stats.t.ppf(q, df))


def data_efficiency(row: Sequence[Curve], reference: Sequence[Curve], *,
                    decay_start: float | None) -> dict[str, Efficiency]:
    """The multiplier for the whole run and, when the schedule decays (`decay_start` tokens), the stable phase."""
    out = {WHOLE: multiplier(row, reference, phase=WHOLE)}
    if decay_start is not None:
        if not (math.isfinite(decay_start) and decay_start > 0):
            raise UserError(f"the decay start must be a positive token count, got {decay_start!r}",
                            where="decay_start", fix="train.steps * (1 - decay fraction) * tokens per step")
        out[STABLE] = multiplier(row, reference, end=decay_start, phase=STABLE)
    return out
