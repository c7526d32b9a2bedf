"""Loglikelihood requests/s of ExoLM batched (32) against the same adapter at batch size 1 (the author's setting).

Same process, same model (randomly perturbed weights), same requests: the smoke suite's 5-shot requests as lm-eval builds them (first
`--docs` documents of each of the six smoke tasks), scored by the smoke-shaped model (4 layers, d 128,
seq_len 256, compact vocabulary of 2,048). Runs alternate between the two settings after a warm-up and the
median time of each is reported, so machine-load drift hits both alike. Also checks that both settings
give the same scores (max |delta log-likelihood|).

    python benchmarks/bench_eval.py [--docs 20] [--reps 3] [--batch 32] [--threads N] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch
from lm_eval.api.model import LM

from exoformer.eval.lm import ExoLM
from exoformer.eval.run import evaluate
from exoformer.model import ExoTransformer, variant_config


class RequestRecorder(LM):
    """Collects the loglikelihood Instances lm-eval builds and answers with dummy scores."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = []

    def loglikelihood(self, requests, disable_tqdm=False):
        self.requests += requests
        return [(0.0, False)] * len(requests)

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        raise NotImplementedError

    def generate_until(self, requests, disable_tqdm=False):
        raise NotImplementedError


def smoke_requests(docs: int) -> list:
    recorder = RequestRecorder()
    with tempfile.TemporaryDirectory() as cache:
        evaluate(recorder, None, "smoke", num_fewshot=5, limit=docs, cache_dir=cache)
    return recorder.requests


def smoke_tokenizer():
    from exoformer.data import resolve_data
    from exoformer.data.tokenizer import for_data

    return for_data(resolve_data("smoke"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20, help="documents per smoke task (6 tasks)")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions per setting (median reported)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    requests = smoke_requests(args.docs)
    tokenizer = smoke_tokenizer()
    torch.manual_seed(0)
    model = ExoTransformer(variant_config("dynamic-e-exoformer", shape="smoke"))
    with torch.no_grad():  # the head is zero-initialised: perturb so that scores differ between choices
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    adapters = {"batched": ExoLM(model, tokenizer, batch_size=args.batch, device=args.device),
                "batch1": ExoLM(model, tokenizer, batch_size=1, device=args.device)}
    scores = {name: lm.loglikelihood(requests, disable_tqdm=True) for name, lm in adapters.items()}  # warm-up
    times: dict[str, list[float]] = {name: [] for name in adapters}
    for _ in range(args.reps):
        for name, lm in adapters.items():
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            lm.loglikelihood(requests, disable_tqdm=True)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    max_delta = max(abs(a[0] - b[0]) for a, b in zip(scores["batched"], scores["batch1"], strict=True))
    greedy_same = all(a[1] == b[1] for a, b in zip(scores["batched"], scores["batch1"], strict=True))
    report = {
        "requests": len(requests),
        "device": args.device,
        "threads": torch.get_num_threads(),
        f"batch{args.batch}_requests_per_s": round(len(requests) / median["batched"], 1),
        "batch1_requests_per_s": round(len(requests) / median["batch1"], 1),
        "speedup": round(median["batch1"] / median["batched"], 2),
        "max_abs_loglik_delta": max_delta,
        "is_greedy_identical": greedy_same,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
