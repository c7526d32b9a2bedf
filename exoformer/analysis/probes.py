"""Run the paper's per-layer probes on one model and one fixed input; return JSON-ready results.

The model's inspection mode streams one `LayerTrace` per block to a callback (docs/architecture.md), and
every attention metric is reduced as soon as its layer arrives, so at most one layer's (B, H, T, T)
attention matrix is alive at a time: at the paper's probe shape (29 x 1024, 16 heads, 4 x 2048 tokens)
one layer is 1 GiB in fp32, all layers together 31 GiB. Hidden states (B*T*d per layer) are kept, since
the layer-to-layer matrix and the similarity to the embeddings need all of them, and the embeddings
(hidden state 0) only arrive when the forward returns.

The inference-time ablations of the paper's appendix C rerun the same probes with the anchor term
(`ablate="anchor"`) or the layer's own term (`ablate="self"`) removed in every mixing layer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from exoformer.analysis import metrics
from exoformer.errors import UserError, did_you_mean
from exoformer.model.config import ABLATIONS

"""'none' is the model as trained; 'anchor' / 'self' drop that term of every mix (paper appendix C)."""

FORMAT = "exoformer.analysis.probes/1"

NO_GATE = "not applicable: the model has no attention gate"
NO_MIXING = "not applicable: the model mixes no projections (anchor 'none')"
NO_ATTENTION = "not computed: attention probabilities were not requested"

_COEF_NAME = re.compile(r"blocks\.(\d+)\.(?:.*\.)?([qkvg])\.coef_(anchor|self)$")
"""Static mixing coefficients by the naming rule of docs/architecture.md: blocks.{i}....{path}.coef_anchor|self."""


def run_probes(model: nn.Module, idx: torch.Tensor, doc_starts: torch.Tensor | None = None, *,
               ablations: Sequence[str] = ABLATIONS, pca_threshold: float = 0.99, attention: bool = True,
               stream: bool = True) -> dict[str, Any]:
    """Every analysis probe (docs/official_code.md 6) for `model` on tokens `idx` (B, T), per layer and per ablation.

    The unablated pass always runs (it also tells whether the model is gated and whether it mixes);
    'anchor' and 'self' run only for mixing models and are "not applicable" otherwise. Runs in fp32
    under no_grad on the model's device (docs/official_code.md 6.1 used bf16, hazard H4; fp32 is what accuracy
    needs). `stream=False` keeps every layer's trace until the forward ends, the naive path that the
    tests and the benchmark compare with; the numbers are the same.

    Returned keys: format, input {batch, seq_len, doc_masking}, n_layer, d_model, gated, mixing,
    pca_threshold, ablations {name: per-metric lists | "not applicable: ..."}, static_coefficients.
    Attention, gate and coefficient lists have one entry per block (L); hidden-state lists one per
    hidden state (L+1, index 0 = embeddings); layer_similarity is (L+1) x (L+1). A non-finite number
    becomes null (JSON has no NaN).
    """
    unknown = [a for a in ablations if a not in ABLATIONS]
    if unknown:
        raise UserError(f"unknown ablation {unknown[0]!r}", where="analysis.ablations",
                        fix=did_you_mean(unknown[0], ABLATIONS))
    if idx.dim() != 2:
        raise UserError(f"probe input must be token ids (B, T), got shape {tuple(idx.shape)}", where="analysis.input",
                        fix="pass a 2-D batch of token ids")
    not_fp32 = sorted({str(p.dtype) for p in model.parameters() if p.is_floating_point() and p.dtype != torch.float32})
    if not_fp32:
        raise UserError(f"probes run in fp32 but the model has {', '.join(not_fp32)} parameters",
                        where="analysis", fix="call model.float() before run_probes")

    device = next(model.parameters()).device
    idx = idx.to(device)
    doc_starts = None if doc_starts is None else doc_starts.to(device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            base, facts = _probe_pass(model, idx, doc_starts, None, pca_threshold, attention, stream)
            results: dict[str, Any] = {"none": base}
            for name in ablations:
                if name == "none":
                    continue
                if not facts["mixing"]:
                    results[name] = NO_MIXING
                else:
                    results[name], _ = _probe_pass(model, idx, doc_starts, name, pca_threshold, attention, stream)
    finally:
        model.train(was_training)

    return _json_safe({
        "format": FORMAT,
        "input": {"batch": int(idx.shape[0]), "seq_len": int(idx.shape[1]), "doc_masking": doc_starts is not None},
        "n_layer": facts["n_layer"],
        "d_model": facts["d_model"],
        "gated": facts["gated"],
        "mixing": facts["mixing"],
        "pca_threshold": pca_threshold,
        "ablations": results,
        "static_coefficients": static_coefficient_stats(model, facts["n_layer"]) if facts["mixing"] else NO_MIXING,
    })


def _probe_pass(model: nn.Module, idx: torch.Tensor, doc_starts: torch.Tensor | None, ablate: str | None,
                pca_threshold: float, attention: bool, stream: bool) -> tuple[dict, dict]:
    """One inspected forward, reduced to per-layer numbers."""
    probe = LayerProbe(pca_threshold=pca_threshold)
    if stream:
        inspection = model.inspect(idx, doc_starts, on_layer=probe, ablate=ablate, attention=attention)
    else:
        inspection = model.inspect(idx, doc_starts, ablate=ablate, attention=attention)
        for trace in inspection.layers:
            probe(trace)
    return probe.finish(inspection.embeddings), probe.facts()


class LayerProbe:
    """The `on_layer` callback: reduces each trace on arrival, keeps only the hidden state."""

    def __init__(self, *, pca_threshold: float = 0.99) -> None:
        self.pca_threshold = pca_threshold
        self.hiddens: list[torch.Tensor] = []
        self.first_token: list[float | None] = []
        self.entropy: list[float | None] = []
        self.gate_mean: list[float | None] = []
        self.gate_sparsity: list[float | None] = []
        self.coefficients: list[dict[str, metrics.CoefficientStats]] = []
        self.hidden_rows: list[dict[str, float]] = []

    def __call__(self, trace: Any) -> None:
        expected = len(self.hiddens)
        if trace.layer != expected:
            raise RuntimeError(f"inspection sent layer {trace.layer}, expected {expected}: traces must come in order")
        attn = trace.attn_probs
        self.first_token.append(None if attn is None else metrics.first_token_attention(attn))
        self.entropy.append(None if attn is None else metrics.attention_entropy(attn))
        gate = metrics.gate_stats(trace.gate) if trace.gate is not None else (None, None)
        self.gate_mean.append(gate[0])
        self.gate_sparsity.append(gate[1])
        self.coefficients.append({path: metrics.coefficient_stats(a, s) for path, (a, s) in trace.coefficients.items()})
        hidden = trace.hidden.detach().float().clone()  # our own copy: the model may reuse its buffer
        self.hidden_rows.append(self._hidden_metrics(hidden))
        self.hiddens.append(hidden)

    def _hidden_metrics(self, hidden: torch.Tensor) -> dict[str, float]:
        sim_mean, sim_std = metrics.token_similarity(hidden)
        components, fraction = metrics.pca_components(hidden, self.pca_threshold)
        return {"token_similarity_mean": sim_mean, "token_similarity_std": sim_std,
                "pca_components": components, "pca_fraction": fraction,
                "massive_activation": metrics.massive_activation(hidden)}

    def facts(self) -> dict[str, Any]:
        return {"n_layer": len(self.hiddens), "d_model": int(self.hiddens[0].shape[-1]) if self.hiddens else 0,
                "gated": any(g is not None for g in self.gate_mean),
                "mixing": any(bool(c) for c in self.coefficients)}

    def finish(self, embeddings: torch.Tensor) -> dict[str, Any]:
        """Add hidden state 0 (the embeddings) and the metrics that need every hidden state."""
        embeddings = embeddings.detach().float()
        states = [embeddings, *self.hiddens]
        rows = [self._hidden_metrics(embeddings), *self.hidden_rows]
        facts = self.facts()
        out: dict[str, Any] = {}
        if all(v is None for v in self.first_token):
            out["first_token_attention"] = out["attention_entropy"] = NO_ATTENTION
        else:
            out["first_token_attention"] = self.first_token
            out["attention_entropy"] = self.entropy
        for key in ("token_similarity_mean", "token_similarity_std", "pca_components", "pca_fraction",
                    "massive_activation"):
            out[key] = [row[key] for row in rows]
        out["similarity_to_embeddings"] = [metrics.similarity_to_embeddings(h, embeddings) for h in states]
        out["layer_similarity"] = metrics.layer_similarity_matrix(states)
        out["gate_mean"] = self.gate_mean if facts["gated"] else NO_GATE
        out["gate_sparsity"] = self.gate_sparsity if facts["gated"] else NO_GATE
        out["coefficients"] = _per_path(self.coefficients) if facts["mixing"] else NO_MIXING
        return out


def static_coefficient_stats(model: nn.Module, n_layer: int) -> dict[str, dict[str, list]]:
    """Official 6.2's lambda statistics: the coefficient parameters themselves, dynamic scales ignored.

    Found by name (`blocks.{i}....{path}.coef_anchor` / `coef_self`); layers without a coefficient get
    null. For a static model these equal the effective coefficients of the unablated pass.
    """
    found: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for name, param in model.named_parameters():
        match = _COEF_NAME.search(name)
        if match:
            found.setdefault((int(match[1]), match[2]), {})[match[3]] = param.detach()
    per_layer: list[dict[str, metrics.CoefficientStats]] = [{} for _ in range(n_layer)]
    for (layer, path), pair in found.items():
        if {"anchor", "self"} <= pair.keys() and layer < n_layer:
            per_layer[layer][path] = metrics.coefficient_stats(pair["anchor"], pair["self"])
    return _per_path(per_layer)


def _per_path(per_layer: list[dict[str, metrics.CoefficientStats]]) -> dict[str, dict[str, list]]:
    """[{path: stats}] per layer -> {path: {statistic: [value per layer, null where it does not mix]}}."""
    paths = [p for p in "qkvg" if any(p in layer for layer in per_layer)]
    fields = ("anchor_mean", "self_mean", "ratio_of_means", "ratio")
    return {path: {f: [getattr(layer[path], f) if path in layer else None for layer in per_layer] for f in fields}
            for path in paths}


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value
