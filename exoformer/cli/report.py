"""Verbs that read runs: table, diff, figure, claims, report. Torch-free."""

from __future__ import annotations

import argparse

from exoformer.cli import options

TABLE_FORMATS = ("md", "latex", "csv", "long")


def _read(args: argparse.Namespace, check=None):
    """(registry, existing runs root, long frame) of a reading verb: the runs of --preset, checkpoints filed
    under their rows. `check(registry)` first: a wrong target is reported before a missing runs root."""
    from exoformer.report.collect import collect

    registry = options.registry(args)
    if check is not None:
        check(registry)
    root = options.existing_runs_root(args)
    return registry, root, collect(root, preset=args.preset, registry=registry)


def _table_check(table_id: str):
    def check(registry) -> None:
        from exoformer.errors import UserError, did_you_mean

        if table_id not in registry.tables:
            raise UserError(f"unknown table {table_id!r}", where="TABLE", fix=did_you_mean(table_id, registry.tables))

    return check


def table_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", metavar="TABLE", help="table id (see `reproduce.py list`)")
    parser.add_argument("--format", default="md", choices=TABLE_FORMATS,
                        help="md, latex, csv (the same table as md: one line per model) or long (one line per "
                             "cell and source); default md")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="write DIR/TABLE.{md,tex,csv,long.csv} instead of stdout")
    options.add_reading(parser)


def table_verb(args: argparse.Namespace) -> int:
    from exoformer.report.outputs import check_apart
    from exoformer.report.tables import build_table, check_out_dir, render, write_table

    if args.out:
        check_out_dir(args.out)
        check_apart(args.out, runs_roots=[options.runs_root(args)], registries=[options.registry(args).directory])
    registry, root, frame = _read(args, _table_check(args.table))
    built = build_table(registry, args.table, frame, preset=args.preset, runs_root=root, overrides=args.overrides)
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
    from exoformer.report.diff import diff_table, exit_code, render_diff
    from exoformer.report.tables import build_table

    registry, root, frame = _read(args, _table_check(args.target))
    built = build_table(registry, args.target, frame, preset=args.preset, runs_root=root, overrides=args.overrides)
    result = diff_table(built)
    print(render_diff(result), end="")
    return exit_code(result)


def figure_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("figure", metavar="FIGURE", help="figure id (see `reproduce.py list`)")
    parser.add_argument("--out", default="figures", metavar="DIR", help="output directory (default figures/)")
    options.add_reading(parser)


def figure_verb(args: argparse.Namespace) -> int:
    from exoformer.report.figures import draw
    from exoformer.report.outputs import check_apart
    from exoformer.report.tables import check_out_dir

    check_out_dir(args.out)
    registry = options.registry(args)
    check_apart(args.out, runs_roots=[options.runs_root(args)], registries=[registry.directory])
    if args.figure not in registry.figures:
        from exoformer.errors import UserError, did_you_mean

        raise UserError(f"unknown figure {args.figure!r}", where="FIGURE", fix=did_you_mean(args.figure,
                                                                                             registry.figures))
    for path in draw(registry, args.figure, runs_root=options.existing_runs_root(args),
                     out_dir=args.out, preset=args.preset, overrides=args.overrides):
        print(f"wrote {path}")
    return 0


def claims_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_reading(parser)


def claims_verb(args: argparse.Namespace) -> int:
    from exoformer.harness.claims_schema import check_claims
    from exoformer.report.claims import build_claims, render_markdown

    registry, _, frame = _read(args, check_claims)
    claims = build_claims(registry, frame, preset=args.preset, overrides=args.overrides)
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
                 "tolerance or nothing could be compared)", diff_arguments, diff_verb),
    options.Verb("figure", "draw a figure of the paper from the runs (PNG and PDF)", figure_arguments, figure_verb),
    options.Verb("claims", "the paper's mechanistic claims (attention sink, over-smoothing, appendix C) beside our "
                 "measurements", claims_arguments, claims_verb),
    options.Verb("report", "a static HTML report (tables, figures, run status) of the runs, for a browser",
                 report_arguments, report_verb),
]
