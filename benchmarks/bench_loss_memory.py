"""Peak memory of the training loss with and without chunking: forward and backward of CE + z-loss from the
LM head's input (hidden (B, T, d) and head weight (V, d)), at GPT-2's vocabulary, same process, same inputs.

Each variant runs twice (the first warms the allocator) and the second peak is reported; a ratio
chunked / unchunked below 1 is the saving (exoformer/train/loss.py). On CPU the peak is the resident-set
high-water mark above the start (benchmarks/measure.py), on CUDA the allocator's.

    python benchmarks/bench_loss_memory.py [--tokens 4096] [--d-model 256] [--chunk 1024] [--device cpu]
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.measure import measure, mib
from exoformer.train.loss import chunked_lm_loss, lm_loss

VOCAB = 50304


def loss_step(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int | None) -> float:
    h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
    if chunk is None:
        loss, _, _ = lm_loss(h @ w.T, targets, 1e-5)
    else:
        loss, _, _ = chunked_lm_loss(h, w, targets, 1e-5, chunk_tokens=chunk)
    loss.backward()
    return float(loss.detach())


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096, help="tokens of the micro-batch (B x T)")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--chunk", type=int, default=1024, help="tokens per loss chunk")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    hidden = torch.randn(args.tokens, args.d_model, device=args.device).to(dtype)
    weight = (torch.randn(VOCAB, args.d_model, device=args.device) * 0.02).to(dtype)
    targets = torch.randint(0, VOCAB, (args.tokens,), device=args.device)
    peaks, losses = {}, {}
    for name, chunk in (("unchunked", None), ("chunked", args.chunk)):
        for _ in range(2):
            losses[name], _, peaks[name] = measure(lambda c=chunk: loss_step(hidden, weight, targets, c), args.device)
    ratio = None if None in peaks.values() else round(peaks["chunked"] / peaks["unchunked"], 3)
    result = {"tokens": args.tokens, "vocab": VOCAB, "chunk": args.chunk, "dtype": args.dtype,
              "fp32_logits_mib": mib(args.tokens * VOCAB * 4),
              "peak_mib": {k: mib(v) for k, v in peaks.items()}, "chunked_over_unchunked": ratio,
              "loss": losses}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
