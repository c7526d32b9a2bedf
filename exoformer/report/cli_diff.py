"""`diff TABLE`: reproduced vs reported per cell with tolerances; exit 1 when a cell is outside."""

from __future__ import annotations

import argparse

from exoformer.report.cli_args import add_reading_args, reading_root

HELP = "compare reproduced and reported values of a table (exit 1 when a cell is outside tolerance)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="TARGET", help="table id (see `reproduce.py list`)")
    add_reading_args(parser)


def run(args: argparse.Namespace) -> int:
    from exoformer.harness.registry import Registry
    from exoformer.report.collect import collect
    from exoformer.report.diff import diff_table, exit_code, render_diff
    from exoformer.report.tables import build_table

    registry = Registry(args.registry)
    root = reading_root(args)
    built = build_table(registry, args.target, collect(root, preset=args.preset), preset=args.preset,
                        runs_root=root)
    result = diff_table(built)
    print(render_diff(result), end="")
    return exit_code(result)
