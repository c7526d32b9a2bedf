"""How long a job process takes to exit once its work is done, with and without exoformer/process_exit.py.

Each child imports what a local job has loaded by its end (torch, lm-eval with datasets, the pipeline), takes one
optimiser step, records its CPU time and the wall clock, and returns; the parent reads the child's total CPU time
(wait4) and the wall clock at its end. Exit = total - recorded. The two kinds of child alternate, so a drift in
the machine's speed falls on both; the ratio is the number.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_process_exit.py [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
import datasets, lm_eval.evaluator, torch
from exoformer.runs import pipeline
if sys.argv[1] == "freeze":
    from exoformer.process_exit import collect_then_freeze_at_exit
    collect_then_freeze_at_exit()
model = torch.nn.Linear(64, 64)
optimiser = torch.optim.AdamW(model.parameters())
model(torch.randn(4, 64)).sum().backward()
optimiser.step()
sys.stdout.write(json.dumps({"cpu": time.process_time(), "wall": time.time()}))
sys.stdout.flush()
"""


def one_exit(mode: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) the child spent after its last statement."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, env=env, cwd=REPO)
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    ended = time.time()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"child ({mode}) exited with {process.returncode}")
    record = json.loads(out)
    return usage.ru_utime + usage.ru_stime - record["cpu"], ended - record["wall"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="children of each kind")
    args = parser.parse_args(argv)
    times: dict[str, list[tuple[float, float]]] = {"default": [], "freeze": []}
    for rep in range(args.reps):
        for mode in ("default", "freeze") if rep % 2 == 0 else ("freeze", "default"):
            times[mode].append(one_exit(mode))
    print(f"process exit after the job's imports, median of {args.reps} (load average {os.getloadavg()[0]:.1f}):")
    medians = {mode: (statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs))
               for mode, runs in times.items()}
    for mode, (cpu, wall) in medians.items():
        print(f"  {mode:<8} {cpu:.3f} CPU-s  {wall:.3f} s wall")
    print(f"  freeze / default: {medians['freeze'][0] / medians['default'][0]:.2f} (CPU), "
          f"{medians['freeze'][1] / medians['default'][1]:.2f} (wall)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
