"""Verbs that read runs: table, diff, figure, claims, report. Torch-free."""

from __future__ import annotations

import argparse

from exoformer.cli import options


def table_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", metavar="TABLE", help="table id (see `reproduce.py list`)")
    parser.add_argument("--format", default="md", choices=("md", "latex", "csv"), help="output format (default md)")
    parser.add_argument("--out", default=None, metavar="DIR", help="write DIR/TABLE.{md,tex,csv} instead of stdout")
    options.add_reading(parser)


def table_verb(args: argparse.Namespace) -> int:
    from exoformer.report.collect import collect
    from exoformer.report.tables import build_table, render, write_table

    registry, root = options.registry(args), options.runs_root(args)
    built = build_table(registry, args.table, collect(root, preset=args.preset), preset=args.preset, runs_root=root)
    text = render(built, args.format)
    if args.out:
        print(f"wrote {write_table(text, args.table, args.format, args.out)}")
    else:
        print(text, end="")
    return 0


def diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="TARGET", help="table id (see `reproduce.py list`)")
    options.add_reading(parser)


def diff_verb(args: argparse.Namespace) -> int:
    from exoformer.report.collect import collect
    from exoformer.report.diff import diff_table, exit_code, render_diff
    from exoformer.report.tables import build_table

    registry, root = options.registry(args), options.runs_root(args)
    built = build_table(registry, args.target, collect(root, preset=args.preset), preset=args.preset, runs_root=root)
    result = diff_table(built)
    print(render_diff(result), end="")
    return exit_code(result)


def figure_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("figure", metavar="FIGURE", help="figure id (see `reproduce.py list`)")
    parser.add_argument("--out", default="figures", metavar="DIR", help="output directory (default figures/)")
    options.add_reading(parser)


def figure_verb(args: argparse.Namespace) -> int:
    from exoformer.report.figures import draw

    for path in draw(options.registry(args), args.figure, runs_root=options.runs_root(args), out_dir=args.out,
                     preset=args.preset):
        print(f"wrote {path}")
    return 0


def claims_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_reading(parser)


def claims_verb(args: argparse.Namespace) -> int:
    from exoformer.report.claims import build_claims, render_markdown
    from exoformer.report.collect import collect

    claims = build_claims(options.registry(args), collect(options.runs_root(args), preset=args.preset),
                          preset=args.preset)
    print(render_markdown(claims, preset=args.preset), end="")
    return 0


def report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("targets", nargs="*", metavar="TARGET",
                        help="table or figure ids (default: every table and figure that has a run)")
    parser.add_argument("--out", default="report", metavar="DIR", help="output directory (default report/)")
    options.add_reading(parser)


def report_verb(args: argparse.Namespace) -> int:
    from exoformer.report.html import build_report

    index = build_report(options.registry(args), list(args.targets), runs_root=options.runs_root(args),
                         out_dir=args.out, preset=args.preset)
    print(f"wrote {index}")
    return 0


VERBS = [
    options.Verb("table", "rebuild a table of the paper from the runs, beside the reported values",
                 table_arguments, table_verb),
    options.Verb("diff", "compare reproduced and reported values of a table (exit 1 when a cell is outside "
                 "tolerance)", diff_arguments, diff_verb),
    options.Verb("figure", "draw a figure of the paper from the runs (PNG and PDF)", figure_arguments, figure_verb),
    options.Verb("claims", "the paper's mechanistic claims (attention sink, over-smoothing, appendix C) beside our "
                 "measurements", claims_arguments, claims_verb),
    options.Verb("report", "a static HTML report (tables, figures, run status) of the runs, for a browser",
                 report_arguments, report_verb),
]
