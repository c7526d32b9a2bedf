"""Verb `predict`: a loss law fitted to a ladder of runs, forecast at larger points with 95% intervals; from a CSV
(`--points`) or from a table's ladder of runs (`predict TABLE --from LADDER [--to PRESET]`, docs/forecast.md)."""

from __future__ import annotations

import argparse
import json
import sys

from exoformer.cli import options
from exoformer.errors import UserError

MAX_POINTS_AT = 1_000


def _count(value: float) -> str:
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if value >= size:
            return f"{value / size:g}{unit}"
    return f"{value:g}"


def predict_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", nargs="?", metavar="TABLE",
                        help="a table with a ladder (tables.yaml `ladders:`): forecast its cells from the ladder's "
                             "runs")
    parser.add_argument("--from", dest="ladder", metavar="LADDER", default=None,
                        help="with TABLE: the ladder group whose finished runs are fitted (e.g. smoke-ladder)")
    parser.add_argument("--to", metavar="PRESET", default=None,
                        help="with TABLE: the preset forecast (default 450m, the paper's scale)")
    parser.add_argument("--seeds", type=int, default=3, metavar="K",
                        help="with TABLE: seeds per row of the run whose verdicts are forecast (default 3)")
    parser.add_argument("--figure", metavar="PATH.png", default=None,
                        help="with TABLE: also draw loss against compute per row (laws, ladder, forecast) to PATH")
    parser.add_argument("--profile", default=None, help="with TABLE: the profile that prices a run at the target")
    parser.add_argument("--points", metavar="FILE.csv", default=None,
                        help="ladder runs as CSV with the header params,tokens,loss (optional column group: one law "
                             "per group); one row per point, at most 2,000 rows")
    parser.add_argument("--at", action="append", default=[], metavar="PARAMS:TOKENS",
                        help="with --points: where to forecast, e.g. --at 450M:10B (repeatable; params 1e3 to 1e15, "
                             "tokens 1e3 to 1e16)")
    parser.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                        help="bootstrap replicates of the fit (50 to 100,000; default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list of {params, tokens, loss, lo, hi, run_lo, run_hi, why[, group]}: "
                             "lo/hi the law's 95%% interval, run_lo/run_hi one run's, why (when no number) the "
                             "reason; with TABLE: one object")
    options.add_registry(parser)
    options.add_runs_dir(parser)


def predict_verb(args: argparse.Namespace) -> int:
    from exoformer.report.forecast.points import far_from_ladder, fit_groups, forecast, parse_at, printable, read_points

    table_only = [flag for flag, value in (("--from", args.ladder), ("--to", args.to), ("--figure", args.figure),
                                           ("--profile", args.profile), ("--seeds", args.seeds != 3 or None))
                  if value is not None]
    if args.table is not None and args.points is not None:
        raise UserError("give a TABLE or --points, not both", where="--points",
                        fix="predict TABLE --from LADDER, or predict --points FILE.csv --at PARAMS:TOKENS")
    if args.table is not None:
        if args.at:
            raise UserError("--at applies to --points only; a TABLE is forecast at a preset", where="--at",
                            fix="use --to PRESET (default 450m)")
        return _predict_table(args)
    if args.points is None:
        raise UserError("nothing to forecast", where="predict",
                        fix="predict TABLE --from LADDER, or predict --points FILE.csv --at PARAMS:TOKENS")
    if table_only:
        raise UserError(f"{table_only[0]} applies to a TABLE only", where=table_only[0],
                        fix="leave it out, or forecast a table: predict TABLE --from LADDER")
    if not args.at:
        raise UserError("no point to forecast", where="--at", fix="add e.g. --at 450M:10B")
    if len(args.at) > MAX_POINTS_AT:
        raise UserError(f"{len(args.at)} points", where="--at", fix=f"give at most {MAX_POINTS_AT}")
    at = [parse_at(text) for text in args.at]
    points = read_points(args.points)
    fits = fit_groups(points, bootstrap=args.bootstrap, seed=args.seed, where=args.points, forecasts=len(at))
    rows = forecast(fits, at)
    warnings = far_from_ladder(points, at)
    if args.json:
        print(json.dumps([row.to_json() for row in rows], indent=1, allow_nan=False))
        for line in warnings:
            print(line, file=sys.stderr)
        return 0
    for name, fit in fits.items():
        label = f"group {printable(name)}: " if name is not None else ""
        if fit.degenerate():
            print(f"{label}{fit.degenerate()}")
            continue
        print(f"{label}L(N, D) = {fit.formula()}  "
              f"(n={fit.n}, residual sd {fit.sigma:.3g}, {fit.dof} dof; out-of-sample misfit "
              f"{100 * fit.misfit:.2g}% per e-fold)")
    shown = [row for row in rows if row.loss is not None]
    if shown:
        print(f"{'GROUP':<12} {'PARAMS':>8} {'TOKENS':>8} {'LOSS':>8}  {'95% (LAW)':<19} 95% (ONE RUN)")
    for row in shown:
        print(f"{printable(row.group or '-'):<12} {_count(row.params):>8} {_count(row.tokens):>8} {row.loss:>8.4f}  "
              f"[{row.lo:.4f}, {row.hi:.4f}]  [{row.run_lo:.4f}, {row.run_hi:.4f}]")
    if shown:
        print("95% (law): the expected loss, t with n-k dof (k = 5 or 6 parameters) x the residual-bootstrap sd, or the ladder's own "
              "out-of-sample misfit x the distance outside it if wider; 95% (one run): plus the runs' spread about "
              "the law (docs/forecast.md)")
    for line in warnings:
        print(line)
    return 0


def _predict_table(args: argparse.Namespace) -> int:
    from exoformer.errors import did_you_mean
    from exoformer.registry.registry import DEFAULT_PRESET
    from exoformer.report.forecast.render import render_forecast, forecast_json

    registry = options.registry(args)
    options.check_table(registry, args.table)
    table = registry.tables[args.table]
    if args.ladder is None:
        raise UserError(f"no ladder named for table {args.table}", where="--from",
                        fix=f"add --from {table.ladders[0]}" if table.ladders else
                        "declare one: ladders: [GROUP] in experiments/tables.yaml")
    preset = args.to or DEFAULT_PRESET
    if preset not in registry.presets:
        raise UserError(f"unknown preset {preset!r}", where="--to", fix=did_you_mean(preset, registry.presets))
    if not 1 <= args.seeds <= 1000:
        raise UserError(f"--seeds {args.seeds} out of range", where="--seeds", fix="give 1 to 1000")
    if args.figure is not None and not args.figure.endswith(".png"):
        raise UserError(f"{args.figure!r} is not a .png path", where="--figure", fix="e.g. --figure ladder.png")
    root = options.existing_runs_root(args)
    from exoformer.report.forecast.table_forecast import forecast_table

    result = forecast_table(registry, root, args.table, args.ladder, preset=preset, bootstrap=args.bootstrap,
                            seed=args.seed, seeds=args.seeds)
    prices = _prices(registry, args.table, preset, root, args.profile)
    if args.json:
        print(json.dumps(forecast_json(result, prices), indent=1))
    else:
        print(render_forecast(result, prices))
    if args.figure is not None:
        from exoformer.report.forecast.figure import draw_forecast

        drawn = draw_forecast(result, args.figure, registry)
        print(f"figure: {args.figure}" if drawn else
              f"figure: not drawn: no row has a law the ladder supports (above); {args.figure} not written")
    return 0


def _prices(registry, table_id: str, preset: str, root, profile: str | None) -> dict[str, tuple[str, float]]:
    """Row id -> (unit, cost of one run at the target): GPU-hours on a GPU profile, CPU-minutes on a CPU one
    (budget/cost.py through `plan`)."""
    from exoformer.runs.plan import plan

    rows = {row.specs[0]: row.id for row in registry.tables[table_id].rows}
    out = {}
    for p in plan(registry, table_id, preset=preset, runs_root=root, profile=profile):
        if p.spec.name in rows:
            if p.cost.gpu_hours is not None:
                out[rows[p.spec.name]] = ("GPU-hours", p.cost.gpu_hours)
            elif p.cost.cpu_minutes is not None:
                out[rows[p.spec.name]] = ("CPU-minutes", p.cost.cpu_minutes)
    return out


VERBS = [
    options.Verb("predict", "fit a loss law L(N, D) = E + A/N^alpha + B/D^beta to ladder runs (a CSV, or a table's "
                 "ladder) and forecast larger points, or every cell of the table, with 95% intervals",
                 predict_arguments, predict_verb),
]
