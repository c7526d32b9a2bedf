"""The attention-sink ratio of a row against a reference, one estimator: the ratio of means over paired seeds.

The paper: ExoFormer halves (2x) the attention sink of Gated Attention (docs/paper.md). Each run gives one sink
value (the layer-mean attention weight on the first token, from the analyse stage); with seeds k = 1..K of the
reference (x) and the row (y), the ratio is

    R = mean_k x_k / mean_k y_k            (ratio of means)

chosen over the mean of per-seed ratios mean_k (x_k / y_k) because the claim is about the sink's typical size
("halves the sink"), which R estimates consistently, while the mean of ratios estimates E[x / y], which is
larger than E[x] / E[y] whenever y varies (Jensen) and is dominated by the seed with the smallest y. Its 95%
interval is the linearised (delta-method) t interval of a ratio estimator: z_k = x_k - R y_k, se(R) =
sd(z) / (sqrt(K) mean(y)), Student t with K - 1 df (seeds paired, so shared seed effects cancel in z).
Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from exoformer.errors import UserError

ESTIMATOR = "ratio of means over paired seeds (reference mean / row mean)"


@dataclass(kw_only=True, slots=True, frozen=True)
class SinkRatio:
    estimate: float
    ci: tuple[float, float] | None
    """95% delta-method t interval (seeds - 1 df); None with one seed."""
    seeds: int

    def text(self) -> str:
        interval = f" [{self.ci[0]:.3g}, {self.ci[1]:.3g}]" if self.ci else " (one seed: no interval)"
        return f"{self.estimate:.3g}x{interval}"


def sink_ratio(reference: Sequence[float], row: Sequence[float], *, alpha: float = 0.05) -> SinkRatio:
    """The reference's sink over the row's, as a ratio of means over seeds paired by position."""
    x, y = np.asarray(reference, dtype=float), np.asarray(row, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or x.size < 1 or not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise UserError(f"sink values must be finite and paired by seed, got shapes {x.shape} and {y.shape}",
                        where="sink ratio", fix="one value per seed for the reference and the row")
    if y.mean() <= 0 or np.any(x < 0) or np.any(y < 0):
        raise UserError("sink values are attention weights: non-negative, and the row's mean positive",
                        where="sink ratio", fix="read first_token_attention_layer_mean of each run")
    k = x.size
    ratio = float(x.mean() / y.mean())
    ci = None
    if k >= 2:
        z = x - ratio * y
        half = float(stats.t.ppf(1 - alpha / 2, k - 1)) * float(z.std(ddof=1)) / (math.sqrt(k) * float(y.mean()))
        ci = (ratio - half, ratio + half)
    return SinkRatio(estimate=ratio, ci=ci, seeds=k)
