"""`table TABLE`: a table of the paper rebuilt from the runs, reproduced beside reported values."""

from __future__ import annotations

import argparse

from exoformer.report.cli_args import add_reading_args, reading_root

HELP = "rebuild a table of the paper from the runs, beside the reported values"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", metavar="TABLE", help="table id (see `reproduce.py list`)")
    parser.add_argument("--format", default="md", choices=("md", "latex", "csv"), help="output format (default md)")
    parser.add_argument("--out", default=None, metavar="DIR", help="write DIR/TABLE.{md,tex,csv} instead of stdout")
    add_reading_args(parser)


def run(args: argparse.Namespace) -> int:
    from exoformer.harness.registry import Registry
    from exoformer.report.collect import collect
    from exoformer.report.tables import build_table, render, write_table

    registry = Registry(args.registry)
    root = reading_root(args)
    frame = collect(root, preset=args.preset)
    built = build_table(registry, args.table, frame, preset=args.preset, runs_root=root)
    text = render(built, args.format)
    if args.out:
        print(f"wrote {write_table(text, args.table, args.format, args.out)}")
    else:
        print(text, end="")
    return 0
