"""A short smoke run of e-exoformer under official-pure-bf16 on the CPU: its train and validation losses.

Used to measure what a change of the pure-bf16 numerics (autocast or not, Muon's buffer dtypes) does to a real
run: run it before and after the change and compare the printed losses.

    python benchmarks/bench_pure_bf16_smoke.py [--steps 60]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import torch

from exoformer.registry.registry import Registry
from exoformer.rundir import VAL_CURVE_KEY
from exoformer.train.loop import train


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    spec = Registry().resolve("e-exoformer-s42", preset="smoke")
    recipe = dataclasses.replace(spec.train, steps=args.steps, val_every=max(1, args.steps // 4),
                                 checkpoint_every=args.steps, precision="official-pure-bf16")
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        result = train(spec.model, recipe, out)
        lines = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    record = {"steps": args.steps, "final_train_loss": result.final_train_loss,
              "val_losses": [line[VAL_CURVE_KEY] for line in lines if line["kind"] == "val"],
              "seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps(record))
    return record


if __name__ == "__main__":
    main()
