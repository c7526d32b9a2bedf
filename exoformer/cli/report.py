"""Verbs that read runs: table, diff, figure, claims, report. Torch-free."""

from __future__ import annotations

import argparse
import sys

from exoformer.cli import options

TABLE_FORMATS = ("md", "latex", "csv", "long")


def _read(args: argparse.Namespace, specs_of, what: str, check=None):
    """(registry, existing runs root, long frame, preset read) of a reading verb: the runs of the preset the
    README's rule chooses (collect.choose_preset) for the specs `specs_of(registry)` names, checkpoints filed
    under their rows. `check(registry)` first: a wrong target is reported before a missing runs root."""
    from exoformer.report.collect import collect

    registry = options.registry(args)
    if check is not None:
        check(registry)
    root = options.existing_runs_root(args)
    specs = specs_of(registry)
    preset = reading_preset(registry, root, specs, args.preset, what=what)
    return registry, root, collect(root, preset=preset, specs=specs, registry=registry,
                                   overrides=args.overrides), preset


def reading_preset(registry, root, specs: list[str], preset: str | None, *, what: str) -> str | None:
    """The preset to read (README "Which runs the reading verbs read"); its one-line note goes to stderr."""
    from exoformer.report.collect import choose_preset

    chosen, note = choose_preset(registry, root, specs, preset, what=what)
    if note:
        print(note, file=sys.stderr, flush=True)
    return chosen


def _table_specs(table_id: str):
    return lambda registry: registry.tables[table_id].spec_names()


def _claim_specs(registry) -> list[str]:
    """The specs `claims` reads: every row of each table a claim or a paper difference names (a derived claim
    such as a tokens-to-loss ratio, or a row difference, needs rows the claim's own reads do not list)."""
    from exoformer.report.verdicts import paper_differences

    tables = [read.table for claim in registry.claims.values() for read in claim.reads]
    tables += [d.table for d in paper_differences(registry)]
    return list(dict.fromkeys(name for table in dict.fromkeys(tables) for name in registry.tables[table].spec_names()))


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
    registry, root, frame, preset = _read(args, _table_specs(args.table), f"table {args.table}",
                                          _table_check(args.table))
    built = build_table(registry, args.table, frame, preset=preset, runs_root=root, overrides=args.overrides)
    text = render(built, args.format)
    if args.out:
        from exoformer.report.outputs import output_errors

        with output_errors(args.out):
            print(f"wrote {write_table(text, args.table, args.format, args.out)}")
    else:
        print(text, end="")
    return 0


def _bootstrap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", default="1000", metavar="N",
                        help="replicates of the paired bootstrap behind the row-difference intervals (default 1000)")


def diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="TARGET", help="table id (see `reproduce.py list`)")
    _bootstrap_option(parser)
    options.add_reading(parser)


def diff_verb(args: argparse.Namespace) -> int:
    from exoformer.report.diff import diff_table, exit_code, render_diff
    from exoformer.report.tables import build_table
    from exoformer.report.verdicts import check_bootstrap, column_maxima, render_maxima, render_verdicts, table_verdicts

    n_boot = check_bootstrap(args.bootstrap)
    registry, root, frame, preset = _read(args, _table_specs(args.target), f"table {args.target}",
                                          _table_check(args.target))
    built = build_table(registry, args.target, frame, preset=preset, runs_root=root, overrides=args.overrides)
    result = diff_table(built)
    print(render_diff(result), end="")
    better = {m: registry.metrics[m].better for m in built.table.columns if m in registry.metrics}
    extra = [*render_maxima(built, column_maxima(registry).get(args.target, {}), better),
             *render_verdicts(table_verdicts(registry, frame, built, preset=preset, overrides=args.overrides,
                                             n_boot=n_boot))]
    if extra:
        print("\n" + "\n".join(extra))
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
    root = options.existing_runs_root(args)
    preset = reading_preset(registry, root, registry.figure_specs(registry.figures[args.figure]), args.preset,
                            what=f"figure {args.figure}")
    from exoformer.report.outputs import output_errors

    with output_errors(args.out):
        written = draw(registry, args.figure, runs_root=root, out_dir=args.out, preset=preset, overrides=args.overrides)
    for path in written:
        print(f"wrote {path}")
    return 0


def claims_arguments(parser: argparse.ArgumentParser) -> None:
    _bootstrap_option(parser)
    options.add_reading(parser)


def claims_verb(args: argparse.Namespace) -> int:
    from exoformer.registry.claims_schema import check_claims
    from exoformer.report.claims import build_claims, render_markdown
    from exoformer.report.verdicts import all_verdicts, check_bootstrap, render_verdicts

    n_boot = check_bootstrap(args.bootstrap)
    registry, root, frame, preset = _read(args, _claim_specs, "claims", check_claims)
    claims = build_claims(registry, frame, preset=preset, overrides=args.overrides)
    print(render_markdown(claims, preset=preset), end="")
    verdicts = all_verdicts(registry, frame, preset=preset, runs_root=str(root), overrides=args.overrides,
                            n_boot=n_boot)
    print("\n" + "\n".join(render_verdicts(verdicts)))
    return 0


def report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("targets", nargs="*", metavar="TARGET",
                        help="table or figure ids (default: every table and figure that has a run)")
    parser.add_argument("--out", default="report", metavar="DIR", help="output directory (default report/)")
    options.add_reading(parser)


def report_verb(args: argparse.Namespace) -> int:
    from exoformer.report.html import build_report

    from exoformer.report.outputs import output_errors

    with output_errors(args.out):
        index = build_report(options.registry(args), list(args.targets), runs_root=options.existing_runs_root(args),
                             out_dir=args.out, preset=args.preset, overrides=args.overrides)
    print(f"wrote {index}")
    return 0


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
    options.Verb("diff", "compare reproduced and reported values of a table (exit 1 when a cell is outside "
                 "tolerance or nothing could be compared)", diff_arguments, _one_view(diff_verb)),
    options.Verb("figure", "draw a figure of the paper from the runs (PNG and PDF)", figure_arguments,
                 _one_view(figure_verb)),
    options.Verb("claims", "the paper's mechanistic claims (attention sink, over-smoothing, appendix C) beside our "
                 "measurements", claims_arguments, _one_view(claims_verb)),
    options.Verb("report", "a static HTML report (tables, figures, run status) of the runs, for a browser",
                 report_arguments, _one_view(report_verb)),
]
