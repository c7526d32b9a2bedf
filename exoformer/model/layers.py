"""Building blocks shared by every variant: RMSNorm, per-path head norms, RoPE, SwiGLU (official_code.md 1.1)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim, computed in fp32 and cast back, then the gain (official 1.1)."""
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
    When every path is normalised, one fused norm over the stack is used with the gains stacked.
    """

    def __init__(self, paths: tuple[str, ...], normed: tuple[str, ...], d_head: int, eps: float) -> None:
        super().__init__({p: RMSNorm(d_head, eps) for p in paths if p in normed})
        self.paths = paths
        self.eps = eps
        self.fused = len(self) == len(paths)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, T, n_paths, H, d_head)
        if self.fused:
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
    """A Linear that `ExoTransformer.init_weights` sets to zero (attention out-proj, MLP fc2, LM head)."""


class SwiGLU(nn.Module):
    """fc1: d -> ratio*d split into [value | gate]; value * SiLU(gate); fc2: (ratio/2)*d -> d, zero-init."""

    def __init__(self, d_model: int, mlp_ratio: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, mlp_ratio * d_model, bias=False)
        self.fc2 = ZeroInitLinear(mlp_ratio * d_model // 2, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(value * F.silu(gate))
