"""Peak memory and time of the probe stage: streaming run_probes against the naive keep-every-layer path.

Each measurement runs in a fresh subprocess, so one cannot inherit the other's heap. On CPU the peak is
the resident-set high-water mark (VmHWM, reset through /proc/self/clear_refs before the probes; where
that is not allowed, ru_maxrss) minus the resident set before the probes: it counts the probe stage
only, not the model; a short warm-up pass first pages in library code, which would otherwise count.
On CUDA it is torch.cuda.max_memory_allocated minus the memory allocated before. tracemalloc is not
used: it does not see torch's tensor allocations. Times on a shared CPU are noisy: compare the ratio
only when the machine is otherwise idle.

    .venv/bin/python benchmarks/bench_analysis.py                      # proxy shape, 2 x 512 tokens, CPU
    .venv/bin/python benchmarks/bench_analysis.py --shape 450m-gated --batch 4 --seq 2048 --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def measure(args: argparse.Namespace) -> dict:
    """One measurement in this process (the child)."""
    import torch

    from exoformer.analysis.probes import run_probes
    from exoformer.model import ExoTransformer, variant_config

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = variant_config(args.variant, args.shape, seq_len=max(args.seq, 16))
    model = ExoTransformer(cfg).to(args.device)
    idx = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=args.device)
    ablations = tuple(args.ablations.split(","))
    stream = args.mode == "streaming"
    cuda = args.device.startswith("cuda")
    run_probes(model, idx[:, :16], ablations=ablations, stream=stream)  # page in code paths, not counted
    seconds, peak = float("inf"), 0
    for _ in range(args.repeat):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        else:
            exact = _reset_peak_rss()
            before = _status_kib("VmRSS") * 1024 if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        start = time.perf_counter()
        run_probes(model, idx, ablations=ablations, stream=stream)
        if cuda:
            torch.cuda.synchronize()
        seconds = min(seconds, time.perf_counter() - start)
        if cuda:
            peak, method = max(peak, torch.cuda.max_memory_allocated() - before), "cuda max_memory_allocated"
        elif exact:
            peak, method = max(peak, _status_kib("VmHWM") * 1024 - before), "VmHWM after clear_refs"
        else:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            peak, method = max(peak, rss - before), "ru_maxrss delta (lower bound)"
    one_layer = args.batch * cfg.n_head * args.seq * args.seq * 4
    return {"mode": args.mode, "variant": args.variant, "shape": args.shape, "n_layer": cfg.n_layer,
            "d_model": cfg.d_model, "n_head": cfg.n_head, "batch": args.batch, "seq": args.seq,
            "ablations": list(ablations), "device": args.device, "seconds": round(seconds, 3), "repeat": args.repeat,
            "peak_bytes": peak, "peak_method": method, "one_layer_attention_bytes": one_layer,
            "all_layers_attention_bytes": one_layer * cfg.n_layer}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="dynamic-e-exoformer")
    parser.add_argument("--shape", default="proxy")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--ablations", default="none,anchor,self")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="time = best of N, peak = largest of N")
    parser.add_argument("--mode", choices=("streaming", "naive"), help=argparse.SUPPRESS)  # child only
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(measure(args)))
        return
    rows = []
    for mode in ("streaming", "naive"):
        command = [sys.executable, __file__, *sys.argv[1:], "--mode", mode]
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        if done.returncode:
            sys.exit(f"{mode} measurement failed:\n{done.stderr}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    mib = 2**20
    first = rows[0]
    print(f"probe stage, {first['variant']} {first['shape']} ({first['n_layer']} x {first['d_model']}, "
          f"{first['n_head']} heads), {first['batch']} x {first['seq']} tokens, ablations {first['ablations']}, "
          f"{first['device']}; one layer's attention = {first['one_layer_attention_bytes'] / mib:.1f} MiB, "
          f"all layers = {first['all_layers_attention_bytes'] / mib:.1f} MiB")
    for row in rows:
        print(f"  {row['mode']:>9}: peak {row['peak_bytes'] / mib:8.1f} MiB ({row['peak_method']}), "
              f"{row['seconds']:.2f} s (best of {row['repeat']})")
    streaming, naive = rows
    print(f"  naive / streaming: memory {naive['peak_bytes'] / max(streaming['peak_bytes'], 1):.2f}x, "
          f"time {naive['seconds'] / max(streaming['seconds'], 1e-9):.2f}x")
    print(json.dumps({"streaming": streaming, "naive": naive}))


if __name__ == "__main__":
    main()
