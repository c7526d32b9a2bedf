"""What batching and padding do to bf16 multiple-choice decisions, against the author's batch-1 scoring.

The author's run_eval.py scores one request per forward with bf16 weights, bf16 logits and bf16 log-probs
(docs/official_code.md section 5). Batching right-pads requests to the longest in the batch and changes the
matmul shapes; in bf16 a changed accumulation order can move a log-prob by one bf16 step and flip a close
decision. This scores the bundled smoke tasks (exoformer/eval/smoke_data, 5-shot) once per scoring layout and
reports, per task, the share of decisions (acc: argmax log-likelihood; acc_norm: argmax log-likelihood per
continuation character, lm-eval's first-maximum tie rule) that equal the reference's, and the share of
requests whose bf16 log-likelihood is bit-identical. The reference is batch 1 with full logits (the author's
layout); `fp32` (batch 1) is shown as the named alternative.

    python benchmarks/bench_bf16_batching.py --run-dir RUN_DIR [--batch-sizes 4 32] [--limit N] [--fp32] [--device cpu]
    python benchmarks/bench_bf16_batching.py --random-init      # a small random-init model instead

RUN_DIR is a trained smoke run (`reproduce.py run gated-s42 --preset smoke`). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections import defaultdict
from typing import Any

import numpy as np
import torch


def smoke_model(run_dir: str | None, device: str) -> tuple[torch.nn.Module, Any, str]:
    """(model, tokenizer, description): the run's final checkpoint, or a random-init smoke-shape model."""
    from exoformer.data.tokenizer import for_data
    from exoformer.train.loop import resolve_data_dir

    tokenizer = for_data(resolve_data_dir("smoke"))
    if run_dir:
        from exoformer.train.checkpoint import load_model_from_run

        model, _ = load_model_from_run(run_dir, map_location=device)
        return model, tokenizer, f"trained: {run_dir}"
    from exoformer.model.model import ExoTransformer
    from exoformer.model.variants import variant_config

    torch.manual_seed(0)
    model = ExoTransformer(variant_config("gated", shape="smoke"))
    with torch.no_grad():  # zero-initialised heads would score every choice alike
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval(), tokenizer, "random init (smoke shape)"


def record_instances(model: torch.nn.Module, tokenizer: Any, device: str, fewshot: int, limit: int | None) -> list:
    """Every loglikelihood request lm-eval builds for the smoke suite (the prompts as evaluate builds them)."""
    from exoformer.eval.lm import ExoLM
    from exoformer.eval.run import evaluate

    seen: list = []

    class Recording(ExoLM):
        def loglikelihood(self, requests, disable_tqdm: bool = False):
            seen.extend(requests)
            return [(0.0, False)] * len(requests)  # nothing scored here: each layout scores them below

    evaluate(Recording(model, tokenizer, batch_size=1, device=device, precision="bf16", data_parallel=False),
             tokenizer, "smoke", num_fewshot=fewshot, limit=limit, device=device, precision="bf16")
    return seen


def decisions(instances: list, lls: list[float]) -> dict[str, dict[tuple[str, int], tuple[int, int]]]:
    """Per task, per document: (acc choice, acc_norm choice), with np.argmax's first-maximum rule."""
    docs: dict[str, dict[int, list[tuple[int, float, int]]]] = defaultdict(lambda: defaultdict(list))
    for inst, ll in zip(instances, lls, strict=True):
        docs[inst.task_name][inst.doc_id].append((inst.idx, ll, len(inst.args[1])))
    out: dict[str, dict] = {}
    for task, by_doc in docs.items():
        out[task] = {}
        for doc_id, choices in by_doc.items():
            choices.sort()
            ll = np.array([c[1] for c in choices])
            chars = np.array([max(1, c[2]) for c in choices], dtype=float)
            out[task][doc_id] = (int(np.argmax(ll)), int(np.argmax(ll / chars)))
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir")
    parser.add_argument("--random-init", action="store_true")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[4, 32])
    parser.add_argument("--fewshot", type=int, default=5)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--full-logits-batches", action="store_true", help="also batched layouts with full logits")
    parser.add_argument("--fp32", action="store_true", help="also fp32 at batch 1")
    args = parser.parse_args(argv)
    if not args.run_dir and not args.random_init:
        parser.error("give --run-dir RUN_DIR (a trained smoke run) or --random-init")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    from exoformer.eval.lm import ExoLM
    from exoformer.eval.scoring import scoring_model

    base, tokenizer, what = smoke_model(args.run_dir, args.device)
    instances = record_instances(base, tokenizer, args.device, args.fewshot, args.limit)
    models = {p: scoring_model(copy.deepcopy(base), p) for p in ("bf16", "fp32")}
    layouts = {"batch1_full_logits (reference)": ("bf16", 1, True), "batch1 (lean head)": ("bf16", 1, False)}
    for bs in args.batch_sizes:
        layouts[f"batch{bs} right-padded (lean head)"] = ("bf16", bs, False)
        if args.full_logits_batches:
            layouts[f"batch{bs} right-padded (full logits)"] = ("bf16", bs, True)
    if args.fp32:
        layouts["fp32 batch1"] = ("fp32", 1, False)
    scores = {}
    for name, (precision, bs, full) in layouts.items():
        lm = ExoLM(models[precision], tokenizer, batch_size=bs, device=args.device, full_logits=full,
                   precision=precision, data_parallel=False)
        started = time.perf_counter()
        scores[name] = [ll for ll, _ in lm.loglikelihood(instances, disable_tqdm=True)]
        print(f"{name}: {len(instances)} requests in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    ref_name = next(iter(layouts))
    ref = decisions(instances, scores[ref_name])
    report: dict[str, Any] = {"model": what, "requests": len(instances), "reference": ref_name, "layouts": {}}
    for name, lls in scores.items():
        if name == ref_name:
            continue
        got = decisions(instances, lls)
        per_task = {}
        for task in sorted(ref):
            keys = sorted(ref[task])
            per_task[task] = {"docs": len(keys),
                              "acc_agree": float(np.mean([got[task][k][0] == ref[task][k][0] for k in keys])),
                              "acc_norm_agree": float(np.mean([got[task][k][1] == ref[task][k][1] for k in keys]))}
        identical = float(np.mean([a == b for a, b in zip(lls, scores[ref_name], strict=True)]))
        report["layouts"][name] = {"bit_identical_loglikelihoods": identical, "per_task": per_task}
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
