"""Loss -> task accuracy, the second step of a ladder forecast: a sigmoid in the loss with the task's chance level
as its floor, fitted to every run of a ladder (all rows pooled), as OLMo's ladders do (docs/forecast.md):

    acc(L) = chance + (top - chance) / (1 + exp(k (L - L0))),  k > 0, chance < top <= maximum (accuracy in %).

The ceiling `top` is bounded by the task's maximum (100%) above and its chance level below, so no curve forecasts
an accuracy a task cannot reach. A cell whose 95% interval is wider than UNINFORMATIVE of the range from chance to
the maximum says "uninformative" instead of a number (docs/forecast.md).

Its uncertainty comes from a residual bootstrap of the fit (replicates paired with the loss law's). One run's
accuracy scatters about the curve by two parts: the run's own (seed, data order, the row), and the sampling of
the task's documents, binomial in the documents scored. The ladder scores fewer documents than the target, so the
fit's residual variance is split: what the ladder's binomial variance does not explain is the run's part, and the
target's own binomial variance is added to it (`one_run_sd`). The run's loss scatter is carried through the
curve's slope by the caller. Pure numpy/scipy.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import optimize

N_SIGMOID = 3
"""top, k, L0 (the floor is the chance level, not fitted)."""
MIN_ACCURACY_POINTS = 12
"""Ladder runs a loss -> accuracy fit needs: three parameters and at least nine residual degrees of freedom, so
the residual spread that widens every accuracy interval is measured, not guessed."""
MAXIMUM = 100.0
"""The most any task's accuracy can be (%): the ceiling's upper bound."""
UNINFORMATIVE = 0.5
"""An accuracy interval wider than this share of (maximum - chance) says nothing a reader can use: for a
four-choice task, wider than 37.5 points."""
TOO_FEW = "too few ladder points for a loss->accuracy fit"
NO_FIT = "the loss->accuracy fit did not converge"


def sigmoid(loss, top, k, l0, chance: float) -> np.ndarray:
    with np.errstate(over="ignore"):
        return chance + (top - chance) / (1.0 + np.exp(k * (np.asarray(loss, float) - l0)))


@dataclass(frozen=True, slots=True)
class AccuracyFit:
    """The fitted curve of one task, its residual spread and its bootstrap replicates (rows of `boot`)."""

    chance: float
    params: np.ndarray
    """top, k, L0."""
    sigma: float
    n: int
    boot: np.ndarray
    """(replicates, 3)."""
    maximum: float = MAXIMUM
    excess: float | None = None
    """sd of a run about the curve beyond its documents' binomial sampling (%); None when the ladder's document
    counts are unknown, and then the whole residual spread is a run's."""

    @property
    def dof(self) -> int:
        return self.n - N_SIGMOID

    def predict(self, loss) -> np.ndarray:
        return sigmoid(loss, *self.params, chance=self.chance)

    def replicates(self, loss_replicates: np.ndarray) -> np.ndarray:
        """Replicate r of the curve at replicate r of the loss (both bootstraps paired by index)."""
        losses = np.resize(np.asarray(loss_replicates, float), len(self.boot))
        return sigmoid(losses, self.boot[:, 0], self.boot[:, 1], self.boot[:, 2], chance=self.chance)

    def one_run_sd(self, loss: float, documents: int | None) -> float:
        """sd of one run's accuracy about the curve at `loss` when it scores `documents` documents: the run's own
        part plus the binomial sampling of those documents (the fit's residual sd when either is unknown)."""
        if self.excess is None or not documents:
            return self.sigma
        return math.sqrt(self.excess ** 2 + binomial_variance(float(self.predict(loss)[()]), documents))

    def slope(self, loss: float) -> float:
        """d acc / d loss at `loss` (for the run's own loss scatter)."""
        h = 1e-4 * max(1.0, abs(loss))
        return float((self.predict(loss + h) - self.predict(loss - h))[()] / (2 * h))


def binomial_variance(accuracy, documents) -> np.ndarray | float:
    """Variance (%^2) of an accuracy measured on `documents` documents whose expected accuracy is `accuracy` %."""
    p = np.clip(np.asarray(accuracy, float), 0.0, MAXIMUM)
    return p * (MAXIMUM - p) / np.asarray(documents, float)


def run_excess(residual_variance: float, binomial: np.ndarray) -> float:
    """sd of the runs' own scatter: the residual variance less the mean binomial variance of the points, at least 0."""
    return math.sqrt(max(0.0, residual_variance - float(np.mean(binomial))))


def uninformative(lo: float, hi: float, chance: float, maximum: float = MAXIMUM) -> str:
    """Why an interval [lo, hi] carries no usable number, or "" when it does."""
    limit = UNINFORMATIVE * (maximum - chance)
    if hi - lo <= limit:
        return ""
    return (f"uninformative: the 95% interval [{lo:.1f}, {hi:.1f}] is wider than {limit:.1f} points "
            f"({UNINFORMATIVE:.0%} of the range from chance {chance:.1f} to {maximum:.0f})")


def _fit_once(loss: np.ndarray, acc: np.ndarray, chance: float, start: np.ndarray,
              maximum: float = MAXIMUM) -> np.ndarray | None:
    span = float(np.ptp(loss)) or 1.0
    lower = [chance + 1e-6, 1e-3 / span, float(loss.min()) - 10 * span]
    upper = [maximum, 1e3 / span, float(loss.max()) + 10 * span]  # the ceiling between chance and the maximum
    start = np.clip(start, np.add(lower, 1e-9), np.subtract(upper, 1e-9))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, _ = optimize.curve_fit(lambda x, top, k, l0: sigmoid(x, top, k, l0, chance), loss, acc, p0=start,
                                        bounds=(lower, upper), max_nfev=2000)
    except (RuntimeError, ValueError, optimize.OptimizeWarning):
        return None
    return got if np.all(np.isfinite(got)) else None


def fit_accuracy(task: str, loss, acc, *, chance: float, documents=None, bootstrap: int = 300, seed: int = 0,
                 maximum: float = MAXIMUM) -> AccuracyFit | str:
    """The curve of one task over the ladder's (loss, accuracy %) points, or why there is none (a cell's words);
    `documents` (per point) splits the residual spread into the runs' own and their documents' sampling."""
    if not 0 <= chance < maximum <= MAXIMUM:
        raise ValueError(f"chance {chance} and maximum {maximum} must satisfy 0 <= chance < maximum <= {MAXIMUM}")
    loss, acc = np.asarray(loss, float), np.asarray(acc, float)
    docs = None if documents is None else np.broadcast_to(np.asarray(documents, float), loss.shape)
    if docs is not None and not np.all(np.isfinite(docs) & (docs > 0)):
        docs = None  # a run whose documents are unknown: no split, the whole spread is a run's (as before)
    keep = np.isfinite(loss) & np.isfinite(acc)
    loss, acc = loss[keep], acc[keep]
    docs = None if docs is None else docs[keep]
    if len(loss) < MIN_ACCURACY_POINTS:
        return f"{TOO_FEW} ({len(loss)} runs with {task}; it needs {MIN_ACCURACY_POINTS})"
    span = float(np.ptp(loss)) or 1.0
    start = np.array([min(max(float(acc.max()), chance + 1.0), maximum), 4.0 / span, float(np.median(loss))])
    params = _fit_once(loss, acc, chance, start, maximum)
    if params is None:
        return NO_FIT
    fitted = sigmoid(loss, *params, chance=chance)
    resid = acc - fitted
    dof = len(loss) - N_SIGMOID
    sigma = float(np.sqrt(np.sum(resid ** 2) / dof))
    rng = np.random.default_rng(seed)
    scaled = (resid - resid.mean()) * math.sqrt(len(loss) / dof)
    boot = []
    for _ in range(bootstrap):
        got = _fit_once(loss, fitted + rng.choice(scaled, size=len(loss), replace=True), chance, params, maximum)
        if got is not None:
            boot.append(got)
    if len(boot) < bootstrap / 2:
        return NO_FIT
    excess = None if docs is None else run_excess(sigma ** 2, binomial_variance(fitted, docs))
    return AccuracyFit(chance=chance, params=params, sigma=sigma, n=len(loss), boot=np.array(boot), maximum=maximum,
                       excess=excess)
