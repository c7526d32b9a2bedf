"""`figure NAME`: draw a declared figure from the runs into PNG and PDF files."""

from __future__ import annotations

import argparse

from exoformer.report.cli_args import add_reading_args, reading_root

HELP = "draw a figure of the paper from the runs (PNG and PDF)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("figure", metavar="FIGURE", help="figure id (see `reproduce.py list`)")
    parser.add_argument("--out", default="figures", metavar="DIR", help="output directory (default figures/)")
    add_reading_args(parser)


def run(args: argparse.Namespace) -> int:
    from exoformer.harness.registry import Registry
    from exoformer.report.figures import draw

    written = draw(Registry(args.registry), args.figure, runs_root=reading_root(args), out_dir=args.out,
                   preset=args.preset)
    for path in written:
        print(f"wrote {path}")
    return 0
