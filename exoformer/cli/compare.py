"""`compare A B [C...]`: runs or variants side by side (exoformer/report/compare/side_by_side.py), each difference with
its 95% interval by diff's rules (exoformer/report/compare/intervals.py), their validation curves overlaid with
--curves (exoformer/report/compare/curves.py). Torch-free."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from exoformer.cli import options
from exoformer.errors import UserError

FORMATS = ("md", "csv")
FIGURE_SUFFIX = ".png"


def compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("operands", nargs="+", metavar="RUN",
                        help="a run: SPEC (read as `table` reads it, under --preset), SPEC@PRESET, "
                             "SPEC[@PRESET]+key=value,... (that --set variant) or a run directory path; 2 to 8")
    parser.add_argument("--format", default="md", choices=FORMATS,
                        help="md (header lines, then a markdown table with each difference's 95%% interval and its "
                             "rule; default) or csv (the table only, no intervals: --json has them)")
    parser.add_argument("--curves", nargs="?", const="", default=None, metavar="PATH",
                        help="also overlay the runs' validation-loss curves into PATH (.png, with a .pdf beside it; "
                             "default figures/compare-<runs>.png); put it after the runs or write --curves=PATH")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: each value, each difference to the first with its 95%% "
                             "interval's bounds, rule and method")
    from exoformer.limits import DEFAULT_ITEM_RESAMPLES, OPTION_BOUNDS

    low, high = OPTION_BOUNDS["--bootstrap"]  # diff's option, its bounds and default
    parser.add_argument("--bootstrap", default=str(DEFAULT_ITEM_RESAMPLES), metavar="N",
                        help=f"item resamples behind each difference's item-sampling interval, as diff's "
                             f"({low} to {high:,}; default {DEFAULT_ITEM_RESAMPLES})")
    options.add_registry(parser)
    options.add_preset(parser, reading=True)
    options.add_runs_dir(parser)


def _curves_path(args: argparse.Namespace, registry, runs) -> Path | None:
    from exoformer.report.compare.curves import default_path
    from exoformer.report.reading.outputs import check_apart
    from exoformer.report.tables.build import check_out_dir

    if args.curves is None:
        return None
    path = Path(args.curves) if args.curves else default_path(runs)
    check_out_dir(path.parent, option="--curves")
    roots = [options.runs_root(args), *(c.picked.path.parent.parent for c in runs)]
    check_apart(path.parent, runs_roots=roots, registries=[registry.directory], option="--curves")
    return path


def _check_curves_option(value: str | None) -> None:
    """A --curves value that is no .png path is most often a run that argparse took as PATH."""
    if value and not value.endswith(FIGURE_SUFFIX):
        raise UserError(f"{value!r} is not a {FIGURE_SUFFIX} path", where="--curves",
                        fix="name a .png file, or put --curves after the runs (or write --curves=PATH)")


def compare_verb(args: argparse.Namespace) -> int:
    from exoformer.report.compare.side_by_side import render, render_json
    from exoformer.report.compare.operands import check_count, parse_operand, read_operands
    from exoformer.report.reading.outputs import output_errors
    from exoformer.runs.run_index import one_view

    from exoformer.report.tables.verdicts import check_bootstrap

    _check_curves_option(args.curves)
    if args.json and args.format == "csv":
        raise UserError("prints one JSON object, not the CSV table of --format csv", where="--json",
                        fix="choose --json or --format csv")
    n_boot = check_bootstrap(args.bootstrap)
    check_count(args.operands)
    registry = options.registry(args)
    needs_root = any(parse_operand(text).path is None for text in args.operands)  # not every run is a path
    root = options.existing_runs_root(args) if needs_root else options.runs_root(args)
    flag = f" --runs-dir {args.runs_dir}" if args.runs_dir else ""
    with one_view():
        runs = read_operands(registry, root, list(args.operands), preset=args.preset, runs_dir_flag=flag)
        path = _curves_path(args, registry, runs)
        for note in dict.fromkeys(c.preset_note for c in runs if c.preset_note):
            print(note, file=sys.stderr, flush=True)
        print(render_json(runs, n_boot=n_boot) if args.json else render(runs, args.format, n_boot=n_boot), end="")
        if path is not None:
            from exoformer.report.compare.curves import draw_compare

            with output_errors(path.parent, option="--curves"):
                written = draw_compare(registry, runs, path)
            for out in written:
                print(f"wrote {out}", file=sys.stderr if args.format == "csv" or args.json else sys.stdout)
    return 0


VERBS = [
    options.Verb("compare", "runs or variants side by side: every table metric of each, its difference to the "
                 "first with a 95% interval, what differs between them; --curves overlays their validation loss",
                 compare_arguments, compare_verb),
]
