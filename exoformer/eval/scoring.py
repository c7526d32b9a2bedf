"""Log-probabilities of continuation tokens without materialising (B, T, V) logits.

A multiple-choice request scores a handful of tokens, yet a plain forward builds logits for every position:
at batch 16, 1,024 tokens and the checkpoints' 57,601-row vocabulary that is 3.8 GB in fp32, nearly all
thrown away. Here the LM head runs only on the hidden states of the positions that predict a continuation
token, a bounded number of rows at a time.

The scoring precision (exoformer/eval/precision.py) decides the numerics. `fp32`: fp32 weights, each chunk's
log-softmax in fp32 and a request's log-probs summed in float64. `bf16` is the author's run_eval.py
(docs/official_code.md section 5 and hazard H4), spelled out so that every device computes the same thing:
bf16 Linear/Embedding weights (`scoring_model`) and no autocast, so the logits are bf16; the log-softmax of
the bf16 logits rounded once to bf16 (`bf16_log_softmax`, the arithmetic of torch's CPU and CUDA kernels);
a request's bf16 log-probs summed in fp32 and rounded once to bf16 (`bf16_sum`, as `Tensor.sum` of a bf16
tensor does), on the host in a fixed order. Under autocast CUDA would take the log-softmax in fp32 instead.

`Scorer` is the token side of the lm-eval adapter (`exoformer.eval.lm.ExoLM`) without lm-eval: requests
sorted by length (longest first), right-padded batches, results in request order. Benchmarks use it
directly, so they need torch only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import numpy as np
import torch

from exoformer.eval.precision import check_scoring_precision

Result = tuple[float, bool]
"""(sum of the continuation's log-probs, whether the continuation is the greedy output)."""

CHUNK_ELEMENTS = 1 << 23
"""Logit elements (rows x vocabulary) scored at once: 32 MiB of fp32 logits per chunk."""


def scoring_model(model: torch.nn.Module, precision: str) -> torch.nn.Module:
    """`model` (cast in place) as `precision` scores it: bf16 Linear/Embedding weights for `bf16` (the author's
    `to_mixed_precision`; norms and coefficients stay fp32), every parameter fp32 for `fp32`."""
    check_scoring_precision(precision)
    if precision == "fp32":
        return model.float()
    for module in model.modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            module.to(torch.bfloat16)
    return model


def forward_context(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """No autocast at either precision: under `bf16` the model computes in its weights' dtype (bf16 matmuls,
    norm gains and coefficients cast to the activation dtype), as the author's to_mixed_precision model does.
    Autocast would differ by device (CUDA autocast takes log_softmax in fp32; CPU autocast does not)."""
    check_scoring_precision(precision)
    return contextlib.nullcontext()


def bf16_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """log_softmax over the last dim of bf16 logits, rounded once to bf16: x - max - log(sum(exp(x - max)))
    in fp32, the arithmetic torch's log_softmax kernels use for a bf16 input on CPU and CUDA alike."""
    x = logits.to(torch.bfloat16).float()
    shifted = x - x.amax(dim=-1, keepdim=True)
    return (shifted - shifted.exp().sum(dim=-1, keepdim=True).log()).to(torch.bfloat16)


def bf16_sum(values: Sequence[float]) -> float:
    """The bf16 sum of bf16 `values` as `Tensor.sum` of a bf16 tensor computes it: accumulated in fp32, in
    order, and rounded once to bf16. Runs on the host, so every device gives the same bits."""
    total = np.float32(0.0)
    for value in values:
        total = np.float32(total + np.float32(value))
    return float(torch.tensor(float(total), dtype=torch.float32).to(torch.bfloat16))


def continuation_logprobs(rows: torch.Tensor, targets: torch.Tensor, vocab_size: int,
                          to_logits: Callable[[torch.Tensor], torch.Tensor] | None = None,
                          chunk_elements: int = CHUNK_ELEMENTS,
                          precision: str = "fp32") -> tuple[torch.Tensor, torch.Tensor]:
    """(float64 log-prob of each target, whether it is the argmax) for `rows` (N, X) and `targets` (N,).

    `to_logits` maps a block of rows to (n, vocab_size) logits (the LM head on hidden states); None means
    `rows` already are logits. At most `chunk_elements` logits exist at a time. The log-softmax is taken in
    fp32 (`fp32`) or by `bf16_log_softmax` (`bf16`: each log-prob is a bf16 value, held exactly in float64).
    """
    bf16 = check_scoring_precision(precision) == "bf16"
    if rows.shape[0] != targets.shape[0]:
        raise ValueError(f"{rows.shape[0]} rows for {targets.shape[0]} targets")
    step = max(1, chunk_elements // vocab_size)
    logprobs, greedy = [], []
    for start in range(0, rows.shape[0], step):
        block, block_targets = rows[start:start + step], targets[start:start + step]
        logits = block if to_logits is None else to_logits(block)
        logp = bf16_log_softmax(logits) if bf16 else torch.log_softmax(logits.float(), dim=-1)
        del logits
        logprobs.append(logp.gather(-1, block_targets[:, None])[:, 0].double())
        greedy.append(logp.argmax(-1) == block_targets)
        del logp
    if not logprobs:
        return (torch.zeros(0, dtype=torch.float64, device=rows.device),
                torch.zeros(0, dtype=torch.bool, device=rows.device))
    return torch.cat(logprobs), torch.cat(greedy)


LENGTH_BUCKETS = 6
"""With FlexAttention a batch is padded to one of this many widths (seq_len/32, /16, ..., seq_len) and to the full
batch size, so that the compiled kernel sees at most this many shapes (torch recompiles per shape and falls back
to the unfused kernel after 8). Right padding never changes a causal model's scores at the earlier positions."""


def padded_length(length: int, max_length: int, buckets: int = LENGTH_BUCKETS) -> int:
    """The smallest bucket width >= `length` (the widths halve from `max_length`)."""
    for k in range(buckets - 1, -1, -1):
        width = max(1, max_length >> k)
        if width >= length:
            return width
    return max_length


class Scorer:
    """Scores (context tokens, continuation tokens) pairs with `model` (context `model.config.seq_len`).

    Lean (the LM head only at scored positions) when the model has `hidden_states(idx)` and an `lm_head`
    module, unless `full_logits`; otherwise from `model(idx)` logits. `pad_id` right-pads batches (it is
    never scored). The caller chooses eval mode; scoring runs without autograd. `precision` is the scoring
    precision (exoformer/eval/precision.py); the model's weights are the caller's (`scoring_model` casts them).
    """

    def __init__(self, model: torch.nn.Module, *, pad_id: int, device: torch.device,
                 full_logits: bool = False, precision: str = "fp32") -> None:
        self.model, self.pad_id, self.device = model, pad_id, torch.device(device)
        self.precision = check_scoring_precision(precision)
        self.max_length = model.config.seq_len
        self.lean = not full_logits and callable(getattr(model, "hidden_states", None)) and isinstance(
            getattr(model, "lm_head", None), torch.nn.Module)
        vocab_size = getattr(model.config, "vocab_size", None)
        self.vocab_size = vocab_size if isinstance(vocab_size, int) else None
        self.bucketed = getattr(model.config, "attention", "sdpa") != "sdpa"
        """Pad batches to LENGTH_BUCKETS shapes (FlexAttention compiles per shape)."""

    @torch.no_grad()
    def score(self, pairs: Sequence[tuple[list[int], list[int]]], batch_size: int,
              on_batch: Callable[[list[int], list[Result]], None] | None = None) -> list[Result]:
        """A result per pair, in order; `on_batch(indices, results)` after each scored batch."""
        inputs: list[list[int]] = []
        for context_enc, continuation_enc in pairs:
            if len(continuation_enc) > self.max_length:
                raise ValueError(f"continuation of {len(continuation_enc)} tokens cannot be scored within the "
                                 f"model's {self.max_length}-token context")
            if not context_enc and continuation_enc:
                raise ValueError("context tokens are empty: TemplateLM.loglikelihood puts EOT there")
            # Left-truncate to seq_len + 1 tokens; the last one is only predicted, never fed.
            inputs.append((context_enc + continuation_enc)[-(self.max_length + 1):][:-1])
        targets = [continuation_enc for _, continuation_enc in pairs]
        results: list[Result | None] = [None] * len(pairs)
        for i, target in enumerate(targets):
            if not target:
                results[i] = (0.0, True)  # nothing to score: log 1, and trivially the greedy output
        order = sorted((i for i, target in enumerate(targets) if target),
                       key=lambda i: (-len(inputs[i]), inputs[i], targets[i]))
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            scored = self.score_batch([inputs[i] for i in batch], [targets[i] for i in batch],
                                      rows=batch_size if self.bucketed else None)
            for i, result in zip(batch, scored, strict=True):
                results[i] = result
            if on_batch is not None:
                on_batch(batch, scored)
        return results  # type: ignore[return-value]

    def score_batch(self, inputs: list[list[int]], targets: list[list[int]], rows: int | None = None) -> list[Result]:
        """One right-padded forward (to a bucket width and `rows` rows when bucketed); log-probs of each target
        at the positions that predict it."""
        lengths = [len(x) for x in inputs]
        width = padded_length(max(lengths), self.max_length) if self.bucketed else max(lengths)
        idx = torch.full((max(len(inputs), rows or 0), width), self.pad_id, dtype=torch.long)
        for row, tokens in enumerate(inputs):
            idx[row, :len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        idx = idx.to(self.device)

        # Position t predicts token t+1, so a continuation of n tokens is read at the last n input positions.
        rows = torch.tensor([row for row, target in enumerate(targets) for _ in target], dtype=torch.long,
                            device=self.device)
        positions = torch.tensor([p for length, target in zip(lengths, targets, strict=True)
                                  for p in range(length - len(target), length)], dtype=torch.long,
                                 device=self.device)
        flat_targets = torch.tensor([t for target in targets for t in target], dtype=torch.long, device=self.device)
        with forward_context(self.precision, self.device):
            if self.lean:
                picked = self.model.hidden_states(idx)[rows, positions]  # (N, d)
                vocab = self.vocab_size or self.model.lm_head.out_features
                token_logprobs, greedy = continuation_logprobs(picked, flat_targets, vocab,
                                                               to_logits=self.model.lm_head, precision=self.precision)
            else:
                picked = self.model(idx)[rows, positions]  # (B, T, V) -> (N, V)
                token_logprobs, greedy = continuation_logprobs(picked, flat_targets, picked.shape[-1],
                                                               precision=self.precision)
        counts = [len(t) for t in targets]
        split = torch.split(token_logprobs.cpu(), counts)
        sums = ([bf16_sum(values.tolist()) for values in split] if self.precision == "bf16"
                else [float(values.sum()) for values in split])
        all_greedy = [bool(g.all()) for g in torch.split(greedy.cpu(), counts)]
        return list(zip(sums, all_greedy, strict=True))

    @torch.no_grad()
    def last_logits(self, idx: torch.Tensor) -> torch.Tensor:
        """(B, V) logits of the last position (the head on one row per sequence when lean)."""
        with forward_context(self.precision, self.device):
            if self.lean:
                return self.model.lm_head(self.model.hidden_states(idx)[:, -1])
            return self.model(idx)[:, -1]
