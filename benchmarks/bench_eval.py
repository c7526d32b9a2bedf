"""Evaluation benchmarks: the lean scoring path against full (B, T, V) logits, and batching against batch 1.

1. Scoring path (`--only scoring`): the same ExoLM requests scored lean (LM head only at the continuation
   positions, `exoformer.eval.scoring`) and from the full logits (`full_logits=True`, the former path), at
   `--seq 1024 --batch 16 --vocab 57601` (the official checkpoints' vocabulary) with a small trunk, so that
   the head dominates as it does at 450M (`exoformer.eval.scoring.Scorer`, ExoLM's token side).
Reports the peak memory held by each call above its start
   (benchmarks/measure.py: CUDA allocator peak, or the process's resident high-water mark on Linux CPUs),
   requests/s, their ratios, and the largest |delta log-likelihood| between the two paths (target: peak
   ratio <= 0.2, delta <= 1e-5).
2. Batching (`--only batching`): loglikelihood requests/s of ExoLM batched (32) against batch size 1 (the
   author's setting). Same process, same model (randomly perturbed weights), same requests: the smoke
   suite's 5-shot requests as lm-eval builds them (first `--docs` documents of each of the six smoke tasks),
   scored by the smoke-shaped model (4 layers, d 128, seq_len 256, compact vocabulary of 2,048).

Runs alternate between the two settings after a warm-up and the median time of each is reported, so
machine-load drift hits both alike.

    python benchmarks/bench_eval.py [--only scoring|batching] [--seq 1024] [--batch 16] [--vocab 57601]
        [--requests 32] [--batched 32] [--docs 20] [--reps 3] [--threads N] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile

import torch
from lm_eval.api.model import LM
from measure import measure, mib, token_requests

from exoformer.eval.lm import ExoLM
from exoformer.eval.run import evaluate
from exoformer.eval.scoring import Scorer
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


def perturbed(model: ExoTransformer, seed: int = 0) -> ExoTransformer:
    """The head is zero-initialised: perturb every weight so that scores differ between choices."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return model


def alternate(jobs: dict, reps: int, device: str) -> tuple[dict, dict, dict]:
    """Warm-up once each, then `reps` interleaved timed runs: (first results, median seconds, peak bytes)."""
    results, peaks = {}, {}
    for name, job in jobs.items():
        results[name], _, peaks[name] = measure(job, device)
    times: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(reps):
        for name, job in jobs.items():
            _, elapsed, peak = measure(job, device)
            times[name].append(elapsed)
            if peak is not None and peaks[name] is not None:
                peaks[name] = max(peaks[name], peak)
    return results, {name: statistics.median(t) for name, t in times.items()}, peaks


def bench_scoring(args) -> dict:
    cfg = variant_config("gated", shape="tiny", n_layer=2, d_model=128, n_head=2, seq_len=args.seq,
                         vocab_size=args.vocab)
    model = perturbed(ExoTransformer(cfg)).to(args.device).eval()
    requests = [(context, continuation) for _, context, continuation in token_requests(args.requests, args.seq,
                                                                                      args.vocab)]
    scorers = {"lean": Scorer(model, pad_id=0, device=args.device),
               "full_logits": Scorer(model, pad_id=0, device=args.device, full_logits=True)}
    jobs = {name: (lambda s=scorer: s.score(requests, args.batch)) for name, scorer in scorers.items()}
    scores, median, peaks = alternate(jobs, args.reps, args.device)
    max_delta = max(abs(a[0] - b[0]) for a, b in zip(scores["lean"], scores["full_logits"], strict=True))
    peak_ratio = (round(peaks["lean"] / peaks["full_logits"], 4)
                  if peaks["lean"] is not None and peaks["full_logits"] else None)
    return {
        "part": "scoring", "requests": len(requests), "seq_len": args.seq, "batch": args.batch,
        "vocab": args.vocab, "device": args.device, "threads": torch.get_num_threads(),
        "lean_peak_mib": mib(peaks["lean"]), "full_logits_peak_mib": mib(peaks["full_logits"]),
        "peak_ratio_lean_over_full": peak_ratio,
        "lean_requests_per_s": round(len(requests) / median["lean"], 2),
        "full_logits_requests_per_s": round(len(requests) / median["full_logits"], 2),
        "speedup": round(median["full_logits"] / median["lean"], 2),
        "max_abs_loglik_delta": max_delta,
        "is_greedy_identical": all(a[1] == b[1] for a, b in zip(scores["lean"], scores["full_logits"],
                                                                 strict=True)),
        "targets": {"peak_ratio_lean_over_full": "<= 0.2", "max_abs_loglik_delta": "<= 1e-5"},
    }


def bench_batching(args) -> dict:
    requests = smoke_requests(args.docs)
    tokenizer = smoke_tokenizer()
    model = perturbed(ExoTransformer(variant_config("dynamic-e-exoformer", shape="smoke")))
    batch = args.batched
    adapters = {"batched": ExoLM(model, tokenizer, batch_size=batch, device=args.device),
                "batch1": ExoLM(model, tokenizer, batch_size=1, device=args.device)}
    jobs = {name: (lambda lm=lm: lm.loglikelihood(requests, disable_tqdm=True)) for name, lm in adapters.items()}
    scores, median, _ = alternate(jobs, args.reps, args.device)
    max_delta = max(abs(a[0] - b[0]) for a, b in zip(scores["batched"], scores["batch1"], strict=True))
    greedy_same = all(a[1] == b[1] for a, b in zip(scores["batched"], scores["batch1"], strict=True))
    return {
        "part": "batching", "requests": len(requests), "device": args.device, "threads": torch.get_num_threads(),
        f"batch{batch}_requests_per_s": round(len(requests) / median["batched"], 1),
        "batch1_requests_per_s": round(len(requests) / median["batch1"], 1),
        "speedup": round(median["batch1"] / median["batched"], 2),
        "max_abs_loglik_delta": max_delta,
        "is_greedy_identical": greedy_same,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("scoring", "batching"), default=None, help="default: both parts")
    parser.add_argument("--seq", type=int, default=1024, help="scoring: sequence length")
    parser.add_argument("--batch", type=int, default=16, help="scoring: batch size")
    parser.add_argument("--batched", type=int, default=32, help="batching: the batch size compared with 1")
    parser.add_argument("--vocab", type=int, default=57601, help="scoring: vocabulary rows")
    parser.add_argument("--requests", type=int, default=32, help="scoring: requests (each fills the window)")
    parser.add_argument("--docs", type=int, default=20, help="batching: documents per smoke task (6 tasks)")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions per setting (median reported)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    parts = [args.only] if args.only else ["scoring", "batching"]
    for part in parts:
        report = bench_scoring(args) if part == "scoring" else bench_batching(args)
        print(json.dumps(report, indent=2), flush=True)


if __name__ == "__main__":
    main()
