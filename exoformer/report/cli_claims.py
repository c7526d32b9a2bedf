"""`claims`: the paper's mechanistic claims (experiments/claims.yaml) beside our measurements. Torch-free."""

from __future__ import annotations

import argparse

from exoformer.harness.cli_common import load_registry
from exoformer.report.claims import build_claims, render_markdown
from exoformer.report.cli_args import add_reading_args, reading_root
from exoformer.report.collect import collect

HELP = "the paper's mechanistic claims (attention sink, over-smoothing, appendix C) beside our measurements"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_reading_args(parser)


def run(args: argparse.Namespace) -> int:
    registry = load_registry(args)
    claims = build_claims(registry, collect(reading_root(args), preset=args.preset), preset=args.preset)
    print(render_markdown(claims, preset=args.preset), end="")
    return 0
