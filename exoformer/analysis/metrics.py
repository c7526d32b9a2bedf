"""The paper's analysis metrics as pure functions, each defined exactly in its docstring.

The definitions follow the official analysis.py (HEAD), as written down in
`docs/official_code.md` section 6.2; where ours differs (precision, memory, edge cases)
the docstring says so and why. Every function reduces one layer's tensors to numbers, so that a probe
can run layer by layer and never hold more than one layer's O(T^2) attention matrix.

Indexing convention (docs/official_code.md 6.2): attention metrics are indexed by block 0..L-1; hidden-state metrics
by hidden state 0..L, where 0 is the embedding output and i is the output of block i-1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from exoformer.errors import UserError
from exoformer.rundir import RunDir

SPARSE_GATE_THRESHOLD = 0.2
"""A gate score below this counts as closed (docs/official_code.md 6.2, 'sparsity')."""

_ENTROPY_CLAMP = 1e-10
_CHUNK_ELEMENTS = 1 << 22
"""Work in pieces of at most this many elements (16 MiB of fp32; at least one (b, h) row block), so that no
metric multiplies a layer's memory."""


# --------------------------------------------------------------------------------------------------
# Attention metrics: attn is (B, H, T, T), rows are queries, columns keys, each row sums to 1.
# --------------------------------------------------------------------------------------------------


def first_token_attention(attn: torch.Tensor) -> float:
    """Attention sink: mean over (b, h, query i) of A[b, h, i, 0].

    All queries count, including i = 0, whose only key is itself (weight 1), exactly as docs/official_code.md 6.2.
    With document masking the first key of a later document is not position 0; like the official code
    we still measure position 0 (the analysis input of the paper is not document-masked).
    """
    _check_attention(attn)
    return float(attn[..., 0].double().mean())


def attention_entropy(attn: torch.Tensor) -> float:
    """Mean over (b, h, query i) of -sum_j a_ij log a_ij, with a clamped to >= 1e-10 (docs/official_code.md 6.2).

    The clamp makes a masked zero contribute 1e-10 * 23 ~ 2e-9 nats, as in the official code. Computed in
    chunks of (b, h) rows so that the temporaries stay far below the size of the attention matrix.
    """
    _check_attention(attn)
    rows = attn.reshape(-1, attn.shape[-2], attn.shape[-1])  # (B*H, T, T)
    per_chunk = max(1, _CHUNK_ELEMENTS // (rows.shape[1] * rows.shape[2]))
    total = 0.0
    for start in range(0, rows.shape[0], per_chunk):
        a = rows[start : start + per_chunk].float().clamp_min(_ENTROPY_CLAMP)
        total += float(torch.special.xlogy(a, a).sum(dim=-1).double().sum())  # row sums in fp32, then fp64
    return -total / (rows.shape[0] * rows.shape[1])


def _check_attention(attn: torch.Tensor) -> None:
    if attn.dim() != 4 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attention must be (B, H, T, T), got {tuple(attn.shape)}")


# --------------------------------------------------------------------------------------------------
# Hidden-state metrics: hidden is (B, T, d).
# --------------------------------------------------------------------------------------------------


def token_similarity(hidden: torch.Tensor) -> tuple[float, float]:
    """Over-smoothing: (mean, std) of cos(h[b, i], h[b, j]) over all i < j of every sequence, pooled.

    Official 6.2 forms each sequence's T x T cosine matrix. We never do: with unit vectors u_t,
      sum_{i<j} cos = (|sum_t u_t|^2 - sum_t |u_t|^2) / 2,
      sum_{i<j} cos^2 = (|U^T U|_F^2 - sum_t |u_t|^4) / 2   (|U U^T|_F = |U^T U|_F),
    so one sequence needs a d x d (or T x T, whichever is smaller) Gram matrix, in fp64 so that the
    variance E[c^2] - E[c]^2 does not cancel. std is the population std (ddof 0) over the
    B*T*(T-1)/2 pooled entries; torch.std's ddof 1 differs by a factor sqrt(N/(N-1)) ~ 1 + 1e-7.
    A zero token vector has cosine 0 with every other token (F.normalize semantics).
    """
    _check_hidden(hidden)
    batch, seq, _ = hidden.shape
    if seq < 2:
        raise ValueError("token similarity needs at least 2 tokens per sequence")
    total = total_sq = 0.0
    for b in range(batch):
        u = F.normalize(hidden[b].double(), dim=-1)  # (T, d)
        self_dot = (u * u).sum(-1)  # 1, or 0 for a zero vector
        column_sum = u.sum(0)
        gram = u.T @ u if u.shape[1] <= u.shape[0] else u @ u.T
        total += float(column_sum @ column_sum - self_dot.sum()) / 2
        total_sq += float(gram.square().sum() - self_dot.square().sum()) / 2
    count = batch * seq * (seq - 1) / 2
    mean = total / count
    variance = max(total_sq / count - mean * mean, 0.0)
    return mean, math.sqrt(variance)


def similarity_to_embeddings(hidden: torch.Tensor, embeddings: torch.Tensor) -> float:
    """cos(flatten(h[b]), flatten(e[b])) with each sequence flattened to a T*d vector, mean over b.

    Official 6.2 'similarity to layer 0', where layer 0 is the embedding output. Computed in fp64.
    """
    _check_hidden(hidden)
    if hidden.shape != embeddings.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} and embeddings {tuple(embeddings.shape)} differ in shape")
    h = hidden.reshape(hidden.shape[0], -1).double()
    e = embeddings.reshape(embeddings.shape[0], -1).double()
    return float(F.cosine_similarity(h, e, dim=1, eps=1e-30).mean())


def layer_similarity_matrix(hiddens: Sequence[torch.Tensor]) -> list[list[float]]:
    """M[i, j] = mean over all B*T tokens t of cos(h_i[t], h_j[t]); an (L+1) x (L+1) symmetric matrix.

    Official 6.2 normalises every state and compares them in fp32; we do the same, but through per-token
    inverse norms, so that no normalised copy of all states is made; the mean is accumulated in fp64.
    A zero token vector has cosine 0.
    """
    if not hiddens:
        return []
    for h in hiddens:
        _check_hidden(h)
        if h.shape != hiddens[0].shape:
            raise ValueError("all hidden states must have the same shape")
    flat = [h.reshape(-1, h.shape[-1]).float() for h in hiddens]
    inv_norms = [1.0 / h.norm(dim=-1).clamp_min(1e-12) for h in flat]
    n = len(flat)
    matrix = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1):
            dots = torch.einsum("nd,nd->n", flat[i], flat[j])
            value = float((dots * inv_norms[i] * inv_norms[j]).double().mean())
            matrix[i][j] = matrix[j][i] = value
    return matrix


def pca_components(hidden: torch.Tensor, threshold: float = 0.99) -> tuple[int, float]:
    """Intrinsic dimension: the number of principal components that explain >= threshold of the variance.

    Official 6.2: reshape to (B*T) x d, center each feature, SVD; ratio_k = s_k^2 / sum s^2;
    components = (first index k with cumsum(ratio)[k] >= threshold) + 1. Returns (components,
    components / d). We take the eigenvalues of the centred Gram matrix (= s_k^2) in fp64 instead of an
    fp32 SVD: the same numbers up to rounding, several times cheaper on CPU. All-constant data (no
    variance) has 0 components.
    """
    _check_hidden(hidden)
    if not 0.0 < threshold <= 1.0:
        raise UserError(f"PCA variance threshold {threshold} is outside (0, 1]", where="analysis.pca_threshold",
                        fix="use a fraction such as 0.99")
    d = hidden.shape[-1]
    x = hidden.reshape(-1, d).double()
    x = x - x.mean(dim=0, keepdim=True)
    gram = x.T @ x if x.shape[0] >= d else x @ x.T
    variances = torch.linalg.eigvalsh(gram).clamp_min(0.0).flip(0)  # descending s_k^2
    total = float(variances.sum())
    if total <= 0.0:
        return 0, 0.0
    cumulative = torch.cumsum(variances / total, dim=0)
    first = int(torch.searchsorted(cumulative, torch.tensor([threshold], dtype=torch.float64)))
    components = min(first, cumulative.numel() - 1) + 1  # a threshold of 1.0 may miss by rounding
    return components, components / d


def massive_activation(hidden: torch.Tensor) -> float:
    """Massive activations: max |h| over all elements (docs/official_code.md 6.2; its summary prints log10(max + 1))."""
    return float(hidden.abs().max())


def _check_hidden(hidden: torch.Tensor) -> None:
    if hidden.dim() != 3:
        raise ValueError(f"hidden states must be (B, T, d), got {tuple(hidden.shape)}")


# --------------------------------------------------------------------------------------------------
# Gates and mixing coefficients.
# --------------------------------------------------------------------------------------------------


def gate_stats(gate: torch.Tensor) -> tuple[float, float]:
    """(mean gate score, sparsity = fraction of gate scores < 0.2), over all elements (docs/official_code.md 6.2).

    `gate` holds sigmoid values (after mixing and dynamic scales), any shape.
    """
    mean = float(gate.double().mean())
    sparsity = float((gate < SPARSE_GATE_THRESHOLD).double().mean())
    return mean, sparsity


@dataclass(kw_only=True, slots=True, frozen=True)
class CoefficientStats:
    """Statistics of one mixing path in one layer: lambda1 (anchor term) against lambda2 (own term)."""

    anchor_mean: float
    """mean(lambda1) over all elements."""
    self_mean: float
    """mean(lambda2) over all elements."""
    ratio_of_means: float
    """mean(lambda1) / (mean(lambda2) + 1e-6), docs/official_code.md 6.2."""
    ratio: list[float]
    """Elementwise lambda1 / (lambda2 + 1e-12), flattened head-major: H*d_head (E), H (H) or 1 (S) values."""

    def to_dict(self) -> dict:
        return asdict(self)


def coefficient_stats(anchor_coef: torch.Tensor, self_coef: torch.Tensor) -> CoefficientStats:
    """Mixing-coefficient statistics of one path: S~ = lambda1 * Norm(anchor) + lambda2 * S.

    Accepts static parameters of their granularity shape ((H, d_head), (H,) or ()) or effective
    coefficients broadcastable to (B, H, T, d_head) as a model's inspection returns them (dynamic scales
    included). Four-dimensional inputs are first averaged over tokens (dims b and t); the ratio heatmap is
    then the ratio of these token averages. Official 6.2 reports static parameters only; fed with the
    effective values this gives the heatmap of a dynamic model, its coefficients averaged over tokens.
    """
    a, s = (_average_over_tokens(c.detach().double()) for c in (anchor_coef, self_coef))
    a, s = torch.broadcast_tensors(a, s)
    anchor_mean, self_mean = float(a.mean()), float(s.mean())
    return CoefficientStats(
        anchor_mean=anchor_mean,
        self_mean=self_mean,
        ratio_of_means=anchor_mean / (self_mean + 1e-6),
        ratio=(a / (s + 1e-12)).reshape(-1).tolist(),
    )


def _average_over_tokens(coef: torch.Tensor) -> torch.Tensor:
    if coef.dim() == 4:  # (B|1, H|1, T|1, d_head|1) -> (H|1, d_head|1)
        return coef.mean(dim=(0, 2))
    if coef.dim() > 2:
        raise ValueError(f"coefficients must be a parameter (<= 2 dims) or (B, H, T, d_head), got {tuple(coef.shape)}")
    return coef


# --------------------------------------------------------------------------------------------------
# Training stability: spike score (paper appendix F, after OLMo 2).
# --------------------------------------------------------------------------------------------------


def spike_mask(values: Sequence[float] | np.ndarray, window: int = 1000, n_sigma: float = 7.0,
               min_history: int | None = None) -> np.ndarray:
    """Which values are spikes: |x_t - mean(prev)| > n_sigma * std(prev), prev = x[max(0, t-window):t].

    A value is scored only when it has at least `min_history` predecessors (default: a full `window`,
    as pandas' rolling(window) does); earlier values are never spikes. The window holds the previous
    values only, not x_t itself, and may contain earlier spikes (which widen it, as in a plain rolling
    std). std is the population std (ddof 0). A deviation below 1e-9 * (|mean| + 1) is rounding, never a
    spike, so that a perfectly flat history does not turn float noise into spikes.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError("values must be one-dimensional")
    if not np.isfinite(x).all():
        raise ValueError("values must be finite (spike_scores_from_metrics drops and counts non-finite ones)")
    if window < 1 or n_sigma <= 0:
        raise UserError(f"spike window={window}, n_sigma={n_sigma} must be positive", where="analysis.spike",
                        fix="use window 1000 and n_sigma 7 (OLMo 2)")
    min_history = window if min_history is None else min_history
    if not 1 <= min_history <= window:
        raise UserError(f"spike min_history={min_history} is outside [1, window={window}]", where="analysis.spike",
                        fix="use a value between 1 and the window")
    mask = np.zeros(x.shape, dtype=bool)
    if x.size <= min_history:
        return mask
    median = float(np.median(x))
    centred = x - median  # keeps the prefix sums small, so the variance does not cancel
    prefix = np.concatenate([[0.0], np.cumsum(centred)])
    prefix_sq = np.concatenate([[0.0], np.cumsum(centred * centred)])
    t = np.arange(min_history, x.size)
    start = np.maximum(0, t - window)
    count = t - start
    mean = (prefix[t] - prefix[start]) / count
    std = np.sqrt(np.maximum((prefix_sq[t] - prefix_sq[start]) / count - mean * mean, 0.0))
    deviation = np.abs(centred[t] - mean)
    mask[t] = (deviation > n_sigma * std) & (deviation > 1e-9 * (np.abs(mean + median) + 1.0))
    return mask


def spike_score(values: Sequence[float] | np.ndarray, window: int = 1000, n_sigma: float = 7.0,
                min_history: int | None = None) -> float | None:
    """Spike score in percent: 100 * (number of spikes, see `spike_mask`) / (number of values).

    The denominator counts every value, also the first ones that cannot be scored (a run of N steps with
    k spikes scores 100 k / N, as a rolling mean over the whole series does). None when no value has
    enough history to be scored (a run shorter than min_history + 1 steps): the score is not defined.
    """
    x = np.asarray(values, dtype=np.float64)
    min_history = window if min_history is None else min_history
    mask = spike_mask(x, window, n_sigma, min_history)
    if x.size <= min_history:
        return None
    return 100.0 * float(mask.sum()) / x.size


def spike_scores_from_metrics(run: RunDir, *, window: int = 1000, n_sigma: float = 7.0,
                              min_history: int | None = None) -> dict:
    """Spike scores of a run's gradient norm and training loss, read from its metrics (RunDir.numbered_metrics,
    strict: a damaged line other than a torn last one is an error naming file:line).

    Uses the lines with kind == "train" (docs/architecture.md), ordered by step; a step logged twice
    (a resumed run) keeps its last line. Missing and non-finite values are left out of the series and counted.
    Returns {"window", "n_sigma", "min_history", "grad_norm": {...}, "loss": {...}} where each series
    has score_pct (None when undefined), spikes, values, scored and dropped (missing or non-finite).
    """
    by_step: dict[int, dict] = {}
    for number, record in run.numbered_metrics("train", strict=True):
        try:
            by_step[int(record["step"])] = record
        except (KeyError, TypeError, ValueError):
            raise UserError("train line without an integer 'step'", where=f"{run.metrics_file}:{number}",
                            fix="repair or delete the line") from None
    min_history = window if min_history is None else min_history
    result: dict = {"window": window, "n_sigma": n_sigma, "min_history": min_history}
    for key in ("grad_norm", "loss"):
        raw = [by_step[s].get(key) for s in sorted(by_step)]
        series = [float(v) for v in raw if isinstance(v, (int, float)) and math.isfinite(v)]
        mask = spike_mask(series, window, n_sigma, min_history)
        result[key] = {
            "score_pct": spike_score(series, window, n_sigma, min_history),
            "spikes": int(mask.sum()),
            "values": len(series),
            "scored": max(0, len(series) - min_history),
            "dropped": len(raw) - len(series),
        }
    return result
