"""How much an evaluation costs, measured: loglikelihood requests per task and tokens per request.

`request_stats(suite, data_dir)` builds exactly the requests `evaluate` would send (lm-eval's prompts, few-shot
sampling and splits) with a counting LM that scores nothing, and tokenizes each context + continuation as
ExoLM does (one sequence per request, GPT-2 by default). Each task's row sits beside what
exoformer/eval/task_facts.py assumes for the eval cost of a checkpoint run (its `tokens_per_request`, and
documents x choices requests); run on the prefetched task files to check those assumptions:

    python -m exoformer.eval.request_stats data/tasks
"""

from __future__ import annotations

import json
import sys
from typing import Any

from exoformer.eval.task_facts import SHOTS, TASK_FACTS


def request_stats(suite: str, data_dir: Any = None, *, tokenizer: Any = None, num_fewshot: int = SHOTS,
                  limit: int | None = None, cache_dir: Any = None) -> dict[str, dict[str, float]]:
    """task -> {requests, tokens (total), tokens_per_request (mean), max_tokens}; a paper task also has
    `assumed_requests` and `assumed_tokens_per_request`, what the cost model takes from its task facts."""
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
    stats = {task: {"requests": len(n), "tokens": sum(n), "tokens_per_request": sum(n) / len(n), "max_tokens": max(n)}
             for task, n in sorted(lm.lengths.items())}
    for task, row in stats.items():
        facts = TASK_FACTS.get(task) if suite == "paper" else None
        if facts is not None:
            documents = facts.documents if limit is None else min(limit, facts.documents)
            row.update(assumed_requests=documents * facts.choices, assumed_tokens_per_request=facts.tokens_per_request)
    return stats


if __name__ == "__main__":  # pragma: no cover - a measuring tool for the README's numbers
    stats = request_stats("paper", sys.argv[1] if len(sys.argv) > 1 else None)
    print(json.dumps(stats, indent=2))
