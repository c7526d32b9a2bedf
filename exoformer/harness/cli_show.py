"""`show NAME`: the resolved spec as YAML, its hash, parameter count, run directory and status."""

from __future__ import annotations

import argparse
import json

import yaml

from exoformer.harness.cli_common import add_registry_arg, add_resolve_args, load_registry, run_dir, run_state

HELP = "print one resolved spec, its hash, parameter count, run directory and status"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="spec name")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_resolve_args(parser)
    add_registry_arg(parser)


def run(args: argparse.Namespace) -> int:
    reg = load_registry(args)
    spec = reg.resolve(args.name, preset=args.preset, overrides=args.overrides)
    directory = run_dir(spec, args.runs_dir)
    status, has_ckpt = run_state(directory)
    info = {"spec": spec.to_dict(), "hash": spec.hash, "hash12": spec.hash12,
            "parameters": spec.model.num_parameters(), "run_dir": str(directory),
            "status": status, "checkpoint": has_ckpt, "source": spec.source}
    if args.json:
        print(json.dumps(info))
        return 0
    print(yaml.safe_dump(spec.to_dict(), sort_keys=False, default_flow_style=None, width=120).rstrip())
    print(f"# declared at: {spec.source}")
    print(f"# parameters:  {info['parameters']:,} ({info['parameters'] / 1e6:.1f}M)")
    print(f"# run dir:     {directory}")
    print(f"# status:      {status or 'not run'}{' (checkpoint present)' if has_ckpt else ''}")
    return 0
