"""lm-eval adapter: an in-memory ExoTransformer as an `lm_eval.api.model.LM`.

We subclass lm-eval's `TemplateLM`, so the string side of `loglikelihood` is lm-eval's own code: trailing
context spaces move into the continuation, context+continuation are encoded together and split at
`len(encode(context))`, and an empty context becomes the prefix token (EOT). Only the token side is ours.

How this differs from the author's adapter (docs/official_code.md section 5), on purpose:
- batched: requests sorted by total length (longest first), right-padded, one forward per batch, results
  put back in request order; the author scores one request per forward (batch size 1);
- the log-softmax and the sum of a continuation's log-probs follow the scoring precision
  (exoformer/eval/precision.py: `bf16` on bf16 logits and summed in bf16 as the author's, `fp32` in fp32
  and float64), and the log-softmax is taken only at the positions that predict a continuation token: with a
  model that has `hidden_states` and `lm_head` (ExoTransformer) the head runs on those rows alone, so
  (B, T, V) logits never exist (`exoformer.eval.scoring`);
- the context/continuation split is lm-eval's (encode whole, split at len(encode(context))), not a binary
  search on decoded text;
- `loglikelihood_rolling` uses lm-eval's rolling windows instead of one forward per token, and
  `generate_until` is greedy decoding that honours `until` / `max_gen_toks` (the author's divides by a
  temperature of 0).
No document mask is passed: as in the author's evaluation, a prompt is one document (training documents
start with EOT, and an empty context is replaced by EOT).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import torch
from lm_eval.api.model import TemplateLM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm import tqdm

from exoformer.errors import UserError
from exoformer.eval.scoring import Scorer
from exoformer.train.distributed import group_rank_and_size

TokenRequest = tuple[Any, list[int], list[int]]  # (cache key, context tokens, continuation tokens)

DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's default for generate_until tasks


class Tokenizer(Protocol):
    eot_token_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


def bars_off(disable_tqdm: bool = False) -> bool:
    """True when progress bars are off: asked by the caller, or tqdm's own switch TQDM_DISABLE is set (run jobs start
    with it, exoformer/environ.py). tqdm lets an explicit `disable=` win over that switch, and lm-eval's
    loglikelihood passes one, so the adapter applies the switch to its own bars and to lm-eval's."""
    return disable_tqdm or os.environ.get("TQDM_DISABLE", "").strip().lower() in ("1", "true", "yes", "on")


class ExoLM(TemplateLM):
    """Score and generate with `model` (logits = model(idx) of shape (B, T, V), context `model.config.seq_len`).

    `tokenizer` defaults to the offline GPT-2 encoding; a smoke model needs its `CompactTokenizer`
    (`exoformer.data.tokenizer.for_data(data_dir)`). `batch_size` requests share one forward pass.
    The model is put in eval mode for each call (its previous mode is restored afterwards) and moved to
    `device`. A model with `hidden_states(idx)` and `lm_head` is scored lean (the head only where a token is
    scored); `full_logits=True` scores from `model(idx)` instead, the reference the benchmarks compare with.
    `precision` is the scoring precision (the caller casts the weights: exoformer.eval.scoring.scoring_model).
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer | None = None, batch_size: int = 1,
                 device: str | torch.device = "cpu", full_logits: bool = False, precision: str = "fp32",
                 data_parallel: bool = True) -> None:
        super().__init__()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise UserError(f"batch size must be a positive integer, got {batch_size!r}", where="eval.batch_size",
                            fix="set eval.batch_size to 1 or more")
        seq_len = getattr(getattr(model, "config", None), "seq_len", None)
        if not isinstance(seq_len, int) or seq_len < 1:
            raise TypeError("ExoLM needs a model with `config.seq_len` (an ExoTransformer)")
        if tokenizer is None:
            from exoformer.data.tokenizer import gpt2

            tokenizer = gpt2()
        n_vocab = getattr(tokenizer, "n_vocab", None)
        vocab_size = getattr(model.config, "vocab_size", None)
        if isinstance(n_vocab, int) and isinstance(vocab_size, int) and n_vocab > vocab_size:
            raise UserError(f"the tokenizer has {n_vocab} ids but the model's vocabulary has {vocab_size} rows",
                            where="eval tokenizer",
                            fix="use the run's tokenizer: exoformer.data.tokenizer.for_data(<run data dir>) "
                                "(a compact vocabulary for smoke runs)")
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = seq_len
        self._device = torch.device(device)
        self._rank, self._world_size = group_rank_and_size() if data_parallel else (0, 1)
        self.model = model.to(self._device)
        self.scorer = Scorer(self.model, pad_id=self.eot_token_id, device=self._device, full_logits=full_logits,
                             precision=precision)

    @property
    def lean(self) -> bool:
        """Whether requests are scored with the LM head at the scored positions only."""
        return self.scorer.lean

    # ---- TemplateLM's tokenisation hooks -------------------------------------------------------------

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eot_token_id

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        """Plain encoding: GPT-2 adds no special tokens, so `add_special_tokens` has nothing to switch."""
        return self.tokenizer.encode(string)

    def tok_decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens))

    def get_model_info(self) -> dict:
        """Recorded by `simple_evaluate` in `results["config"]`."""
        params = sum(p.numel() for p in self.model.parameters())
        dtype = next(self.model.parameters()).dtype if params else None
        return {"model_num_parameters": params, "model_dtype": str(dtype), "max_length": self.max_length,
                "eval_batch_size": self.batch_size, "scoring_precision": self.scorer.precision}

    # ---- data parallel (lm-eval splits each task's documents by rank and gathers the metrics on rank 0) ----

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's `tensor`, concatenated (0-d tensors stacked) in rank order."""
        if self._world_size == 1:
            return tensor
        parts = [torch.empty_like(tensor) for _ in range(self._world_size)]
        torch.distributed.all_gather(parts, tensor.contiguous())
        return torch.stack(parts) if tensor.dim() == 0 else torch.cat(parts)

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        if self._world_size == 1:
            return [obj]
        gathered = [None] * self._world_size if self._rank == dst else None
        torch.distributed.gather_object(obj, gathered, dst=dst)
        return gathered

    def barrier(self) -> None:
        if self._world_size > 1:
            torch.distributed.barrier()

    # ---- scoring -----------------------------------------------------------------------------------

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """lm-eval's own (tokenize, then _loglikelihood_tokens), with its bar under tqdm's switch (bars_off)."""
        return super().loglikelihood(requests, disable_tqdm=bars_off(disable_tqdm))

    def _loglikelihood_tokens(self, requests: list[TokenRequest], disable_tqdm: bool = False,
                              **kwargs) -> list[tuple[float, bool]]:
        """(sum of continuation log-probs, continuation is the greedy output) for each request, in order."""
        with self._inference(), tqdm(total=len(requests), desc="loglikelihood", disable=bars_off(disable_tqdm)) as bar:
            def scored(indices: list[int], results: list[tuple[float, bool]]) -> None:
                for i, result in zip(indices, results, strict=True):
                    key = requests[i][0]
                    if key is not None:
                        self.cache_hook.add_partial("loglikelihood", key, result)
                bar.update(len(indices))

            results = self.scorer.score([(context, continuation) for _, context, continuation in requests],
                                        self.batch_size, on_batch=scored)
            bar.update(len(requests) - bar.n)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood of whole strings with lm-eval's disjoint rolling windows of the model's context.

        Every token is predicted exactly once; the first is conditioned on EOT (`prefix_token_id`).
        """
        strings = [req.args[0] for req in requests]
        windows: list[TokenRequest] = []
        owner: list[int] = []
        for doc, string in enumerate(strings):
            for context, continuation in map(make_disjoint_window, get_rolling_token_windows(
                    token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length, context_len=1)):
                windows.append((None, context, continuation))
                owner.append(doc)
        scores = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)
        totals = [0.0] * len(strings)
        for doc, (logprob, _) in zip(owner, scores, strict=True):
            totals[doc] += logprob
        for string, total in zip(strings, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", (string,), total)
        return totals

    # ---- generation --------------------------------------------------------------------------------

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy decoding; stops at EOT, at `max_gen_toks`, or at the first `until` string (cut off)."""
        outputs: list[str] = []
        with self._inference():
            for req in tqdm(requests, desc="generate_until", disable=bars_off(disable_tqdm)):
                context, gen_kwargs = req.args
                outputs.append(self._generate_one(context, dict(gen_kwargs or {})))
                self.cache_hook.add_partial("generate_until", req.args, outputs[-1])
        return outputs

    def _generate_one(self, context: str, gen_kwargs: dict) -> str:
        if gen_kwargs.pop("do_sample", False):
            raise ValueError("ExoLM.generate_until is greedy only; the task asked for do_sample=True")
        until = gen_kwargs.pop("until", None) or []
        until = [until] if isinstance(until, str) else list(until)
        max_gen_toks = int(gen_kwargs.pop("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
        tokens = self.tok_encode(context) or [self.prefix_token_id]
        generated: list[int] = []
        text = ""
        for _ in range(max_gen_toks):
            window = (tokens + generated)[-self.max_length:]
            next_token = int(self.scorer.last_logits(torch.tensor([window], dtype=torch.long, device=self._device))
                             [0].float().argmax())
            if next_token == self.eot_token_id:
                break
            generated.append(next_token)
            text = self.tok_decode(generated)
            if any(stop in text for stop in until):
                break
        for stop in until:
            text = text.split(stop, 1)[0]
        return text

    @contextlib.contextmanager
    def _inference(self) -> Iterator[None]:
        """Eval mode and no autograd for the duration of a call; the caller's mode is restored."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            self.model.train(was_training)
