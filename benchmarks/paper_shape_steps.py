"""Real optimiser steps of each Table-1 model at its exact 450M shape on CPU: the paper path before a GPU runs it.

Per (spec, precision) row, in a fresh process of its own (one model in memory at a time), through the real
training loop (exoformer.train.loop.train) on the bundled smoke corpus, micro-batch 1 at a short sequence:
1. run A: two optimiser steps, a checkpoint after each (save, fsync, hash: exoformer/train/checkpoint.py);
2. run B: a fresh run of one step from the same seed: its loss must equal run A's first (determinism);
3. run C: run A's directory without its step-2 checkpoint, resumed: its step 2 must equal run A's (the loss, and
   every tensor of the step-2 checkpoint's model bitwise).
Reported: the losses, s/step (run A's second step), the row's peak resident memory, the checkpoint size, a save
and a verified load of it, and the hours of the full 10B-token run: the cost model's GPU-hours (h100 profile; it
prices bf16 at the GPU's bf16 peak, so an fp32 row has none) and the CPU-hours this machine's step time
extrapolates to. A row whose resume raises reports the error, not a traceback.

    python benchmarks/paper_shape_steps.py [--specs gated-s42 ...] [--precisions official-pure-bf16 fp32]
        [--seq 256] [--layers N] [--width D --heads H] [--vocab V] [--json PATH] [--threads N]

--layers/--width/--heads/--vocab shrink the model for CI (tests/benchmarks/test_paper_shape_steps.py), the same
code path. Not part of CI's default run at the true shape: one row takes minutes on 2 cores (Muon's Polar
Express on 29 layers of 1024-wide matrices dominates the step).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("official-pure-bf16", "fp32")


def table1_specs() -> list[str]:
    """The paper's run (seed 42) of every Table-1 row, as the registry lists them (experiments/tables.yaml)."""
    from exoformer.registry.registry import Registry

    return Registry().select("table1")


def paper_spec(name: str, precision: str):
    from exoformer.registry.registry import Registry

    return Registry().resolve(name, preset="450m", overrides=[f"train.precision={precision}"])


def model_config(name: str, args: argparse.Namespace):
    """The spec's model as the 450m preset resolves it, at this row's sequence (and CI's smaller shape)."""
    import dataclasses

    shape = {"seq_len": args.seq}
    for field, value in (("n_layer", args.layers), ("d_model", args.width), ("n_head", args.heads),
                         ("vocab_size", args.vocab)):
        if value is not None:
            shape[field] = value
    return dataclasses.replace(paper_spec(name, "fp32").model, **shape)


def recipe(precision: str, seq: int, steps: int):
    from exoformer.train.config import TrainConfig

    return TrainConfig(steps=steps, batch_tokens=seq, micro_batch_seqs=1, seq_len=seq, data="smoke", warmup_steps=1,
                       muon_momentum_steps=1, val_every=0, val_batches=1, checkpoint_every=1, keep_checkpoints=2,
                       final_val_tokens=seq, precision=precision)


def train_lines(run: Path) -> dict[int, dict]:
    """The run's training lines of metrics.jsonl by step (exoformer/rundir.py, the file's one reader)."""
    from exoformer.rundir import RunDir

    return {r["step"]: r for r in RunDir(run).metrics("train", strict=True)}


def losses(run: Path) -> dict[int, float]:
    return {step: r["loss"] for step, r in train_lines(run).items()}


def first_difference(a: dict, b: dict) -> str | None:
    import torch

    for key in a:
        if key not in b or a[key].dtype != b[key].dtype or not torch.equal(a[key], b[key]):
            return key
    return None


def describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"


def run_row(spec: str, precision: str, args: argparse.Namespace) -> dict:
    """The row's three runs in this process (see the module docstring)."""
    import torch

    from exoformer.train import checkpoint as ckpt
    from exoformer.train.loop import train

    torch.set_num_threads(args.threads)
    cfg = model_config(spec, args)
    row: dict = {"spec": spec, "precision": precision, "shape": f"{cfg.n_layer}x{cfg.d_model}",
                 "params": cfg.num_parameters(), "seq": args.seq}
    work = Path(tempfile.mkdtemp(prefix="paper-steps-"))
    try:
        a, b, c = work / "a", work / "b", work / "c"
        train(cfg, recipe(precision, args.seq, 2), a, device="cpu")
        first = losses(a)
        row["loss_1"], row["loss_2"] = first.get(1), first.get(2)
        row["s_per_step"] = train_lines(a)[2]["ms_per_step"] / 1000
        row["finite"] = all(v is not None and math.isfinite(v) for v in (row["loss_1"], row["loss_2"]))
        step2 = ckpt.checkpoint_dir(a) / ckpt.checkpoint_name(2)
        row["checkpoint_mb"] = step2.stat().st_size / 1e6
        ckpt._VERDICTS.clear()  # time a cold load: hash + torch.load, as a resumed job does
        started = time.perf_counter()
        state = ckpt.load_verified(step2)
        row["load_s"] = time.perf_counter() - started
        started = time.perf_counter()
        ckpt.save_checkpoint(work / "saved", 2, state, keep=1)
        row["save_s"] = time.perf_counter() - started
        reference = state["model"]
        del state

        train(cfg, recipe(precision, args.seq, 1), b, device="cpu")
        row["repeat_loss_1"] = losses(b).get(1)
        row["repeat_equal"] = row["repeat_loss_1"] == row["loss_1"]
        shutil.rmtree(b)

        shutil.copytree(a, c)
        for path in ckpt.checkpoint_dir(c).glob(f"{ckpt.checkpoint_name(2)}*"):
            path.unlink()
        try:
            train(cfg, recipe(precision, args.seq, 2), c, device="cpu")
            resumed = ckpt.load_verified(ckpt.checkpoint_dir(c) / ckpt.checkpoint_name(2))["model"]
            differs = first_difference(reference, resumed)
            same_loss = losses(c).get(2) == row["loss_2"]
            row["resume"] = "equal" if differs is None and same_loss else (
                f"differs: {'loss' if not same_loss else differs}")
        except Exception as err:  # noqa: BLE001 - the row reports a failing resume, the other rows still run
            row["resume"] = f"FAILED: {describe(err)}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    row["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    row.update(extrapolate(spec, precision, row["s_per_step"], args.seq))
    return row


def extrapolate(name: str, precision: str, seconds: float, seq: int) -> dict:
    """GPU-hours of the paper run (cost model, h100; None in fp32, which it does not price) and CPU-hours at this
    row's measured step time."""
    from exoformer.budget.cost import estimate
    from exoformer.registry.profiles import load_profile

    spec = paper_spec(name, precision)
    return {"gpu_hours_h100": None if precision == "fp32" else estimate(spec, load_profile("h100")).gpu_hours,
            "cpu_hours_10b": seconds * spec.train.tokens / seq / 3600}


def row_in_subprocess(spec: str, precision: str, args: argparse.Namespace) -> dict:
    """One row in a fresh interpreter: its peak RSS is its own, and its memory is returned when it ends."""
    cmd = [sys.executable, __file__, "--row", spec, precision, "--seq", str(args.seq), "--threads",
           str(args.threads)]
    for flag in ("layers", "width", "heads", "vocab"):
        if getattr(args, flag) is not None:
            cmd += [f"--{flag}", str(getattr(args, flag))]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"spec": spec, "precision": precision, "error": f"exit {done.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])


def fmt(value, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return format(value, spec)


def print_head() -> None:
    print(f"{'spec':<24}  {'precision':<18}  {'shape':>7}  {'loss 1':>7}  {'loss 2':>7}  {'repeat':>6}  "
            f"{'s/step':>7}  {'RSS GB':>6}  {'ckpt MB':>7}  {'save s':>6}  {'load s':>6}  {'GPU-h':>6}  "
            f"{'CPU-h 10B':>9}  resume", flush=True)


def print_row(r: dict) -> None:
    if "error" in r:
        print(f"{r['spec']:<24}  {r['precision']:<18}  not run: {r['error']}", flush=True)
        return
    print(f"{r['spec']:<24}  {r['precision']:<18}  {r['shape']:>7}  {fmt(r['loss_1'], '.4f'):>7}  "
              f"{fmt(r['loss_2'], '.4f'):>7}  {fmt(r['repeat_equal']):>6}  {fmt(r['s_per_step'], '.1f'):>7}  "
              f"{fmt(r['peak_rss_gb'], '.1f'):>6}  {fmt(r['checkpoint_mb'], '.0f'):>7}  "
              f"{fmt(r['save_s'], '.1f'):>6}  {fmt(r['load_s'], '.1f'):>6}  {fmt(r['gpu_hours_h100'], '.1f'):>6}  "
              f"{fmt(r['cpu_hours_10b'], ',.0f'):>9}  "
              f"{r['resume']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", nargs="*", default=None, help="spec names (default: table1's rows, seed 42)")
    parser.add_argument("--precisions", nargs="*", default=list(PRECISIONS))
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--layers", type=int, default=None, help="shrink the depth (CI)")
    parser.add_argument("--width", type=int, default=None, help="shrink d_model (CI; set --heads with it)")
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--vocab", type=int, default=None, help="shrink the vocabulary (CI; >= the smoke corpus's)")
    parser.add_argument("--threads", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--row", nargs=2, metavar=("VARIANT", "PRECISION"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.row:
        print(json.dumps(run_row(*args.row, args)), flush=True)
        return 0
    from exoformer.io import atomic_write_json

    rows = []
    print_head()
    for spec in args.specs or table1_specs():
        for precision in args.precisions:  # each row printed (and the JSON rewritten) as soon as it ends
            rows.append(row_in_subprocess(spec, precision, args))
            print_row(rows[-1])
            if args.json:
                atomic_write_json(args.json, {"tool": "benchmarks/paper_shape_steps.py", "rows": rows})
    bad = [r for r in rows if "error" in r or not r.get("finite") or not r.get("repeat_equal")
           or not str(r.get("resume", "")).startswith("equal")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
