"""Projection mixing S~ = c_anchor * A_S + c_self * S_layer (paper Eq. 10; official_code.md 1.2-1.6).

Tensors are stacks of paths in the fused-projection order: (B, T, n_paths, H, d_head). A mixer mixes the
stack of its mixed paths in one fused expression; coefficients of all mixed paths are stacked per call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from exoformer.model.config import ModelConfig
from exoformer.model.layers import PathNorms, ZeroInitLinear


def path_index(paths: tuple[str, ...], subset: tuple[str, ...]) -> slice | list[int]:
    """Positions of `subset` inside `paths`: a slice when contiguous (a view, no copy), else a list."""
    idx = [paths.index(p) for p in subset]
    if idx == list(range(idx[0], idx[-1] + 1)):
        return slice(idx[0], idx[-1] + 1)
    return idx


class PathCoefficients(nn.Module):
    """The two learnable, unconstrained coefficients of one mixed path in one layer (shape by granularity)."""

    def __init__(self, shape: tuple[int, ...], init: float) -> None:
        super().__init__()
        self.init = init
        self.coef_anchor = nn.Parameter(torch.full(shape, init))
        self.coef_self = nn.Parameter(torch.full(shape, init))


class DynamicCoefficients(nn.Module):
    """Per-token scales s = sigmoid(fc2(GELU(fc1(x)))), d -> hidden -> 2 per projection (official 1.6).

    Output order [q1, q2, k1, k2, v1, v2, g1, g2] over all projections, mixed or not (as the official code).
    fc2 weight and bias start at zero, so s = 0.5 exactly at init. Hazard H5: the official code means to do
    the same but its `_init_weights` re-initialises fc2.weight to trunc-normal(0.02) by accident; we do not.
    """

    def __init__(self, d_model: int, hidden: int, n_proj: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden, bias=False)
        self.fc2 = ZeroInitLinear(hidden, 2 * n_proj, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, n_proj, 2): [..., 0] scales the anchor coefficient, [..., 1] the own one."""
        return self.from_hidden(self.fc1(x))

    def from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """The rest of forward, given fc1(x) (the Mixer computes fc1 inside the fused q,k,v,g matmul)."""
        return torch.sigmoid(self.fc2(F.gelu(hidden))).unflatten(-1, (-1, 2))


class Mixer(nn.Module):
    """Mixing of one layer: coefficients per mixed path, optional dynamic scales, optional post-mix norms."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.paths = cfg.proj_paths
        self.mix_paths = cfg.mix_paths
        self.granularity = cfg.granularity
        init = 2 * cfg.coef_init if cfg.dynamic else cfg.coef_init  # dynamic: coef x 0.5 scale = coef_init
        for p in cfg.mix_paths:
            self.add_module(p, PathCoefficients(cfg.coefficient_shape(), init))
        self.dynamic = DynamicCoefficients(cfg.d_model, cfg.dynamic_hidden, len(self.paths)) if cfg.dynamic else None
        self.post_norm = (PathNorms(cfg.mix_paths, cfg.post_mix_norm_paths, cfg.d_head, cfg.norm_eps)
                          if cfg.post_mix_norm_paths else None)
        self.sel = path_index(self.paths, cfg.mix_paths)
        self.full = len(cfg.mix_paths) == len(self.paths)
        self.head = (cfg.n_head, cfg.d_head)

    def _stacked(self, name: str) -> torch.Tensor:
        """One coefficient of every mixed path as (1, 1, n_mix, H|1, d_head|1)."""
        c = torch.stack([getattr(getattr(self, p), name) for p in self.mix_paths])
        if self.granularity == "headwise":
            c = c.unsqueeze(-1)
        elif self.granularity == "scalar":
            c = c.view(-1, 1, 1)
        return c.unsqueeze(0).unsqueeze(0)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, anchor: torch.Tensor, ablate: str | None = None
                ) -> tuple[torch.Tensor, tuple]:
        """Mixed projections (B, T, n_proj, H, dh) of the normed layer input x; anchor: (B, T, n_mix, H, dh).

        The static own coefficient is folded into the projection weight's rows (c * (x W) = x (c W)): scaling
        n_proj*d x d weights instead of B*T*n_proj*d activations, one elementwise pass fewer each way.
        Returns the raw coefficient pieces too; `effective_coefficients` multiplies them out (inspection only).
        """
        c_anchor, c_self = self._stacked("coef_anchor"), self._stacked("coef_self")
        if ablate == "anchor":
            c_anchor = torch.zeros_like(c_anchor)
        elif ablate == "self":
            c_self = torch.zeros_like(c_self)
        weight = weight * self._row_scale(c_self)[:, None]
        if self.dynamic is None:
            own = F.linear(x, weight)
        else:  # the dynamic MLP's fc1 rides along in the same matmul (one GEMM instead of a skinny second one)
            own, hidden = F.linear(x, torch.cat([weight, self.dynamic.fc1.weight])).split(
                [weight.shape[0], self.dynamic.fc1.out_features], dim=-1)
        own = own.unflatten(-1, (len(self.paths), *self.head))
        own_mixed = own if self.full else own[:, :, self.sel]
        dtype = own.dtype  # coefficients are cast to the activation dtype (official 1.1, precision)
        if self.dynamic is None:
            mixed, scales = torch.addcmul(own_mixed, c_anchor.to(dtype), anchor.to(dtype)), None
        else:
            s = self.dynamic.from_hidden(hidden)[:, :, self.sel].to(dtype)  # (B, T, n_mix, 2)
            scales = (s[..., 0, None, None], s[..., 1, None, None])  # each (B, T, n_mix, 1, 1)
            mixed = torch.addcmul(own_mixed * scales[1], anchor.to(dtype) * c_anchor.to(dtype), scales[0])
        if self.post_norm is not None:
            mixed = self.post_norm(mixed)
        return self._merge(own, mixed), (c_anchor, c_self, scales)

    def _row_scale(self, c_self: torch.Tensor) -> torch.Tensor:
        """(n_proj*d,) scale of the fused projection's output rows: c_self for mixed paths, 1 elsewhere."""
        rows = c_self[0, 0].expand(len(self.mix_paths), *self.head)
        if self.full:
            return rows.reshape(-1)
        by_path = {p: rows[j].reshape(-1) for j, p in enumerate(self.mix_paths)}
        ones = c_self.new_ones(self.head[0] * self.head[1])
        return torch.cat([by_path.get(p, ones) for p in self.paths])

    @staticmethod
    def effective_coefficients(pieces: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        """(anchor, self) coefficients with dynamic scales, each broadcastable to (B, T, n_mix, H, dh)."""
        c_anchor, c_self, scales = pieces
        if scales is None:
            return c_anchor, c_self
        return c_anchor * scales[0].float(), c_self * scales[1].float()

    def _merge(self, own: torch.Tensor, mixed: torch.Tensor) -> torch.Tensor:
        """Put the mixed paths back among the unmixed ones (no copy when every path is mixed)."""
        if self.full:
            return mixed
        if isinstance(self.sel, slice):
            pieces = [own[:, :, : self.sel.start], mixed, own[:, :, self.sel.stop:]]
            return torch.cat([p for p in pieces if p.shape[2]], dim=2)
        by_path = {p: mixed[:, :, j] for j, p in enumerate(self.mix_paths)}
        return torch.stack([by_path.get(p, own[:, :, i]) for i, p in enumerate(self.paths)], dim=2)


class ExogenousAnchor(nn.Module):
    """A_S = Norm_S(h W_S): one fused d -> n_proj*d projection (`anchor.proj`), computed once per forward.

    h is the raw token embedding for anchor 'h0' (no norm, before anything else; official 1.5), or the
    output of block 0 / 1 for 'h1' / 'h2' (raw as well [inference: the paper gives no norm]). The weight has
    rows for every projection as the official code; only the mixed paths' rows are multiplied.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.shape = (len(cfg.mix_paths), cfg.n_head, cfg.d_head)
        self.proj = nn.Linear(cfg.d_model, len(cfg.proj_paths) * cfg.d_model, bias=False)
        self.norms = PathNorms(cfg.mix_paths, cfg.anchor_norm_paths, cfg.d_head, cfg.norm_eps)
        sel = path_index(cfg.proj_paths, cfg.mix_paths)
        d = cfg.d_model
        rows = (slice(sel.start * d, sel.stop * d) if isinstance(sel, slice)
                else [r for i in sel for r in range(i * d, (i + 1) * d)])
        self.rows = None if len(cfg.mix_paths) == len(cfg.proj_paths) else rows

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        weight = self.proj.weight if self.rows is None else self.proj.weight[self.rows]
        anchor = F.linear(h, weight).unflatten(-1, self.shape)  # (B, T, n_mix, H, dh)
        return self.norms(anchor)
