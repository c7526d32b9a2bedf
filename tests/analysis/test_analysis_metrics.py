"""The analysis metrics on hand-built inputs whose values are known in closed form."""

import json
import math

import numpy as np
import pytest
import torch

from exoformer.analysis import metrics
from exoformer.errors import UserError
from exoformer.rundir import RunDir

torch.set_num_threads(1)


def uniform_causal_attention(batch: int, heads: int, seq: int) -> torch.Tensor:
    """Query i spreads its weight evenly over keys 0..i."""
    rows = torch.tril(torch.ones(seq, seq))
    rows = rows / rows.sum(-1, keepdim=True)
    return rows.expand(batch, heads, seq, seq).clone()


# --- attention -------------------------------------------------------------------------------------


@pytest.mark.parametrize("seq", [1, 2, 7, 64])
def test_first_token_attention_of_uniform_causal_attention_is_the_mean_of_one_over_i_plus_one(seq):
    expected = sum(1.0 / (i + 1) for i in range(seq)) / seq  # harmonic number H_T / T
    assert metrics.first_token_attention(uniform_causal_attention(2, 3, seq)) == pytest.approx(expected, rel=1e-6)


def test_first_token_attention_is_one_when_every_query_looks_at_position_zero():
    attn = torch.zeros(2, 2, 5, 5)
    attn[..., 0] = 1.0
    assert metrics.first_token_attention(attn) == pytest.approx(1.0)
    assert metrics.attention_entropy(attn) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("seq", [3, 50])
def test_attention_entropy_of_uniform_causal_attention_is_the_mean_log_row_length(seq):
    expected = sum(math.log(i + 1) for i in range(seq)) / seq  # row i is uniform over i+1 keys
    assert metrics.attention_entropy(uniform_causal_attention(2, 2, seq)) == pytest.approx(expected, abs=1e-6)


def test_attention_entropy_is_the_same_when_computed_in_chunks(monkeypatch):
    attn = torch.softmax(torch.randn(3, 4, 16, 16), dim=-1)
    whole = metrics.attention_entropy(attn)
    monkeypatch.setattr(metrics, "_CHUNK_ELEMENTS", 16 * 16 * 5)  # 5 (b, h) rows per chunk, 12 rows
    assert metrics.attention_entropy(attn) == pytest.approx(whole, rel=1e-9)
    direct = -(attn * attn.log()).sum(-1).mean()
    assert whole == pytest.approx(float(direct), rel=1e-5)


# --- token similarity ------------------------------------------------------------------------------


def brute_force_token_similarity(hidden):
    values = []
    for seq in hidden.double():
        cos = torch.nn.functional.cosine_similarity(seq[:, None, :], seq[None, :, :], dim=-1)
        i, j = torch.triu_indices(len(seq), len(seq), offset=1)
        values.append(cos[i, j])
    values = torch.cat(values)
    return float(values.mean()), float(values.std(unbiased=False))


def test_identical_token_vectors_have_similarity_one_and_std_zero():
    hidden = torch.randn(1, 1, 8).expand(3, 10, 8) * torch.rand(3, 10, 1).add(0.5)  # same direction, any length
    mean, std = metrics.token_similarity(hidden)
    assert mean == pytest.approx(1.0, abs=1e-9) and std == pytest.approx(0.0, abs=1e-6)


def test_orthogonal_token_vectors_have_similarity_zero():
    hidden = torch.eye(6).repeat(2, 1, 1) * 3.0  # (2, 6, 6): six orthogonal tokens per sequence
    mean, std = metrics.token_similarity(hidden)
    assert mean == pytest.approx(0.0, abs=1e-12) and std == pytest.approx(0.0, abs=1e-6)


def test_token_similarity_of_two_opposite_pairs():
    v = torch.randn(5)
    hidden = torch.stack([v, 2 * v, -v, -3 * v])[None]  # cosines: 1, 1 within pairs, -1 four times across
    mean, std = metrics.token_similarity(hidden)
    assert mean == pytest.approx(-1 / 3, abs=1e-9)
    assert std == pytest.approx(math.sqrt(8) / 3, abs=1e-9)


@pytest.mark.parametrize("shape", [(3, 12, 5), (2, 5, 12)])  # Gram over d, then over T
def test_token_similarity_matches_the_full_cosine_matrix(shape):
    hidden = torch.randn(*shape) + 0.3
    mean, std = metrics.token_similarity(hidden)
    expected_mean, expected_std = brute_force_token_similarity(hidden)
    assert mean == pytest.approx(expected_mean, abs=1e-10) and std == pytest.approx(expected_std, abs=1e-8)


# --- similarity to embeddings, layer-to-layer ----------------------------------------------------


def test_similarity_to_embeddings_is_the_flattened_sequence_cosine():
    e = torch.randn(2, 4, 3)
    assert metrics.similarity_to_embeddings(3 * e, e) == pytest.approx(1.0)
    assert metrics.similarity_to_embeddings(-e, e) == pytest.approx(-1.0)
    h = torch.stack([e[0], -e[1]])  # one sequence agrees, one opposes
    assert metrics.similarity_to_embeddings(h, e) == pytest.approx(0.0, abs=1e-12)


def test_layer_similarity_matrix_of_scaled_and_flipped_states():
    h = torch.randn(2, 5, 4)
    m = np.array(metrics.layer_similarity_matrix([h, 2 * h, -h]))
    np.testing.assert_allclose(m, [[1, 1, -1], [1, 1, -1], [-1, -1, 1]], atol=1e-6)


def test_layer_similarity_matrix_is_the_mean_per_token_cosine():
    states = [torch.randn(2, 6, 4) for _ in range(3)]
    m = metrics.layer_similarity_matrix(states)
    for i in range(3):
        for j in range(3):
            cos = torch.nn.functional.cosine_similarity(states[i].reshape(-1, 4), states[j].reshape(-1, 4), dim=-1)
            assert m[i][j] == pytest.approx(float(cos.mean()), abs=1e-6)


# --- PCA -------------------------------------------------------------------------------------------


def data_with_variances(variances, rows=300, d=16, seed=0):
    """Centred data whose principal variances are exactly `variances` (orthogonal directions)."""
    g = torch.Generator().manual_seed(seed)
    k = len(variances)
    scores = torch.randn(rows, k, generator=g, dtype=torch.float64)
    scores = torch.linalg.qr(scores - scores.mean(0))[0]  # centred orthonormal columns
    directions = torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))[0]
    x = scores @ torch.diag(torch.tensor(variances, dtype=torch.float64).sqrt()) @ directions.T
    return (x + torch.randn(d, generator=g, dtype=torch.float64)).reshape(3, rows // 3, d)  # any offset


@pytest.mark.parametrize("rank", [1, 5, 12])
def test_data_of_known_rank_has_that_many_components(rank):
    count, fraction = metrics.pca_components(data_with_variances([1.0] * rank), 0.99)
    assert count == rank and fraction == pytest.approx(rank / 16)


@pytest.mark.parametrize("threshold, expected", [(0.45, 1), (0.79, 2), (0.9, 3), (0.99, 4)])
def test_pca_components_is_the_first_index_reaching_the_threshold_plus_one(threshold, expected):
    x = data_with_variances([0.5, 0.3, 0.15, 0.05])  # cumulative 0.5, 0.8, 0.95, 1.0
    assert metrics.pca_components(x, threshold)[0] == expected


def test_pca_of_constant_data_has_no_components_and_rejects_bad_thresholds():
    assert metrics.pca_components(torch.ones(2, 4, 3)) == (0, 0.0)
    with pytest.raises(UserError, match="pca_threshold"):
        metrics.pca_components(torch.randn(2, 4, 3), 1.5)


# --- gates, coefficients, activations -----------------------------------------------------------


def test_gate_stats_mean_and_sparsity():
    assert metrics.gate_stats(torch.full((2, 3, 4, 5), 0.1)) == pytest.approx((0.1, 1.0))
    assert metrics.gate_stats(torch.full((2, 3, 4, 5), 0.5)) == pytest.approx((0.5, 0.0))
    half = torch.tensor([0.1, 0.9, 0.1, 0.9])
    assert metrics.gate_stats(half) == pytest.approx((0.5, 0.5))


@pytest.mark.parametrize("shape, width", [((4, 3), 12), ((4,), 4), ((), 1)])
def test_coefficient_stats_of_static_coefficients(shape, width):
    stats = metrics.coefficient_stats(torch.full(shape, 1.0), torch.full(shape, 2.0))
    assert stats.anchor_mean == 1.0 and stats.self_mean == 2.0
    assert stats.ratio_of_means == pytest.approx(1 / (2 + 1e-6))
    assert stats.ratio == pytest.approx([0.5] * width)


def test_coefficient_stats_of_dynamic_coefficients_average_over_tokens():
    lam1 = torch.tensor([[1.0, 2.0], [3.0, 4.0]])  # (H=2, d_head=2)
    lam2 = torch.tensor([[2.0, 2.0], [2.0, 2.0]])
    s1 = torch.tensor([0.2, 0.4, 0.6]).reshape(1, 1, 3, 1).expand(2, 1, 3, 1)  # mean 0.4 per token
    s2 = torch.full((2, 1, 3, 1), 0.5)
    stats = metrics.coefficient_stats(lam1[None, :, None, :] * s1, lam2[None, :, None, :] * s2)
    assert stats.ratio == pytest.approx((lam1 * 0.4 / (lam2 * 0.5)).reshape(-1).tolist())
    assert stats.anchor_mean == pytest.approx(2.5 * 0.4) and stats.self_mean == pytest.approx(1.0)


def test_massive_activation_is_the_largest_magnitude():
    h = torch.zeros(2, 3, 4)
    h[1, 2, 3] = -7.0
    h[0, 0, 0] = 5.0
    assert metrics.massive_activation(h) == 7.0


# --- spikes ----------------------------------------------------------------------------------------


def brute_force_spike_mask(x, window, n_sigma, min_history):
    mask = np.zeros(len(x), dtype=bool)
    for t in range(min_history, len(x)):
        prev = x[max(0, t - window) : t]
        mask[t] = abs(x[t] - prev.mean()) > n_sigma * prev.std()
    return mask


def noisy_series_with_spikes(n=3000, at=(1500, 2000, 2600), seed=0):
    x = np.random.default_rng(seed).normal(1.0, 0.01, n)
    x[list(at)] += 1.0  # 100 sigma
    return x


def test_three_planted_spikes_give_three_over_n_percent():
    x = noisy_series_with_spikes()
    assert metrics.spike_score(x) == pytest.approx(3 / 3000 * 100)
    assert np.flatnonzero(metrics.spike_mask(x)).tolist() == [1500, 2000, 2600]


def test_spikes_before_a_full_window_are_not_scored_unless_min_history_allows():
    x = noisy_series_with_spikes(n=1500, at=(10, 1200))
    assert metrics.spike_score(x) == pytest.approx(1 / 1500 * 100)  # index 10 has < 1000 predecessors
    assert metrics.spike_score(x, min_history=5) == pytest.approx(2 / 1500 * 100)


def test_spike_mask_matches_a_direct_rolling_window():
    x = np.random.default_rng(1).standard_cauchy(600)  # heavy tails: some values are spikes
    for window, min_history in [(50, 50), (50, 3), (200, 20)]:
        expected = brute_force_spike_mask(x, window, 3.0, min_history)
        np.testing.assert_array_equal(metrics.spike_mask(x, window, 3.0, min_history), expected)
    assert expected.any()


def test_a_flat_series_has_exactly_its_one_spike_and_a_short_one_no_score():
    x = np.full(2000, 0.3)
    x[1500] = 0.9
    assert metrics.spike_score(x) == pytest.approx(1 / 2000 * 100)
    assert metrics.spike_score(np.ones(1000)) is None  # nothing has a full window
    with pytest.raises(UserError, match="min_history"):
        metrics.spike_score(x, window=10, min_history=20)
    with pytest.raises(ValueError, match="finite"):
        metrics.spike_score([1.0, float("nan"), 1.0], window=1)


def test_spike_scores_from_metrics_reads_train_lines(tmp_path):
    grad = noisy_series_with_spikes(n=1200, at=(1100,))
    lines = [json.dumps({"kind": "train", "step": s, "loss": 3.0 + 0.01 * math.sin(s), "grad_norm": g})
             for s, g in enumerate(grad)]
    lines.insert(500, json.dumps({"kind": "val", "step": 500, "val_loss": 99.0}))
    lines.append(json.dumps({"kind": "train", "step": 1199, "loss": float("nan"), "grad_norm": grad[1199]}))
    lines.append('{"kind": "train", "st')  # torn by a crash
    run = RunDir(tmp_path)
    run.metrics_file.write_text("\n".join(lines) + "\n")
    scores = metrics.spike_scores_from_metrics(run)
    assert scores["grad_norm"]["values"] == 1200 and scores["grad_norm"]["spikes"] == 1
    assert scores["grad_norm"]["score_pct"] == pytest.approx(1 / 1200 * 100)
    assert scores["loss"]["dropped"] == 1 and scores["loss"]["values"] == 1199  # step 1199 re-logged as NaN
    assert scores["loss"]["spikes"] == 0


def test_spike_scores_from_metrics_bad_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="no metrics.jsonl"):
        metrics.spike_scores_from_metrics(RunDir(tmp_path))
    run = RunDir(tmp_path)
    run.metrics_file.write_text('{"kind": "train", "step": 0, "loss": 1, "grad_norm": 1}\nnot json\n{"kind": "val"}\n')
    with pytest.raises(UserError, match="metrics.jsonl:2"):
        metrics.spike_scores_from_metrics(run)
    run.metrics_file.write_text('{"kind": "train", "step": "x", "loss": 1, "grad_norm": 1}\n')
    with pytest.raises(UserError, match="metrics.jsonl:1"):
        metrics.spike_scores_from_metrics(run)
