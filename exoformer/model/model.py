"""ExoTransformer: one pre-norm decoder that expresses every variant of the paper by its ModelConfig.

Reads top to bottom: Block (attention + SwiGLU MLP, pre-norm), then the model (embedding, anchor,
blocks, final norm, untied LM head), then inspection. Official math: official_code.md 1.1-1.6.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from exoformer.model.attention import AttentionMask, Attention, build_mask
from exoformer.model.config import ModelConfig
from exoformer.model.layers import RMSNorm, Rotary, SwiGLU, ZeroInitLinear
from exoformer.model.mixing import ExogenousAnchor, PathCoefficients


class Block(nn.Module):
    """x <- x + Attn(RMSNorm(x)); x <- x + MLP(RMSNorm(x)) (norm_pos 'before', as the official train.py)."""

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, layer)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg.d_model, cfg.mlp_ratio)

    def forward(self, h: torch.Tensor, anchor: torch.Tensor | None, rope: tuple[torch.Tensor, torch.Tensor],
                mask: AttentionMask) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns the new hidden state and the anchor for later layers (layer 0 provides the internal one)."""
        attn_out, anchor_out = self.attn(self.attn_norm(h), anchor, rope, mask)
        h = h + attn_out
        h = h + self.mlp(self.mlp_norm(h))
        return h, anchor if anchor_out is None else anchor_out


@dataclass(slots=True)
class LayerTrace:
    """What one block did, for analyses (docs/architecture.md, Inspection)."""

    layer: int
    hidden: torch.Tensor  # (B, T, d): output of the block = hidden state layer+1
    attn_probs: torch.Tensor | None  # (B, H, T, T) fp32
    gate: torch.Tensor | None  # (B, H, T, dh) sigmoid values
    coefficients: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    """path -> (anchor coefficient, self coefficient), effective (dynamic scales, ablation), each broadcastable
    to (B, H, T, dh). Empty for layers that do not mix."""


@dataclass(slots=True)
class Inspection:
    embeddings: torch.Tensor  # (B, T, d): hidden state 0
    layers: list[LayerTrace]  # empty when an on_layer callback consumed them
    logits: torch.Tensor


class ExoTransformer(nn.Module):
    """Decoder-only Transformer with optional gated attention and projection mixing (paper section 3).

    `model(idx, doc_starts=None) -> logits (B, T, vocab)`. Build on the meta device for counting; after
    `to_empty(device=...)` call `init_weights()` (it also rebuilds the RoPE tables).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.rope = Rotary(config.d_head, config.seq_len, config.rope_theta)
        exogenous = config.anchor in ("h0", "h1", "h2")
        self.anchor = ExogenousAnchor(config) if exogenous else None
        self.anchor_depth = {"h0": 0, "h1": 1, "h2": 2}.get(config.anchor, -1)
        """The anchor is projected from the hidden state at this depth, right before block `anchor_depth`."""
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layer))
        self.final_norm = RMSNorm(config.d_model, config.norm_eps)
        self.lm_head = ZeroInitLinear(config.d_model, config.vocab_size, bias=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """Trunc-normal(std, +-cutoff*std) for Linear/Embedding; zeros for ZeroInitLinear (attention out-proj,
        MLP fc2, LM head, dynamic fc2 incl. bias); gains 1; coefficients at their init (official 1.1)."""
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

    def forward(self, idx: torch.Tensor, doc_starts: torch.Tensor | None = None) -> torch.Tensor:
        return self.lm_head(self.hidden_states(idx, doc_starts))

    def hidden_states(self, idx: torch.Tensor, doc_starts: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, d) final-normed hidden states: `forward` minus the LM head (evaluation scores a few positions)."""
        seq_len = idx.shape[1]
        rope = self.rope.tables(seq_len)
        mask = build_mask(doc_starts, seq_len, idx.device)
        h = self.embed(idx)
        anchor = None
        for i, block in enumerate(self.blocks):
            if i == self.anchor_depth:
                anchor = self.anchor(h)  # once per forward, shared by every later layer
            h, anchor = block(h, anchor, rope, mask)
        return self.final_norm(h)

    # ------------------------------------------------------------------------- inspection

    @torch.no_grad()
    def inspect(self, idx: torch.Tensor, doc_starts: torch.Tensor | None = None, *,
                on_layer: Callable[[LayerTrace], None] | None = None, ablate: str | None = None,
                attention: bool = True) -> Inspection:
        """Forward that records, per layer, the hidden state, attention probabilities (fp32 softmax), gate
        values and effective mixing coefficients. `ablate='anchor'|'self'` drops that term in every mixing
        layer (paper appendix C). With `on_layer`, each trace goes to the callback and is dropped, so only
        one layer's O(T^2) probabilities are alive at a time. No gradients are recorded."""
        if ablate not in (None, "anchor", "self"):
            raise ValueError(f"ablate must be None, 'anchor' or 'self', got {ablate!r}")
        seq_len = idx.shape[1]
        rope = self.rope.tables(seq_len)
        mask = build_mask(doc_starts, seq_len, idx.device)
        h = self.embed(idx)
        result = Inspection(embeddings=h, layers=[], logits=h)
        anchor = None
        for i, block in enumerate(self.blocks):
            if i == self.anchor_depth:
                anchor = self.anchor(h)
            attn_out, proj, probs = block.attn.inspect(block.attn_norm(h), anchor, rope, mask, ablate, attention)
            h = h + attn_out
            h = h + block.mlp(block.mlp_norm(h))
            if proj.anchor_out is not None:
                anchor = proj.anchor_out
            trace = LayerTrace(
                layer=i, hidden=h, attn_probs=probs,
                gate=None if proj.gate_logits is None else torch.sigmoid(proj.gate_logits).transpose(1, 2),
                coefficients=_per_path(block.attn, proj.coefficients),
            )
            if on_layer is None:
                result.layers.append(trace)
            else:
                on_layer(trace)
            del trace, probs
        result.logits = self.lm_head(self.final_norm(h))
        return result


def _per_path(attn: Attention, coefficients) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Split stacked (B|1, T|1, n_mix, H|1, dh|1) coefficients into path -> pair of (B|1, H|1, T|1, dh|1)."""
    if coefficients is None:
        return {}
    c_anchor, c_self = attn.mix.effective_coefficients(coefficients)
    return {p: (c_anchor[:, :, j].transpose(1, 2), c_self[:, :, j].transpose(1, 2))
            for j, p in enumerate(attn.mix.mix_paths)}
