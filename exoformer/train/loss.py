"""Training loss: token cross-entropy plus z-loss, in fp32, computed from the LM head's input in chunks of tokens.

The z-loss is counted once: loss = CE + z_loss * mean(logsumexp^2). The official code's flash-attn path
adds the z term a second time to the *logged* value (hazard H3, docs/official_code.md 4.4), so its logged and
validated losses equal CE + 2*z_loss*mean(lse^2); `official_logged_loss` reproduces that convention.

Memory: `chunked_lm_loss` never holds the (B, T, V) logits. Each chunk of `chunk_tokens` tokens computes its
logits (the head's dtype), their fp32 logsumexp and target logit, and is recomputed in the backward pass
(activation checkpointing per chunk), so one chunk's fp32 logits and their gradient are alive at a time
instead of several fp32 copies of B x T x V (benchmarks/bench_loss_memory.py measures the difference).
A micro-batch of one chunk or less (the smoke preset's 2,048 tokens) is not recomputed: the loss is the last
op of the forward and the first of the backward, so its logits are alive at the backward's start either way
(the same peak), while the recompute costs a second head matmul and the checkpoint's bookkeeping: about a tenth
of a smoke training step's CPU time.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from exoformer.train.config import LOSS_CHUNK_TOKENS


def lm_loss(logits: Tensor, targets: Tensor, z_loss: float) -> tuple[Tensor, Tensor, Tensor]:
    """Return (loss, ce, z) where loss is differentiable and ce, z = mean(lse^2) are detached, all fp32.

    CE is computed from the same logsumexp as z (CE_t = lse_t - logit_t[target]) so both share one pass.
    The unchunked form, for callers that hold logits already; `chunked_lm_loss` equals it.
    """
    ce_sum, z_sum = _sums(logits, targets)
    n = targets.numel()
    return _combine(ce_sum / n, z_sum / n, z_loss)


def chunked_lm_loss(hidden: Tensor, head_weight: Tensor, targets: Tensor, z_loss: float, *,
                    chunk_tokens: int = LOSS_CHUNK_TOKENS) -> tuple[Tensor, Tensor, Tensor]:
    """`lm_loss(hidden @ head_weight.T, targets, z_loss)` without materialising the logits (module docstring).

    hidden: (B, T, d), the LM head's input; head_weight: (V, d); targets: (B, T)."""
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    flat_targets = targets.reshape(-1)
    n = flat_targets.numel()
    recompute = n > chunk_tokens and torch.is_grad_enabled() and (hidden.requires_grad or head_weight.requires_grad)
    ce_sum = z_sum = None
    for start in range(0, n, chunk_tokens):
        h, y = flat_hidden[start:start + chunk_tokens], flat_targets[start:start + chunk_tokens]
        if recompute:
            ce_part, z_part = checkpoint(_chunk_sums, h, head_weight, y, use_reentrant=False)
        else:
            ce_part, z_part = _chunk_sums(h, head_weight, y)
        ce_sum = ce_part if ce_sum is None else ce_sum + ce_part
        z_sum = z_part if z_sum is None else z_sum + z_part
    return _combine(ce_sum / n, z_sum / n, z_loss)


class LossForward(nn.Module):
    """model -> (loss, ce, z) of one micro-batch: the module the training loop wraps in DDP and compiles, so
    the chunked loss runs inside the compiled region. `model` has `hidden_states` and an `lm_head` Linear."""

    def __init__(self, model: nn.Module, z_loss: float, *, chunk_tokens: int = LOSS_CHUNK_TOKENS) -> None:
        super().__init__()
        self.model = model
        self.z_loss = z_loss
        self.chunk_tokens = chunk_tokens

    def forward(self, x: Tensor, doc_starts: Tensor | None, targets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        hidden = self.model.hidden_states(x, doc_starts)
        return chunked_lm_loss(hidden, self.model.lm_head.weight, targets, self.z_loss,
                               chunk_tokens=self.chunk_tokens)


def _chunk_sums(hidden: Tensor, head_weight: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    return _sums(F.linear(hidden, head_weight), targets)


def _sums(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """(sum of CE, sum of lse^2) over the tokens of `logits` (..., V), in fp32."""
    logits = logits.float()
    lse = torch.logsumexp(logits, dim=-1)
    target_logit = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (lse - target_logit).sum(), lse.square().sum()


def _combine(ce: Tensor, z: Tensor, z_loss: float) -> tuple[Tensor, Tensor, Tensor]:
    loss = ce + z_loss * z if z_loss else ce
    return loss, ce.detach(), z.detach()


def official_logged_loss(ce: float, z: float, z_loss: float) -> float:
    """The loss value the official code logs and validates with flash-attn installed (z-loss twice, H3)."""
    return ce + 2.0 * z_loss * z


def validation_conventions(per_batch: list[tuple[float, float, int]], z_loss: float) -> dict[str, float | int]:
    """Both validation conventions from per-batch (mean CE, mean lse^2, tokens) in stream order.

    The paper's perplexities come from the author's `estimate_loss` (docs/official_code.md 4.5 and hazard H3):
    for each batch the training criterion's mean over its tokens, which with flash-attn counts the z term twice
    (`official_logged_loss`), then the unweighted mean over batches; perplexity is exp of that mean. That is
    `val_loss` / `val_ppl`, what tables show and `diff` compares with the paper. `val_loss_ce` / `val_ppl_ce`
    are the token-weighted mean of pure cross-entropy and its exp, kept as their own metric.
    """
    tokens = sum(n for _, _, n in per_batch)
    if not per_batch or tokens == 0:
        return {"val_loss": math.nan, "val_ppl": math.nan, "val_loss_ce": math.nan, "val_ppl_ce": math.nan,
                "tokens": 0, "batches": 0}
    official = sum(official_logged_loss(ce, z, z_loss) for ce, z, _ in per_batch) / len(per_batch)
    ce_mean = sum(ce * n for ce, _, n in per_batch) / tokens
    return {"val_loss": official, "val_ppl": math.exp(official), "val_loss_ce": ce_mean,
            "val_ppl_ce": math.exp(ce_mean), "tokens": tokens, "batches": len(per_batch)}
