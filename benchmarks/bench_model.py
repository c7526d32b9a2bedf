"""Forward+backward time of every variant relative to `gated`, measured in the same process.

CPU proxy shape (8 layers, d 256, 4 heads, 512 tokens, batch 4). Repetitions are interleaved across
variants (round-robin) after a warm-up, and each variant's median is divided by gated's median, so drifts
in machine load hit every variant alike. Targets (issue 2): e-exoformer <= 1.08x, dynamic-e-exoformer
<= 1.10x gated; the paper's reference implementation measured 8-15% extra latency (v4 appendix D).

    python benchmarks/bench_model.py [--reps 7] [--variants gated e-exoformer ...] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from exoformer.model import ExoTransformer, list_variants, variant_config

TARGETS = {"e-exoformer": 1.08, "dynamic-e-exoformer": 1.10}
REFERENCE = "gated"


def step_time(model: ExoTransformer, idx: torch.Tensor) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one forward+backward. CPU time is printed as well because on a
    shared machine wall time mostly measures the neighbours; CPU time counts only this process's work."""
    start, start_cpu = time.perf_counter(), time.process_time()
    logits = model(idx)
    logits.float().square().mean().backward()
    elapsed, elapsed_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    model.zero_grad(set_to_none=True)
    return elapsed, elapsed_cpu


def forward_time(fn) -> tuple[float, float]:
    """(wall, CPU) seconds of a no-grad forward: the default forward vs the inspection mode."""
    start, start_cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        fn()
    return time.perf_counter() - start, time.process_time() - start_cpu


INSPECTED = "dynamic-e-exoformer"
"""Forward-only rows: `INSPECTED` default forward and inspect() against gated's default forward, showing that
the default path carries no inspection cost (its ratio matches the fwd+bwd row) while inspect() pays."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per variant (median is reported)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed repetitions per variant first")
    parser.add_argument("--variants", nargs="*", default=None, help="default: every variant")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    names = args.variants or list_variants()
    names = [REFERENCE, *[n for n in names if n != REFERENCE]]
    torch.manual_seed(0)
    models = {n: ExoTransformer(variant_config(n, "proxy")) for n in names}
    cfg = models[REFERENCE].config
    idx = torch.randint(0, cfg.vocab_size, (args.batch, cfg.seq_len))
    jobs = {name: (lambda m=model: step_time(m, idx)) for name, model in models.items()}
    if INSPECTED in models:
        jobs[f"fwd-only {REFERENCE}"] = lambda: forward_time(lambda: models[REFERENCE](idx))
        jobs[f"fwd-only {INSPECTED}"] = lambda: forward_time(lambda: models[INSPECTED](idx))
        inspect = models[INSPECTED].inspect
        jobs[f"inspect {INSPECTED}"] = lambda: forward_time(lambda: inspect(idx, on_layer=lambda trace: None))
    for _ in range(args.warmup):
        for job in jobs.values():
            job()
    wall: dict[str, list[float]] = {n: [] for n in jobs}
    cpu: dict[str, list[float]] = {n: [] for n in jobs}
    for _ in range(args.reps):
        for name, job in jobs.items():
            w, c = job()
            wall[name].append(w)
            cpu[name].append(c)
    ref_wall, ref_cpu = statistics.median(wall[REFERENCE]), statistics.median(cpu[REFERENCE])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"forward+backward, shape proxy ({cfg.n_layer}x{cfg.d_model}x{cfg.n_head}, T={cfg.seq_len}, "
          f"batch {args.batch}), {torch.get_num_threads()} threads, median of {args.reps}, CPU, "
          f"load average {load:.1f} on {os.cpu_count()} cores")
    print(f"{'variant':32s} {'wall ms':>9s} {'x gated':>8s} {'cpu ms':>9s} {'x gated':>8s} {'target':>7s}  status")
    for name in jobs:
        if name == f"fwd-only {REFERENCE}":
            ref_wall, ref_cpu = statistics.median(wall[name]), statistics.median(cpu[name])
            print(f"-- forward only, no grad, ratios against {name} --")
        m_wall, m_cpu = statistics.median(wall[name]), statistics.median(cpu[name])
        ratio = m_wall / ref_wall
        target = TARGETS.get(name)
        status = "" if target is None else ("ok" if ratio <= target else "MISSED")
        print(f"{name:32s} {1000 * m_wall:9.1f} {ratio:8.3f} {1000 * m_cpu:9.1f} {m_cpu / ref_cpu:8.3f} "
              f"{'' if target is None else f'{target:.2f}':>7s}  {status}")


if __name__ == "__main__":
    main()
