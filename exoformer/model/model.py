"""ExoTransformer: one pre-norm decoder that expresses every variant of the paper by its ModelConfig.

Reads top to bottom, each part using only what is above it:
  1. building blocks: RMSNorm, per-path head norms, RoPE, SwiGLU (docs/official_code.md 1.1)
  2. projection mixing, paper Eq. 10: coefficients, the exogenous anchor, the mixer (1.2-1.6)
  3. attention: masks, the two kernels (sdpa | flex), the attention module
  4. the block, 5. the model, 6. tracing for analyses (the same forward, with a trace sink).

Tensors of several projections are stacks of paths in the fused-projection order q, k, v(, g):
(B, T, n_paths, H, d_head).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from exoformer.errors import UserError
from exoformer.model.config import ModelConfig, resolve_attention

# ============================================================================ 1. building blocks


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim, computed in fp32 and cast back, then the gain (docs/official_code.md 1.1)."""
    y = F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)
    return y * weight.to(x.dtype)


class RMSNorm(nn.Module):
    """y = x * rsqrt(mean(x^2) + eps) * g, gain initialised to 1, no bias."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class PathNorms(nn.ModuleDict):
    """Per-head RMSNorms with one gain (d_head,) per path, applied to a stack of paths (B, T, n, H, d_head).

    `paths` names the entries along dim 2; only those in `normed` are normalised (the others pass through).
    When every path is normalised, one norm over the whole stack runs with the gains stacked.
    """

    def __init__(self, paths: tuple[str, ...], normed: tuple[str, ...], d_head: int, eps: float) -> None:
        super().__init__({p: RMSNorm(d_head, eps) for p in paths if p in normed})
        self.paths = paths
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if len(self) == len(self.paths):
            gains = torch.stack([self[p].weight for p in self.paths]).unsqueeze(1)  # (n, 1, d_head)
            return rms_norm(x, gains, self.eps)
        if not len(self):
            return x
        parts = [self[p](x[:, :, i]) if p in self else x[:, :, i] for i, p in enumerate(self.paths)]
        return torch.stack(parts, dim=2)


class Rotary(nn.Module):
    """RoPE, rotate-half (GPT-NeoX) convention, theta from the config; positions 0..T-1 (not reset per document)."""

    def __init__(self, d_head: int, seq_len: int, theta: float) -> None:
        super().__init__()
        self.d_head, self.seq_len, self.theta = d_head, seq_len, theta
        self.register_buffer("cos", torch.empty(seq_len, d_head), persistent=False)
        self.register_buffer("sin", torch.empty(seq_len, d_head), persistent=False)
        self.reset_tables()

    @torch.no_grad()
    def reset_tables(self) -> None:
        """(Re)build the fp32 tables in place; needed after building on the meta device and `to_empty`."""
        device = self.cos.device
        inv_freq = self.theta ** (-torch.arange(0, self.d_head, 2, dtype=torch.float32, device=device) / self.d_head)
        angles = torch.outer(torch.arange(self.seq_len, dtype=torch.float32, device=device), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)  # (T, d_head), frequency table cat(freqs, freqs)
        self.cos.copy_(angles.cos())
        self.sin.copy_(angles.sin())

    def tables(self, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape (T, 1, 1, d_head): broadcast over a (B, T, n_paths, H, d_head) stack."""
        if seq_len > self.seq_len:
            raise ValueError(f"sequence length {seq_len} exceeds the model's seq_len {self.seq_len}")
        return self.cos[:seq_len, None, None, :], self.sin[:seq_len, None, None, :]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x' = x cos + rot(x) sin with rot([x1, x2]) = [-x2, x1]; tables cast to x's dtype (as official)."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class ZeroInitLinear(nn.Linear):
    """A Linear that `ExoTransformer.init_weights` sets to zero (attention out-proj, MLP fc2, LM head, dynamic fc2)."""


class SwiGLU(nn.Module):
    """fc1: d -> ratio*d split into [value | gate]; value * SiLU(gate); fc2: (ratio/2)*d -> d, zero-init."""

    def __init__(self, d_model: int, mlp_ratio: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, mlp_ratio * d_model, bias=False)
        self.fc2 = ZeroInitLinear(mlp_ratio * d_model // 2, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(value * F.silu(gate))


# ============================================================================ 2. projection mixing (Eq. 10)
#
# For every mixed path S of a mixing layer:   S~ = c_anchor * A_S + c_self * S_layer     (paper Eq. 10)
# S_layer: the layer's own raw projection (pre QK-norm, pre RoPE, pre sigmoid); A_S: the anchor.
# Static coefficients are learnable tensors of shape (H, d_head) | (H,) | () (granularity E | H | S).
# Dynamic coefficients multiply each by a per-token scale s in (0, 1) from a small MLP of the layer input.


class PathCoefficients(nn.Module):
    """The two learnable, unconstrained coefficients of one mixed path in one layer (shape by granularity)."""

    def __init__(self, shape: tuple[int, ...], init: float) -> None:
        super().__init__()
        self.init = init
        self.coef_anchor = nn.Parameter(torch.full(shape, init))
        self.coef_self = nn.Parameter(torch.full(shape, init))


class DynamicCoefficients(nn.Module):
    """Per-token scales s = sigmoid(fc2(GELU(fc1(x)))), d -> hidden -> 2 per projection (docs/official_code.md 1.6).

    Output order [q1, q2, k1, k2, v1, v2, g1, g2] over all projections, mixed or not (as the official code).
    fc2 weight and bias start at zero, so s = 0.5 exactly at init. Hazard H5 (docs/official_code.md): the
    official code means to do the same but its `_init_weights` re-initialises fc2.weight by accident; we do not.
    """

    def __init__(self, d_model: int, hidden: int, n_proj: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden, bias=False)
        self.fc2 = ZeroInitLinear(hidden, 2 * n_proj, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, n_proj, 2): [..., 0] scales the anchor coefficient, [..., 1] the own one."""
        return self.from_hidden(self.fc1(x))

    def from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """The rest of forward, given fc1(x) (the fused mixing computes fc1 inside the projection's matmul)."""
        return torch.sigmoid(self.fc2(F.gelu(hidden))).unflatten(-1, (-1, 2))


class ExogenousAnchor(nn.Module):
    """A_S = Norm_S(h W_S): one fused d -> n_proj*d projection (`anchor.proj`), computed once per forward.

    h is the raw token embedding for anchor 'h0' (no norm, before anything else; docs/official_code.md 1.5), or the
    output of block 0 / 1 for 'h1' / 'h2' (raw as well [inference: the paper gives no norm]). The weight has
    rows for every projection as the official code; only the mixed paths' rows are multiplied.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.shape = (len(cfg.mix_paths), cfg.n_head, cfg.d_head)
        self.proj = nn.Linear(cfg.d_model, len(cfg.proj_paths) * cfg.d_model, bias=False)
        self.norms = PathNorms(cfg.mix_paths, cfg.anchor_norm_paths, cfg.d_head, cfg.norm_eps)
        d, index = cfg.d_model, [cfg.proj_paths.index(p) for p in cfg.mix_paths]
        rows = [r for i in index for r in range(i * d, (i + 1) * d)]
        self.rows = None if len(index) == len(cfg.proj_paths) else rows

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, n_mix, H, d_head)."""
        weight = self.proj.weight if self.rows is None else self.proj.weight[self.rows]
        return self.norms(F.linear(h, weight).unflatten(-1, self.shape))


class Mixer(nn.Module):
    """Eq. 10 for the mixed paths of one layer: coefficients per path, optional dynamic scales, optional post-mix
    norms. `forward` is the plain form; `project_and_mix` the fused one (see its docstring), same result."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.paths = cfg.proj_paths
        self.mix_paths = cfg.mix_paths
        self.index = [cfg.proj_paths.index(p) for p in cfg.mix_paths]
        self.full = self.index == list(range(len(self.paths)))
        contiguous = self.index == list(range(self.index[0], self.index[-1] + 1))
        self.take = slice(self.index[0], self.index[-1] + 1) if contiguous else self.index
        """Selects the mixed paths along dim 2: a slice (a view) when they are contiguous, else a copy."""
        self.granularity = cfg.granularity
        self.head = (cfg.n_head, cfg.d_head)
        init = 2 * cfg.coef_init if cfg.dynamic else cfg.coef_init  # dynamic: coef x 0.5 scale = coef_init
        for p in cfg.mix_paths:
            self.add_module(p, PathCoefficients(cfg.coefficient_shape(), init))
        self.dynamic = DynamicCoefficients(cfg.d_model, cfg.dynamic_hidden, len(self.paths)) if cfg.dynamic else None
        self.post_norm = (PathNorms(cfg.mix_paths, cfg.post_mix_norm_paths, cfg.d_head, cfg.norm_eps)
                          if cfg.post_mix_norm_paths else None)

    def static(self, ablate: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(c_anchor, c_self) of every mixed path, each (1, 1, n_mix, H|1, d_head|1); `ablate` zeroes one."""
        def stacked(name: str) -> torch.Tensor:
            c = torch.stack([getattr(getattr(self, p), name) for p in self.mix_paths])
            c = {"elementwise": c, "headwise": c.unsqueeze(-1), "scalar": c.view(-1, 1, 1)}[self.granularity]
            return c[None, None]

        c_anchor, c_self = stacked("coef_anchor"), stacked("coef_self")
        if ablate == "anchor":
            c_anchor = torch.zeros_like(c_anchor)
        elif ablate == "self":
            c_self = torch.zeros_like(c_self)
        return c_anchor, c_self

    def forward(self, x: torch.Tensor, own: torch.Tensor, anchor: torch.Tensor, ablate: str | None = None
                ) -> tuple[torch.Tensor, Callable[[], tuple[torch.Tensor, torch.Tensor]]]:
        """Eq. 10, plainly. x: the layer input (B, T, d); own: its projections (B, T, n_proj, H, dh); anchor:
        (B, T, n_mix, H, dh). Returns every projection with the mixed ones replaced, and a function giving the
        effective (c_anchor, c_self), each broadcastable to (B, T, n_mix, H, dh) (called only when tracing)."""
        dtype = own.dtype  # coefficients are cast to the activation dtype (docs/official_code.md 1.1, precision)
        c_anchor, c_self = (c.to(dtype) for c in self.static(ablate))
        if self.dynamic is not None:
            s = self.dynamic(x)[:, :, self.take].to(dtype)  # (B, T, n_mix, 2), one scale per token and path
            c_anchor = c_anchor * s[..., 0, None, None]
            c_self = c_self * s[..., 1, None, None]
        mixed = c_anchor * anchor.to(dtype) + c_self * own[:, :, self.take]
        return self._merge(own, self._post_norm(mixed)), lambda: (c_anchor, c_self)

    def project_and_mix(self, x: torch.Tensor, weight: torch.Tensor, anchor: torch.Tensor, ablate: str | None = None
                        ) -> tuple[torch.Tensor, Callable[[], tuple[torch.Tensor, torch.Tensor]]]:
        """The same as `forward(x, x @ weight.T, anchor)`, faster in eager mode (benchmarks/bench_model.py):
        - c_self is folded into the projection weight's rows (c * (x W) = x (c W)): it scales n_proj*d x d
          weights instead of B*T*n_proj*d activations, one elementwise pass fewer each way;
        - the dynamic MLP's fc1 rides along in the same matmul (one GEMM instead of a skinny second one);
        - the anchor term is one addcmul, and the effective coefficients are multiplied out only when asked.
        """
        c_anchor, c_self = self.static(ablate)
        weight = weight * self._row_scale(c_self).to(weight.dtype)[:, None]
        if self.dynamic is None:
            own = F.linear(x, weight)
        else:
            own, hidden = F.linear(x, torch.cat([weight, self.dynamic.fc1.weight])).split(
                [weight.shape[0], self.dynamic.fc1.out_features], dim=-1)
        own = own.unflatten(-1, (len(self.paths), *self.head))
        dtype = own.dtype
        own_mixed = own[:, :, self.take]
        c_anchor, c_self = c_anchor.to(dtype), c_self.to(dtype)
        if self.dynamic is None:
            mixed = torch.addcmul(own_mixed, c_anchor, anchor.to(dtype))
            return self._merge(own, self._post_norm(mixed)), lambda: (c_anchor, c_self)
        s = self.dynamic.from_hidden(hidden)[:, :, self.take].to(dtype)
        s_anchor, s_self = s[..., 0, None, None], s[..., 1, None, None]
        mixed = torch.addcmul(own_mixed * s_self, anchor.to(dtype) * c_anchor, s_anchor)
        return self._merge(own, self._post_norm(mixed)), lambda: (c_anchor * s_anchor, c_self * s_self)

    def _row_scale(self, c_self: torch.Tensor) -> torch.Tensor:
        """(n_proj*d,) scale of the fused projection's output rows: c_self for mixed paths, 1 elsewhere."""
        rows = c_self[0, 0].expand(len(self.mix_paths), *self.head)
        if self.full:
            return rows.reshape(-1)
        by_path = {i: rows[j].reshape(-1) for j, i in enumerate(self.index)}
        ones = c_self.new_ones(self.head[0] * self.head[1])
        return torch.cat([by_path.get(i, ones) for i in range(len(self.paths))])

    def _post_norm(self, mixed: torch.Tensor) -> torch.Tensor:
        return mixed if self.post_norm is None else self.post_norm(mixed)

    def _merge(self, own: torch.Tensor, mixed: torch.Tensor) -> torch.Tensor:
        """Put the mixed paths back among the unmixed ones (nothing to do when every path is mixed)."""
        if self.full:
            return mixed
        by_index = {i: mixed[:, :, j] for j, i in enumerate(self.index)}
        return torch.stack([by_index.get(i, own[:, :, i]) for i in range(len(self.paths))], dim=2)


# ============================================================================ 3. attention

# ModelConfig.attention picks the kernel: 'sdpa' is torch's scaled_dot_product_attention with the causal flag
# or a dense (B, 1, T, T) document mask; 'flex' is FlexAttention with a block mask (CUDA; CPU only without
# gradients, torch has no CPU backward), which skips fully masked blocks of packed documents; 'auto' is flex on
# CUDA and sdpa elsewhere. The causal block mask is cached per length; a document mask is built per batch.


@dataclass(slots=True)
class AttentionMask:
    """What the attention kernel needs for one forward, built once and shared by all layers.

    `doc_ids` is None for plain causal attention. Otherwise key j is visible to query i iff j <= i and
    doc_id[j] == doc_id[i], with doc_id = cumsum(doc_starts). `dense` is the bool mask for sdpa (built on
    demand: inspection always needs it); `block` the FlexAttention BlockMask.
    """

    seq_len: int
    doc_ids: torch.Tensor | None = None
    dense: torch.Tensor | None = None
    block: object | None = None

    def dense_mask(self, device: torch.device) -> torch.Tensor:
        """(B|1, 1, T, T) bool mask."""
        if self.dense is None:
            causal = torch.ones(self.seq_len, self.seq_len, dtype=torch.bool, device=device).tril()
            if self.doc_ids is None:
                self.dense = causal[None, None]
            else:
                self.dense = (causal & (self.doc_ids[:, :, None] == self.doc_ids[:, None, :]))[:, None]
        return self.dense


def build_mask(doc_starts: torch.Tensor | None, seq_len: int, device: torch.device, kernel: str) -> AttentionMask:
    if doc_starts is not None and (doc_starts.dtype != torch.bool or doc_starts.dim() != 2
                                   or doc_starts.shape[1] != seq_len):
        raise ValueError(f"doc_starts must be a bool tensor (B, {seq_len}), got {doc_starts.dtype} "
                         f"{tuple(doc_starts.shape)}")
    doc_ids = None if doc_starts is None else torch.cumsum(doc_starts.to(torch.int32), dim=1)
    mask = AttentionMask(seq_len, doc_ids)
    if resolve_attention(kernel, torch.device(device).type) == "flex":
        mask.block = causal_block_mask(seq_len, device) if doc_ids is None else flex_block_mask(doc_ids, seq_len,
                                                                                                  device)
    elif doc_ids is not None:
        mask.dense_mask(device)
    return mask


def causal_block_mask(seq_len: int, device: torch.device | str):
    """The causal BlockMask of one length on one device, built once per process (it depends on nothing else)."""
    return _causal_block_mask(seq_len, str(torch.device(device)))


@functools.lru_cache(maxsize=16)
def _causal_block_mask(seq_len: int, device: str):
    return flex_block_mask(None, seq_len, torch.device(device))


def flex_block_mask(doc_ids: torch.Tensor | None, seq_len: int, device: torch.device):
    """FlexAttention BlockMask for causal (and, with doc_ids, same-document) attention."""
    from torch.nn.attention.flex_attention import create_block_mask

    if doc_ids is None:
        def allowed(b, h, q_idx, kv_idx):
            return kv_idx <= q_idx
        batch = None
    else:
        def allowed(b, h, q_idx, kv_idx):
            return (kv_idx <= q_idx) & (doc_ids[b, kv_idx] == doc_ids[b, q_idx])
        batch = doc_ids.shape[0]
    return create_block_mask(allowed, batch, None, seq_len, seq_len, device=device)


@functools.cache
def _compiled_flex():
    """FlexAttention only fuses when compiled; compiled once per process (a kernel, not a decision)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def check_flex_device(q: torch.Tensor) -> None:
    """One-line UserError where torch's FlexAttention cannot run, instead of its traceback."""
    if q.device.type == "cuda":
        return
    if q.device.type == "cpu" and not (torch.is_grad_enabled() and q.requires_grad):
        return
    need = "training on CPU (torch's FlexAttention has no CPU backward)" if q.device.type == "cpu" else q.device.type
    raise UserError(f"attention 'flex' cannot run on {need}", where="model.attention",
                    fix="set model.attention: sdpa, or run on a CUDA GPU")


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: AttentionMask) -> torch.Tensor:
    """(B, H, T, dh) each -> (B, H, T, dh), softmax scale 1/sqrt(dh), with the kernel the mask was built for."""
    if mask.block is not None:
        check_flex_device(q)
        return _compiled_flex()(q, k, v, block_mask=mask.block)
    if mask.doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.dense)


def attend_explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """For tracing: the output and the probabilities, from an fp32 softmax."""
    scores = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    return (probs.to(v.dtype) @ v), probs


class Attention(nn.Module):
    """Fused q,k,v(,g) projection -> Eq. 10 mixing -> QK-norm -> RoPE -> attention -> sigmoid gate -> out-proj.

    Variant choices are made here, at construction: `mix` exists only in mixing layers; `anchor_norms`
    only in layer 0 of an internal-anchor model (it provides the anchor for layers >= 1).
    """

    def __init__(self, cfg: ModelConfig, layer: int, fused_mixing: bool) -> None:
        super().__init__()
        self.n_proj, self.n_head, self.d_head = len(cfg.proj_paths), cfg.n_head, cfg.d_head
        self.gated = cfg.gated
        self.eps = cfg.norm_eps
        self.qkv = nn.Linear(cfg.d_model, self.n_proj * cfg.d_model, bias=False)
        self.out = ZeroInitLinear(cfg.d_model, cfg.d_model, bias=False)
        self.q_norm = RMSNorm(cfg.d_head, cfg.norm_eps)
        self.k_norm = RMSNorm(cfg.d_head, cfg.norm_eps)
        self.mix = Mixer(cfg) if layer in cfg.mixing_layers() else None
        self.fused_mixing = fused_mixing
        self.provides_anchor = cfg.anchor == "internal" and layer == 0
        if self.provides_anchor:
            # v/g anchors get their own norms in layer 0; q/k anchors reuse layer 0's QK-norm
            # (docs/official_code.md 1.4).
            vg_normed = tuple(p for p in cfg.anchor_norm_paths if p in ("v", "g"))
            self.anchor_norms = PathNorms(cfg.mix_paths, vg_normed, cfg.d_head, cfg.norm_eps)
            self.anchor_qk_normed = tuple(p for p in cfg.anchor_norm_paths if p in ("q", "k"))
            self.anchor_index = [cfg.proj_paths.index(p) for p in cfg.mix_paths]

    def forward(self, x: torch.Tensor, anchor: torch.Tensor | None, rope: tuple[torch.Tensor, torch.Tensor],
                mask: AttentionMask, trace: Tracer | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: the normed layer input (B, T, d). Returns the output and, from layer 0 of an internal-anchor
        model, the anchor for later layers (else None). `trace` records this layer's internals."""
        ablate = None if trace is None else trace.ablate
        if self.mix is None:
            own, coefficients = self.qkv(x).unflatten(-1, (self.n_proj, self.n_head, self.d_head)), None
        elif self.fused_mixing:
            own, coefficients = self.mix.project_and_mix(x, self.qkv.weight, anchor, ablate)
        else:
            raw = self.qkv(x).unflatten(-1, (self.n_proj, self.n_head, self.d_head))
            own, coefficients = self.mix(x, raw, anchor, ablate)
        # own: (B, T, n_proj, H, dh), mixed where this layer mixes
        qk_gains = torch.stack([self.q_norm.weight, self.k_norm.weight]).unsqueeze(1)  # (2, 1, dh)
        qk = rms_norm(own[:, :, :2], qk_gains, self.eps)  # (B, T, 2, H, dh)
        anchor_out = self._internal_anchor(own, qk) if self.provides_anchor else None
        q, k = apply_rotary(qk, *rope).transpose(1, 3).unbind(2)  # each (B, H, T, dh)
        v = own[:, :, 2].transpose(1, 2)
        if trace is not None and trace.attention:
            y, probs = attend_explicit(q, k, v, mask.dense_mask(x.device))
        else:
            y, probs = attend(q, k, v, mask), None
        y = y.transpose(1, 2)  # (B, T, H, dh)
        gate = torch.sigmoid(own[:, :, 3]) if self.gated else None
        if gate is not None:
            y = y * gate
        if trace is not None:
            trace.record_attention(probs, gate, self.mix, coefficients)
        return self.out(y.flatten(2)), anchor_out

    def _internal_anchor(self, raw: torch.Tensor, qk_normed: torch.Tensor) -> torch.Tensor:
        """Layer 0's anchors, all pre-RoPE: QK-normed or raw q/k, own-normed or raw v/g
        (docs/official_code.md 1.4/1.5)."""
        parts = [qk_normed[:, :, i] if p in self.anchor_qk_normed else raw[:, :, i]
                 for p, i in zip(self.anchor_norms.paths, self.anchor_index)]
        return self.anchor_norms(torch.stack(parts, dim=2))


# ============================================================================ 4. block


class Block(nn.Module):
    """x <- x + Attn(RMSNorm(x)); x <- x + MLP(RMSNorm(x)) (norm_pos 'before', as the official train.py)."""

    def __init__(self, cfg: ModelConfig, layer: int, fused_mixing: bool) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, layer, fused_mixing)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg.d_model, cfg.mlp_ratio)

    def forward(self, h: torch.Tensor, anchor: torch.Tensor | None, rope: tuple[torch.Tensor, torch.Tensor],
                mask: AttentionMask, trace: Tracer | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns the new hidden state and the anchor for later layers (layer 0 provides the internal one)."""
        attn_out, anchor_out = self.attn(self.attn_norm(h), anchor, rope, mask, trace)
        h = h + attn_out
        h = h + self.mlp(self.mlp_norm(h))
        return h, anchor if anchor_out is None else anchor_out


# ============================================================================ 5. model


class ExoTransformer(nn.Module):
    """Decoder-only Transformer with optional gated attention and projection mixing (paper section 3).

    `model(idx, doc_starts=None) -> logits (B, T, vocab)` = `lm_head(hidden_states(idx, doc_starts))`.
    Build on the meta device for counting; after `to_empty(device=...)` call `init_weights()` (it also
    rebuilds the RoPE tables). `fused_mixing` picks `Mixer.project_and_mix` over the plain `Mixer.forward`
    (the same values up to rounding; the fused one is faster in eager mode, benchmarks/bench_model.py).
    """

    def __init__(self, config: ModelConfig, *, fused_mixing: bool = True) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.rope = Rotary(config.d_head, config.seq_len, config.rope_theta)
        self.anchor = ExogenousAnchor(config) if config.anchor_depth is not None else None
        self.blocks = nn.ModuleList(Block(config, i, fused_mixing) for i in range(config.n_layer))
        self.final_norm = RMSNorm(config.d_model, config.norm_eps)
        self.lm_head = ZeroInitLinear(config.d_model, config.vocab_size, bias=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """Trunc-normal(std, +-cutoff*std) for Linear/Embedding; zeros for ZeroInitLinear (attention out-proj,
        MLP fc2, LM head, dynamic fc2 incl. bias; the dynamic fc2 weight trunc-normal under
        `dynamic_fc2_init: official`, hazard H5); gains 1; coefficients at their init (docs/official_code.md 1.1)."""
        std, cut = self.config.init_std, self.config.init_cutoff * self.config.init_std
        for module in self.modules():
            if isinstance(module, ZeroInitLinear):
                nn.init.zeros_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.trunc_normal_(module.weight, mean=0.0, std=std, a=-cut, b=cut)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
            elif isinstance(module, PathCoefficients):
                module.coef_anchor.fill_(module.init)
                module.coef_self.fill_(module.init)
            elif isinstance(module, Rotary):
                module.reset_tables()
        if self.config.dynamic_fc2_init == "official":  # hazard H5: the official init re-draws the fc2 weight
            for module in self.modules():
                if isinstance(module, DynamicCoefficients):
                    nn.init.trunc_normal_(module.fc2.weight, mean=0.0, std=std, a=-cut, b=cut)

    def hidden_states(self, idx: torch.Tensor, doc_starts: torch.Tensor | None = None, *,
                      trace: Tracer | None = None) -> torch.Tensor:
        """The final-normed hidden state (B, T, d), the LM head's input. `trace` records every layer."""
        seq_len = idx.shape[1]
        rope = self.rope.tables(seq_len)
        mask = build_mask(doc_starts, seq_len, idx.device, self.config.attention)
        h = self.embed(idx)
        if trace is not None:
            trace.embeddings = h
        anchor = None
        for i, block in enumerate(self.blocks):
            if i == self.config.anchor_depth:
                anchor = self.anchor(h)  # once per forward, shared by every later layer
            if trace is not None:
                trace.start(i)
            h, anchor = block(h, anchor, rope, mask, trace)
            if trace is not None:
                trace.finish(h)
        return self.final_norm(h)

    def forward(self, idx: torch.Tensor, doc_starts: torch.Tensor | None = None) -> torch.Tensor:
        return self.lm_head(self.hidden_states(idx, doc_starts))

    @torch.no_grad()
    def inspect(self, idx: torch.Tensor, doc_starts: torch.Tensor | None = None, *,
                on_layer: Callable[[LayerTrace], None] | None = None, ablate: str | None = None,
                attention: bool = True) -> Inspection:
        """The forward with a trace: per layer the hidden state, attention probabilities (fp32 softmax), gate
        values and effective mixing coefficients. `ablate='anchor'|'self'` drops that term in every mixing
        layer (paper appendix C). With `on_layer`, each trace goes to the callback and is dropped, so only
        one layer's O(T^2) probabilities are alive at a time. No gradients are recorded."""
        if ablate not in (None, "anchor", "self"):
            raise ValueError(f"ablate must be None, 'anchor' or 'self', got {ablate!r}")
        trace = Tracer(on_layer=on_layer, ablate=ablate, attention=attention)
        logits = self.lm_head(self.hidden_states(idx, doc_starts, trace=trace))
        return Inspection(embeddings=trace.embeddings, layers=trace.kept, logits=logits)


# ============================================================================ 6. tracing


@dataclass(slots=True)
class LayerTrace:
    """What one block did, for analyses (docs/architecture.md, Inspection)."""

    layer: int
    hidden: torch.Tensor | None = None  # (B, T, d): output of the block = hidden state layer+1
    attn_probs: torch.Tensor | None = None  # (B, H, T, T) fp32
    gate: torch.Tensor | None = None  # (B, H, T, dh) sigmoid values
    coefficients: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    """path -> (anchor coefficient, self coefficient), effective (dynamic scales, ablation), each broadcastable
    to (B, H, T, dh). Empty for layers that do not mix."""


@dataclass(slots=True)
class Inspection:
    embeddings: torch.Tensor  # (B, T, d): hidden state 0
    layers: list[LayerTrace]  # empty when an on_layer callback consumed them
    logits: torch.Tensor


@dataclass(slots=True)
class Tracer:
    """The trace sink the forward fills when given one: options (ablation, explicit attention) and the traces."""

    on_layer: Callable[[LayerTrace], None] | None = None
    ablate: str | None = None
    attention: bool = True
    """Compute explicit fp32 attention probabilities (O(T^2) per layer) instead of calling the kernel."""
    embeddings: torch.Tensor | None = None
    kept: list[LayerTrace] = field(default_factory=list)
    current: LayerTrace | None = None

    def start(self, layer: int) -> None:
        self.current = LayerTrace(layer=layer)

    def record_attention(self, probs: torch.Tensor | None, gate: torch.Tensor | None, mix: Mixer | None,
                         coefficients: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None) -> None:
        """Called by the attention: (B, T, ...) layouts turned into the (B, H, T, ...) ones of LayerTrace."""
        self.current.attn_probs = probs
        self.current.gate = None if gate is None else gate.transpose(1, 2)
        if coefficients is not None:
            c_anchor, c_self = (c.float() for c in coefficients())
            self.current.coefficients = {p: (c_anchor[:, :, j].transpose(1, 2), c_self[:, :, j].transpose(1, 2))
                                         for j, p in enumerate(mix.mix_paths)}

    def finish(self, hidden: torch.Tensor) -> None:
        trace, self.current = self.current, None
        trace.hidden = hidden
        if self.on_layer is None:
            self.kept.append(trace)
        else:
            self.on_layer(trace)
