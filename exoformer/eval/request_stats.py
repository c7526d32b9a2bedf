"""How much an evaluation costs, measured: loglikelihood requests per task and tokens per request.

`request_stats(suite, data_dir)` builds exactly the requests `evaluate` would send (lm-eval's prompts, few-shot
sampling and splits) with a counting LM that scores nothing, and tokenizes each context + continuation as
ExoLM does (one sequence per request, GPT-2 by default). The numbers feed the eval cost estimate of a
checkpoint run (exoformer.harness.checkpoint_run.eval_cost); run on the prefetched task files:

    python -m exoformer.eval.request_stats data/tasks
"""

from __future__ import annotations

import json
import sys
from typing import Any


def request_stats(suite: str, data_dir: Any = None, *, tokenizer: Any = None, num_fewshot: int = 5,
                  limit: int | None = None, cache_dir: Any = None) -> dict[str, dict[str, float]]:
    """task -> {requests, tokens (total), tokens_per_request (mean), max_tokens}."""
    from lm_eval.api.model import LM

    from exoformer.eval.run import evaluate

    if tokenizer is None:
        from exoformer.data.tokenizer import gpt2

        tokenizer = gpt2()

    class Counting(LM):
        def __init__(self) -> None:
            super().__init__()
            self.lengths: dict[str, list[int]] = {}

        def loglikelihood(self, requests, disable_tqdm=False):
            for r in requests:
                context, continuation = r.args
                self.lengths.setdefault(r.task_name, []).append(len(tokenizer.encode(context + continuation)))
            return [(0.0, False) for _ in requests]

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            raise NotImplementedError("no task of the suites scores rolling log-likelihoods")

        def generate_until(self, requests, disable_tqdm=False):
            raise NotImplementedError("no task of the suites generates")

    lm = Counting()
    evaluate(lm, None, suite, data_dir=data_dir, num_fewshot=num_fewshot, limit=limit, cache_dir=cache_dir)
    return {task: {"requests": len(n), "tokens": sum(n), "tokens_per_request": sum(n) / len(n), "max_tokens": max(n)}
            for task, n in sorted(lm.lengths.items())}


if __name__ == "__main__":  # pragma: no cover - a measuring tool for the README's numbers
    stats = request_stats("paper", sys.argv[1] if len(sys.argv) > 1 else None)
    print(json.dumps(stats, indent=2))
