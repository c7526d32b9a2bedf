"""Verbs that read runs: table, diff, figure, claims, report. Torch-free."""

from __future__ import annotations

import argparse
import contextlib
import sys

from exoformer.cli import options

TABLE_FORMATS = ("md", "latex", "csv", "long")


def _composed(args: argparse.Namespace, check, **what):
    """(registry, report) of a reading verb: `check(registry)` first (a wrong target is reported before a missing
    runs root), then report.compose; its preset lines (README "Which runs the reading verbs read") go to stderr."""
    from exoformer.report.tables.compose import compose

    registry = options.registry(args)
    check(registry)
    report = compose(registry, options.existing_runs_root(args), preset=args.preset, overrides=args.overrides,
                     **what)
    for note in report.notes:
        print(note, file=sys.stderr, flush=True)
    return registry, report


def _table_check(table_id: str):
    return lambda registry: options.check_table(registry, table_id)


def table_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", metavar="TABLE", help="table id (see `reproduce.py list`)")
    parser.add_argument("--format", default="md", choices=TABLE_FORMATS,
                        help="md, latex, csv (the same table as md: one line per model) or long (one line per "
                             "cell and source); default md")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="write DIR/TABLE.{md,tex,csv,long.csv} instead of stdout")
    options.add_reading(parser)


def table_verb(args: argparse.Namespace) -> int:
    from exoformer.report.reading.outputs import check_apart
    from exoformer.report.tables.build import check_out_dir, render, write_table

    if args.out:
        check_out_dir(args.out)
        check_apart(args.out, runs_roots=[options.runs_root(args)], registries=[options.registry(args).directory])
    _, report = _composed(args, _table_check(args.table), tables=[args.table])
    built = report.tables[args.table].built
    text = render(built, args.format)
    if args.out:
        from exoformer.report.reading.outputs import output_errors

        with output_errors(args.out):  # named by the preset read, also when it fell back to one (smoke)
            path = write_table(text, args.table, args.format, args.out, preset=_read_preset(args, built.selection),
                               overrides=args.overrides)
            print(f"wrote {path}")
    else:
        print(text, end="")
    return 0


def _read_preset(args: argparse.Namespace, selection) -> str | None:
    """The preset a written file is named by: --preset, else the one the reading fell back to (None: the specs'
    own presets, the default reading, whose files keep plain names)."""
    return args.preset or (selection.preset if selection is not None else None)


def _bootstrap_option(parser: argparse.ArgumentParser) -> None:
    from exoformer.limits import DEFAULT_ITEM_RESAMPLES, OPTION_BOUNDS

    low, high = OPTION_BOUNDS["--bootstrap"]
    parser.add_argument("--bootstrap", default=str(DEFAULT_ITEM_RESAMPLES), metavar="N",
                        help=f"item resamples behind each claim's item-sampling figure ({low} to {high:,}; default "
                             f"{DEFAULT_ITEM_RESAMPLES})")


def diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="TARGET", help="table id (see `reproduce.py list`)")
    _bootstrap_option(parser)
    parser.add_argument("--seed-sd", action="append", default=[], metavar="METRIC=SD",
                        help="sd of one seed's value of a column, in its units, for one-seed cells (repeatable); "
                             "replaces the assumed prior (docs/replication.md)")
    options.add_reading(parser)


def diff_verb(args: argparse.Namespace) -> int:
    from exoformer.report.tables.diff import MAX_PRIOR_SD, diff_table, exit_code, render_diff
    from exoformer.report.tables.verdicts import check_bootstrap, column_maxima, render_maxima, render_verdicts, table_verdicts

    n_boot = check_bootstrap(args.bootstrap)
    registry, report = _composed(args, _table_check(args.target), tables=[args.target])
    built = report.tables[args.target].built
    _, given = options.seed_sds(args.seed_sd, high=MAX_PRIOR_SD, bare=False, columns=built.table.columns)
    result = diff_table(built, given)
    verdicts = render_verdicts(table_verdicts(registry, built, n_boot=n_boot))
    if verdicts:  # the paper's claimed differences lead: the point of the comparison, before its cells
        print("\n".join(verdicts) + "\n")
    print(render_diff(result), end="")
    better = {m: registry.metrics[m].better for m in built.table.columns if m in registry.metrics}
    maxima = render_maxima(built, column_maxima(registry).get(args.target, {}), better)
    if maxima:
        print("\n" + "\n".join(maxima))
    return exit_code(result)


def figure_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("figure", metavar="FIGURE", help="figure id (see `reproduce.py list`)")
    parser.add_argument("--out", default="figures", metavar="DIR",
                        help="output directory (default figures/); the files of a --preset or --set reading are "
                             "named by it (FIGURE.smoke.png), as `table --out` names its files")
    options.add_reading(parser)


def figure_verb(args: argparse.Namespace) -> int:
    from exoformer.report.figures.canvas import variant
    from exoformer.report.figures.draw import draw
    from exoformer.report.reading.outputs import check_apart, output_errors
    from exoformer.report.tables.build import check_out_dir, variant_suffix

    def check(registry) -> None:
        check_apart(args.out, runs_roots=[options.runs_root(args)], registries=[registry.directory])
        if args.figure not in registry.figures:
            from exoformer.errors import UserError, did_you_mean

            raise UserError(f"unknown figure {args.figure!r}", where="FIGURE",
                            fix=did_you_mean(args.figure, registry.figures))

    check_out_dir(args.out)
    registry, report = _composed(args, check, figures=[args.figure])
    selection = report.figures[args.figure]
    # a variant's files are named by it (--preset, --set), by the rule `table --out` names its files by
    with output_errors(args.out), variant(variant_suffix(_read_preset(args, selection), args.overrides)):
        written = draw(registry, args.figure, runs_root=selection.runs_root, out_dir=args.out,
                       preset=selection.preset, overrides=args.overrides, selection=selection)
    for path in written:
        print(f"wrote {path}")
    return 0


def claims_arguments(parser: argparse.ArgumentParser) -> None:
    _bootstrap_option(parser)
    options.add_reading(parser)


def claims_verb(args: argparse.Namespace) -> int:
    from exoformer.registry.claims_schema import check_claims
    from exoformer.report.tables.claims import render_markdown
    from exoformer.report.tables.verdicts import check_bootstrap, render_verdicts

    n_boot = check_bootstrap(args.bootstrap)
    _, report = _composed(args, check_claims, claims=True, n_boot=n_boot)
    verdicts = render_verdicts(report.verdicts, family=True)  # one Holm family over every claim printed, named
    if verdicts:  # the verdicts lead, as in `diff` and the HTML report
        print("\n".join(verdicts) + "\n")
    print(render_markdown(report.claims, preset=report.claims_selection.preset,
                          notes=report.claims_selection.notes()), end="")
    return 0


def report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("targets", nargs="*", metavar="TARGET",
                        help="table or figure ids (default: every table and figure that has a run)")
    parser.add_argument("--out", default="report", metavar="DIR", help="output directory (default report/)")
    options.add_reading(parser)


def report_verb(args: argparse.Namespace) -> int:
    from exoformer.report.pages.html import build_report
    from exoformer.report.reading.outputs import output_errors

    with phase_lines(), output_errors(args.out):
        index = build_report(options.registry(args), list(args.targets), runs_root=options.existing_runs_root(args),
                             out_dir=args.out, preset=args.preset, overrides=args.overrides)
    print(f"wrote {index}")
    return 0


@contextlib.contextmanager
def phase_lines(stream=None):
    """One short stderr line per phase of the report (`report: drawing 12 figures (3 s)`, with the seconds since
    the start), on a terminal and off one alike: a report of many figures takes minutes, and a pipe or a log
    should show it is working too. One line each, never a progress bar."""
    import logging
    import time

    from exoformer.report.pages.html import PHASES

    stream = stream or sys.stderr
    started = time.perf_counter()

    class _Line(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            stream.write(f"report: {record.getMessage()} ({time.perf_counter() - started:.0f} s)\n")
            stream.flush()

    handler, level = _Line(), PHASES.level
    PHASES.addHandler(handler)
    PHASES.setLevel(logging.INFO)
    try:
        yield
    finally:
        PHASES.removeHandler(handler)
        PHASES.setLevel(level)


def _one_view(verb):
    """The verb reads each spec directory of the runs root once (run_index.one_view)."""
    def run(args: argparse.Namespace) -> int:
        from exoformer.runs.run_index import one_view

        with one_view():
            return verb(args)

    return run


VERBS = [
    options.Verb("table", "rebuild a table of the paper from the runs, beside the reported values",
                 table_arguments, _one_view(table_verb)),
    options.Verb("diff", "compare reproduced and reported values of a table (exit 1 when a cell differs beyond "
                 "chance, Holm over the cells, or nothing could be compared)", diff_arguments, _one_view(diff_verb)),
    options.Verb("figure", "draw a figure of the paper from the runs (PNG and PDF)", figure_arguments,
                 _one_view(figure_verb)),
    options.Verb("claims", "the paper's mechanistic claims (attention sink, over-smoothing, appendix C) beside our "
                 "measurements", claims_arguments, _one_view(claims_verb)),
    options.Verb("report", "a static HTML report (tables, figures, run status) of the runs, for a browser",
                 report_arguments, _one_view(report_verb)),
]
