"""Log-probabilities of continuation tokens without materialising (B, T, V) logits.

A multiple-choice request scores a handful of tokens, yet a plain forward builds logits for every position:
at batch 16, 1,024 tokens and the checkpoints' 57,601-row vocabulary that is 3.8 GB in fp32, nearly all
thrown away. Here the LM head runs only on the hidden states of the positions that predict a continuation
token, a bounded number of rows at a time, and each chunk's log-softmax is taken in fp32.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

CHUNK_ELEMENTS = 1 << 23
"""Logit elements (rows x vocabulary) scored at once: 32 MiB of fp32 logits per chunk."""


def continuation_logprobs(rows: torch.Tensor, targets: torch.Tensor, vocab_size: int,
                          to_logits: Callable[[torch.Tensor], torch.Tensor] | None = None,
                          chunk_elements: int = CHUNK_ELEMENTS) -> tuple[torch.Tensor, torch.Tensor]:
    """(float64 log-prob of each target, whether it is the argmax) for `rows` (N, X) and `targets` (N,).

    `to_logits` maps a block of rows to (n, vocab_size) logits (the LM head on hidden states); None means
    `rows` already are logits. At most `chunk_elements` logits exist at a time.
    """
    if rows.shape[0] != targets.shape[0]:
        raise ValueError(f"{rows.shape[0]} rows for {targets.shape[0]} targets")
    step = max(1, chunk_elements // vocab_size)
    logprobs, greedy = [], []
    for start in range(0, rows.shape[0], step):
        block, block_targets = rows[start:start + step], targets[start:start + step]
        logits = block if to_logits is None else to_logits(block)
        logp = torch.log_softmax(logits.float(), dim=-1)
        del logits
        logprobs.append(logp.gather(-1, block_targets[:, None])[:, 0].double())
        greedy.append(logp.argmax(-1) == block_targets)
        del logp
    if not logprobs:
        return (torch.zeros(0, dtype=torch.float64, device=rows.device),
                torch.zeros(0, dtype=torch.bool, device=rows.device))
    return torch.cat(logprobs), torch.cat(greedy)
