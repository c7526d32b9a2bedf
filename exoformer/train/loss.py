"""Training loss: token cross-entropy plus z-loss, in fp32.

The z-loss is counted once: loss = CE + z_loss * mean(logsumexp^2). The official code's flash-attn path
adds the z term a second time to the *logged* value (hazard H3, docs/official_code.md 4.4), so its logged and
validated losses equal CE + 2*z_loss*mean(lse^2); `official_logged_loss` reproduces that convention.
"""

from __future__ import annotations

import torch
from torch import Tensor


def lm_loss(logits: Tensor, targets: Tensor, z_loss: float) -> tuple[Tensor, Tensor, Tensor]:
    """Return (loss, ce, z) where loss is differentiable and ce, z = mean(lse^2) are detached, all fp32.

    CE is computed from the same logsumexp as z (CE_t = lse_t - logit_t[target]) so both share one pass.
    """
    logits = logits.float()
    lse = torch.logsumexp(logits, dim=-1)
    target_logit = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    ce = (lse - target_logit).mean()
    z = lse.square().mean()
    loss = ce + z_loss * z if z_loss else ce
    return loss, ce.detach(), z.detach()


def official_logged_loss(ce: float, z: float, z_loss: float) -> float:
    """The loss value the official code logs and validates with flash-attn installed (z-loss twice, H3)."""
    return ce + 2.0 * z_loss * z
