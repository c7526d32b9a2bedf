"""Causal self-attention with optional gating, projection mixing and document masking (official 1.1-1.6)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from exoformer.model.config import ModelConfig
from exoformer.model.layers import PathNorms, RMSNorm, ZeroInitLinear, apply_rotary, rms_norm
from exoformer.model.mixing import Mixer


# ----------------------------------------------------------------------------- masks

@dataclass(slots=True)
class AttentionMask:
    """What the attention kernels need for one forward, built once and shared by all layers.

    `doc_ids` is None for plain causal attention. Otherwise key j is visible to query i iff j <= i and
    doc_id[j] == doc_id[i], with doc_id = cumsum(doc_starts). `dense` is the (B, 1, T, T) bool mask for SDPA
    (and inspection); `block` a FlexAttention BlockMask on CUDA when available.
    """

    doc_ids: torch.Tensor | None = None
    dense: torch.Tensor | None = None
    block: object | None = None

    def dense_mask(self, seq_len: int, device: torch.device) -> torch.Tensor:
        """(B|1, 1, T, T) bool mask, built on demand (inspection always needs it)."""
        if self.dense is not None:
            return self.dense
        causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()
        if self.doc_ids is None:
            return causal[None, None]
        same_doc = self.doc_ids[:, :, None] == self.doc_ids[:, None, :]
        return (causal & same_doc)[:, None]


def build_mask(doc_starts: torch.Tensor | None, seq_len: int, device: torch.device) -> AttentionMask:
    if doc_starts is None:
        return AttentionMask()
    if doc_starts.dtype != torch.bool or doc_starts.dim() != 2 or doc_starts.shape[1] != seq_len:
        raise ValueError(f"doc_starts must be a bool tensor (B, {seq_len}), got {doc_starts.dtype} "
                         f"{tuple(doc_starts.shape)}")
    doc_ids = torch.cumsum(doc_starts.to(torch.int32), dim=1)
    mask = AttentionMask(doc_ids=doc_ids)
    if device.type == "cuda" and _flex_ok():
        mask.block = _flex_block_mask(doc_ids, seq_len)
    else:
        mask.dense = mask.dense_mask(seq_len, device)
    return mask


_FLEX: dict = {}


def _flex_ok() -> bool:
    """FlexAttention serves document masks on CUDA; guarded: any import/compile failure falls back to SDPA."""
    if "ok" not in _FLEX:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            _FLEX.update(create_block_mask=create_block_mask, attend=torch.compile(flex_attention, dynamic=False),
                         ok=True)
        except Exception:  # noqa: BLE001 - any failure means: use the SDPA path
            _FLEX["ok"] = False
    return _FLEX["ok"]


def _flex_block_mask(doc_ids: torch.Tensor, seq_len: int):
    def same_doc_causal(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (doc_ids[b, kv_idx] == doc_ids[b, q_idx])

    return _FLEX["create_block_mask"](same_doc_causal, doc_ids.shape[0], None, seq_len, seq_len,
                                      device=doc_ids.device)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: AttentionMask) -> torch.Tensor:
    """(B, H, T, dh) each -> (B, H, T, dh), softmax scale 1/sqrt(dh)."""
    if mask.doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if mask.block is not None:
        if _FLEX.get("verified"):
            return _FLEX["attend"](q, k, v, block_mask=mask.block)
        if "verified" not in _FLEX:
            return _verify_flex_once(q, k, v, mask)
        mask.block, mask.dense = None, mask.dense_mask(q.shape[2], q.device)  # flex failed its check
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.dense)


def _verify_flex_once(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: AttentionMask) -> torch.Tensor:
    """First FlexAttention call of the process: compare it with dense-mask SDPA on the real inputs; on any
    error or disagreement switch this process to the SDPA path (correct everywhere, slower on long inputs)."""
    dense = mask.dense_mask(q.shape[2], q.device)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    try:
        out = _FLEX["attend"](q, k, v, block_mask=mask.block)
        tol = 1e-2 if q.dtype in (torch.bfloat16, torch.float16) else 1e-4
        ok = bool(torch.allclose(out.float(), reference.float(), atol=tol, rtol=tol))
    except Exception:  # noqa: BLE001 - any failure: fall back to SDPA
        ok = False
    _FLEX["verified"], _FLEX["ok"] = ok, ok
    return reference


def attend_explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Inspection: probabilities with an fp32 softmax, returned with the output."""
    scores = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    return (probs.to(v.dtype) @ v), probs


# ----------------------------------------------------------------------------- attention

@dataclass(slots=True)
class Projections:
    """One layer's attention inputs after mixing, QK-norm and RoPE."""

    q: torch.Tensor  # (B, H, T, dh)
    k: torch.Tensor
    v: torch.Tensor
    gate_logits: torch.Tensor | None  # (B, T, H, dh), pre-sigmoid
    anchor_out: torch.Tensor | None  # internal anchor provided by layer 0: (B, T, n_mix, H, dh)
    coefficients: tuple | None  # raw pieces; Mixer.effective_coefficients gives (anchor, self) coefficients


class Attention(nn.Module):
    """Fused q,k,v(,g) projection -> mix with the anchor -> QK-norm -> RoPE -> SDPA -> sigmoid gate -> out-proj.

    Variant choices are made here, at construction: `mix` exists only in mixing layers; `anchor_norms`
    only in layer 0 of an internal-anchor model (it provides the anchor for layers >= 1).
    """

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.n_proj, self.n_head, self.d_head = len(cfg.proj_paths), cfg.n_head, cfg.d_head
        self.gated = cfg.gated
        self.eps = cfg.norm_eps
        self.qkv = nn.Linear(cfg.d_model, self.n_proj * cfg.d_model, bias=False)
        self.out = ZeroInitLinear(cfg.d_model, cfg.d_model, bias=False)
        self.q_norm = RMSNorm(cfg.d_head, cfg.norm_eps)
        self.k_norm = RMSNorm(cfg.d_head, cfg.norm_eps)
        self.mix = Mixer(cfg) if layer in cfg.mixing_layers() else None
        self.provides_anchor = cfg.anchor == "internal" and layer == 0
        if self.provides_anchor:
            # v/g anchors get their own norms in layer 0; q/k anchors reuse layer 0's QK-norm (official 1.4).
            vg_normed = tuple(p for p in cfg.anchor_norm_paths if p in ("v", "g"))
            self.anchor_norms = PathNorms(cfg.mix_paths, vg_normed, cfg.d_head, cfg.norm_eps)
            self.anchor_qk_normed = tuple(p for p in cfg.anchor_norm_paths if p in ("q", "k"))
            self.anchor_paths = cfg.mix_paths

    def project(self, x: torch.Tensor, anchor: torch.Tensor | None, rope: tuple[torch.Tensor, torch.Tensor],
                ablate: str | None = None) -> Projections:
        if self.mix is None:
            own, coefficients = self.qkv(x).unflatten(-1, (self.n_proj, self.n_head, self.d_head)), None
        else:  # the mixer applies the projection itself (it folds coefficients into the weight)
            own, coefficients = self.mix(x, self.qkv.weight, anchor, ablate)
        # own: (B, T, n_proj, H, dh)
        qk_gains = torch.stack([self.q_norm.weight, self.k_norm.weight]).unsqueeze(1)  # (2, 1, dh)
        qk = rms_norm(own[:, :, :2], qk_gains, self.eps)  # (B, T, 2, H, dh)
        anchor_out = self._internal_anchor(own, qk) if self.provides_anchor else None
        q, k = apply_rotary(qk, *rope).transpose(1, 3).unbind(2)  # each (B, H, T, dh)
        v = own[:, :, 2].transpose(1, 2)
        gate_logits = own[:, :, 3] if self.gated else None
        return Projections(q, k, v, gate_logits, anchor_out, coefficients)

    def _internal_anchor(self, raw: torch.Tensor, qk_normed: torch.Tensor) -> torch.Tensor:
        """Layer 0's anchors, all pre-RoPE: QK-normed or raw q/k, own-normed or raw v/g (official 1.4/1.5)."""
        index = {"q": 0, "k": 1, "v": 2, "g": 3}
        parts = [qk_normed[:, :, index[p]] if p in self.anchor_qk_normed else raw[:, :, index[p]]
                 for p in self.anchor_paths]
        return self.anchor_norms(torch.stack(parts, dim=2))

    def _output(self, y: torch.Tensor, gate_logits: torch.Tensor | None) -> torch.Tensor:
        y = y.transpose(1, 2)  # (B, T, H, dh)
        if gate_logits is not None:
            y = y * torch.sigmoid(gate_logits)
        return self.out(y.flatten(2))

    def forward(self, x: torch.Tensor, anchor: torch.Tensor | None, rope: tuple[torch.Tensor, torch.Tensor],
                mask: AttentionMask) -> tuple[torch.Tensor, torch.Tensor | None]:
        p = self.project(x, anchor, rope)
        return self._output(attend(p.q, p.k, p.v, mask), p.gate_logits), p.anchor_out

    def inspect(self, x: torch.Tensor, anchor: torch.Tensor | None, rope: tuple[torch.Tensor, torch.Tensor],
                mask: AttentionMask, ablate: str | None, with_probs: bool
                ) -> tuple[torch.Tensor, Projections, torch.Tensor | None]:
        """Like forward, with the projections and (optionally) explicit fp32 attention probabilities."""
        p = self.project(x, anchor, rope, ablate)
        if with_probs:
            y, probs = attend_explicit(p.q, p.k, p.v, mask.dense_mask(x.shape[1], x.device))
        else:
            y, probs = attend(p.q, p.k, p.v, mask), None
        return self._output(y, p.gate_logits), p, probs
