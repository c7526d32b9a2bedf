"""`status [TARGET]`: one row per run (state, progress, last loss, elapsed, job id, log), reconciled with the
scheduler; a job that died without a result is marked FAILED with the reason. Torch-free."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from exoformer.errors import UserError
from exoformer.harness import runs
from exoformer.harness.cli_common import add_registry_arg, add_resolve_args, load_registry, split_overrides
from exoformer.harness.status import collect, format_table

HELP = "progress of runs and their jobs (all runs under the runs root, or those of a TARGET)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", default=None, help="spec name, glob, table id or figure id")
    parser.add_argument("--watch", action="store_true", help="refresh until every run has ended (Ctrl-C stops)")
    parser.add_argument("--interval", type=float, default=5.0, help="--watch refresh period in seconds")
    parser.add_argument("--json", action="store_true", help="print one JSON object per run, one per line")
    parser.add_argument("--all-seeds", action="store_true", help="for a table: also the seed replicates")
    add_resolve_args(parser)
    add_registry_arg(parser)


def _targets(args: argparse.Namespace) -> tuple[list[tuple[Path, str | None, int | None]], dict[Path, Path]]:
    if args.target is None:
        root = runs.runs_root(args.runs_dir)
        dirs = runs.iter_run_dirs(root)
        return [(d, None, None) for d in dirs], {d: root for d in dirs}
    reg = load_registry(args)
    spec_sets, _ = split_overrides(args.overrides)
    out, roots = [], {}
    for name in reg.select(args.target, replicates=args.all_seeds):
        spec = reg.resolve(name, preset=args.preset, overrides=spec_sets)
        root = runs.runs_root(args.runs_dir, spec)
        d = runs.run_dir_for(spec, root)
        out.append((d, spec.name, spec.train.steps))
        roots[d] = root
    return out, roots


def run(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise UserError(f"--interval must be positive, got {args.interval}", where="--interval", fix="e.g. 5")
    dirs, roots = _targets(args)
    while True:
        rows = collect(dirs, roots)
        if args.json:
            for row in rows:
                print(json.dumps(row))
        else:
            if args.watch and sys.stdout.isatty():
                print("\033[2J\033[H", end="")
            print(format_table(rows), flush=True)
        active = [r for r in rows if r["state"] in runs.ACTIVE_STATES]
        if not args.watch or not active:
            break
        try:
            time.sleep(args.interval)
        except KeyboardInterrupt:
            break
        if not args.json:
            print()
    return 1 if any(r["state"] == runs.FAILED for r in rows) else 0
