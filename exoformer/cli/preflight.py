"""Verb `preflight`: whether each job of a target fits its GPU, time limit and ranks (exoformer.budget.preflight)."""

from __future__ import annotations

import argparse
import json
import sys

from exoformer.cli import options


def preflight_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="spec name, glob, table id or figure id")
    parser.add_argument("--profile", default=None,
                        help="cluster profile in slurm/profiles/ (default: the spec's, else the preset's)")
    parser.add_argument("--all-seeds", action="store_true", help="for a table: also the seed replicates")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options.add_resolve(parser)


def preflight_verb(args: argparse.Namespace) -> int:
    from exoformer.runs.plan import cost_profile_name, resolve_target, split_overrides
    from exoformer.budget.preflight import format_table, preflight
    from exoformer.registry.profiles import load_profile

    reg = options.registry(args)
    specs = resolve_target(reg, args.target, preset=args.preset, overrides=args.overrides, all_seeds=args.all_seeds)
    _, profile_sets = split_overrides(args.overrides)
    by_profile: dict[str, list] = {}
    for spec in specs:
        by_profile.setdefault(cost_profile_name(reg, spec, args.profile), []).append(spec)
    rows = []
    for name, group in by_profile.items():
        rows += preflight(group, load_profile(name, profile_sets))
    problems = [p for r in rows for p in r.problems]
    if args.json:
        print(json.dumps({"target": args.target, "specs": [r.to_dict() for r in rows], "ok": not problems}))
    else:
        print(format_table(rows))
        sources = sorted({r.memory.source for r in rows if r.memory})
        print(f"{len(rows)} spec(s), {sum(r.ok for r in rows)} fit on {'/'.join(by_profile)}; memory: "
              + "; ".join(sources))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 2 if problems else 0


VERBS = [
    options.Verb("preflight", "check that each job of a target fits its GPU memory, time limit and ranks before "
                 "submitting it (parameters, FLOPs/token, memory per GPU)", preflight_arguments, preflight_verb),
]
