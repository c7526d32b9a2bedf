"""Forward+backward time of the mixing variants relative to `gated`, eager and torch.compile, in one process.

CPU proxy shape (default 8 layers, d 512, 8 heads, 512 tokens, batch 2). Repetitions are interleaved across
every row (round-robin) after a warm-up, and each row's median is divided by gated's median in the same
mode, so drifts in machine load hit every row alike. PASS/MISS is judged on process CPU time (on a shared
machine wall time mostly measures the neighbours); wall time is printed beside it.
Targets: e-exoformer <= 1.05x and dynamic-e-exoformer <= 1.07x gated, in both modes (the paper's reference
implementation measured 8-15% extra latency, v4 appendix D).
Rows "plain mixing" run the same variant with Mixer.forward (Eq. 10 as written) instead of the fused
Mixer.project_and_mix: they show whether the fused path pays.

    python benchmarks/bench_model.py [--reps 5] [--variants gated e-exoformer ...] [--no-compile]
        [--layers 8 --d-model 512 --heads 8 --seq-len 512 --batch 2] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

from exoformer.model import ExoTransformer, variant_config

TARGETS = {"e-exoformer": 1.05, "dynamic-e-exoformer": 1.07}
REFERENCE = "gated"
INSPECTED = "dynamic-e-exoformer"
"""Eager forward-only rows: its default forward and inspect() against gated's forward, showing that the
default forward carries no tracing cost while inspect() pays for its explicit attention."""


def step_time(model: torch.nn.Module, idx: torch.Tensor) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one forward+backward."""
    start, start_cpu = time.perf_counter(), time.process_time()
    logits = model(idx)
    logits.float().square().mean().backward()
    elapsed, elapsed_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    for p in model.parameters():
        p.grad = None
    return elapsed, elapsed_cpu


def forward_time(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall, CPU) seconds of a no-grad call."""
    start, start_cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        fn()
    return time.perf_counter() - start, time.process_time() - start_cpu


def build_jobs(names: list[str], args: argparse.Namespace, idx: torch.Tensor) -> dict[str, tuple[str, Callable]]:
    """row name -> (reference row of its ratio, timed callable)."""
    jobs: dict[str, tuple[str, Callable]] = {}
    modes = ["eager"] if args.no_compile else ["eager", "compiled"]
    shape = dict(n_layer=args.layers, d_model=args.d_model, n_head=args.heads, seq_len=args.seq_len,
                 vocab_size=args.vocab)
    for mode in modes:
        ref = f"{mode} {REFERENCE}"
        for name in names:
            cfg = variant_config(name, **shape)
            kinds = [("", True)] + ([(" plain mixing", False)] if cfg.mix_paths and args.plain else [])
            for suffix, fused in kinds:
                torch.manual_seed(0)
                model = ExoTransformer(cfg, fused_mixing=fused)
                run = torch.compile(model) if mode == "compiled" else model
                jobs[f"{mode} {name}{suffix}"] = (ref, lambda m=run: step_time(m, idx))
    if INSPECTED in names:
        torch.manual_seed(0)
        ref_model = ExoTransformer(variant_config(REFERENCE, **shape))
        inspected = ExoTransformer(variant_config(INSPECTED, **shape))
        ref = f"fwd-only {REFERENCE}"
        jobs[ref] = (ref, lambda: forward_time(lambda: ref_model(idx)))
        jobs[f"fwd-only {INSPECTED}"] = (ref, lambda: forward_time(lambda: inspected(idx)))
        jobs[f"inspect {INSPECTED}"] = (ref, lambda: forward_time(
            lambda: inspected.inspect(idx, on_layer=lambda trace: None)))
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per row (median is reported)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed repetitions per row first (compiles)")
    parser.add_argument("--variants", nargs="*", default=[REFERENCE, *TARGETS])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true", help="eager rows only")
    parser.add_argument("--no-plain", dest="plain", action="store_false", help="skip the plain-mixing rows")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    names = [REFERENCE, *[n for n in args.variants if n != REFERENCE]]
    idx = torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=torch.Generator().manual_seed(0))
    jobs = build_jobs(names, args, idx)
    for _ in range(args.warmup):
        for _, job in jobs.values():
            job()
    wall: dict[str, list[float]] = {n: [] for n in jobs}
    cpu: dict[str, list[float]] = {n: [] for n in jobs}
    for _ in range(args.reps):
        for name, (_, job) in jobs.items():
            w, c = job()
            wall[name].append(w)
            cpu[name].append(c)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"forward+backward, {args.layers} layers x d {args.d_model} x {args.heads} heads, T={args.seq_len}, "
          f"batch {args.batch}, {torch.get_num_threads()} threads, median of {args.reps}, CPU, "
          f"load average {load:.1f} on {os.cpu_count()} cores; PASS/MISS on the CPU-time ratio")
    print(f"{'row':40s} {'wall ms':>9s} {'x ref':>7s} {'cpu ms':>9s} {'x ref':>7s} {'target':>7s}  status")
    for name, (ref, _) in jobs.items():
        if name == ref and name != f"eager {REFERENCE}":
            print(f"-- ratios against {ref} --")
        m_wall, m_cpu = statistics.median(wall[name]), statistics.median(cpu[name])
        r_wall, r_cpu = m_wall / statistics.median(wall[ref]), m_cpu / statistics.median(cpu[ref])
        variant = name.split(" ", 1)[1]
        target = TARGETS.get(variant) if name.startswith(("eager", "compiled")) else None
        status = "" if target is None else ("PASS" if r_cpu <= target else "MISS")
        print(f"{name:40s} {1000 * m_wall:9.1f} {r_wall:7.3f} {1000 * m_cpu:9.1f} {r_cpu:7.3f} "
              f"{'' if target is None else f'{target:.2f}':>7s}  {status}")


if __name__ == "__main__":
    main()
