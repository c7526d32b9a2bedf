"""`plan TARGET`: what `run` would do per spec (run / skip / resume), its FLOPs and GPU-hours or CPU-minutes."""

from __future__ import annotations

import argparse
import json

from exoformer.harness.cli_common import (
    action_for, add_registry_arg, add_resolve_args, load_registry, run_dir, split_overrides,
)
from exoformer.harness.cost import estimate
from exoformer.harness.profiles import load_profile

HELP = "show what would run, skip or resume for a spec, glob, table or figure, with FLOPs and GPU-hours"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="spec name, glob, table id or figure id")
    parser.add_argument("--profile", default=None,
                        help="cost profile in slurm/profiles/ (default: the spec's, else the preset's)")
    parser.add_argument("--all-seeds", action="store_true",
                        help="for a table: also the seed replicates of each row (default: the paper's run)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_resolve_args(parser)
    add_registry_arg(parser)


def run(args: argparse.Namespace) -> int:
    reg = load_registry(args)
    spec_sets, profile_sets = split_overrides(args.overrides)
    rows, profiles = [], {}
    for name in reg.select(args.target, replicates=args.all_seeds):
        spec = reg.resolve(name, preset=args.preset, overrides=spec_sets)
        pname = args.profile or spec.placement.profile or reg.presets[spec.preset].profile or "h100"
        if pname not in profiles:
            profiles[pname] = load_profile(pname, profile_sets)
        cost = estimate(spec, profiles[pname])
        directory = run_dir(spec, args.runs_dir)
        action, status = action_for(directory)
        rows.append({"name": spec.name, "group": spec.group, "hash": spec.hash12, "variant": spec.variant,
                     "preset": spec.preset, "profile": pname, "action": action, "status": status,
                     "params": spec.model.num_parameters(), "tokens": spec.train.tokens, "flops": cost.flops,
                     "gpu_hours": cost.gpu_hours, "cpu_minutes": cost.cpu_minutes, "run_dir": str(directory)})
    todo = [r for r in rows if r["action"] != "skip"]
    total = {"specs": len(rows), "to_run": sum(r["action"] == "run" for r in rows),
             "to_resume": sum(r["action"] == "resume" for r in rows),
             "to_skip": sum(r["action"] == "skip" for r in rows),
             "flops": sum(r["flops"] for r in todo),
             "gpu_hours": _sum(r["gpu_hours"] for r in todo), "cpu_minutes": _sum(r["cpu_minutes"] for r in todo)}
    if args.json:
        print(json.dumps({"target": args.target, "specs": rows, "total": total}))
        return 0
    w = max(4, *(len(r["name"]) for r in rows))
    print(f"{'SPEC':<{w}}  {'ACTION':<6}  {'PRESET':<6}  {'HASH':<12}  {'PARAMS':>8}  {'TOKENS':>8}  "
          f"{'FLOPS':>9}  COST")
    for r in rows:
        print(f"{r['name']:<{w}}  {r['action']:<6}  {r['preset']:<6}  {r['hash']}  {r['params'] / 1e6:>7.1f}M  "
              f"{_si(r['tokens']):>8}  {r['flops']:>9.3g}  {_cost(r['gpu_hours'], r['cpu_minutes'], r['profile'])}")
    print(f"total: {total['to_run']} to run, {total['to_resume']} to resume, {total['to_skip']} done; "
          f"{total['flops']:.3g} FLOPs, {_cost(total['gpu_hours'], total['cpu_minutes'], '/'.join(profiles))}"
          " (excluding skipped runs)")
    return 0


def _sum(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _si(n: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(int(n))


def _cost(gpu_hours: float | None, cpu_minutes: float | None, profile: str) -> str:
    parts = []
    if gpu_hours is not None:
        parts.append(f"{gpu_hours:,.1f} GPU-h")
    if cpu_minutes is not None:
        parts.append(f"{cpu_minutes:,.1f} CPU-min")
    return (" + ".join(parts) or "no estimate") + f" ({profile})"
