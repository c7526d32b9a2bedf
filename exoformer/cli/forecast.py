"""Verb `predict`: a loss law fitted to a ladder of runs, forecast at larger points with 95% intervals."""

from __future__ import annotations

import argparse
import json

from exoformer.cli import options
from exoformer.errors import UserError

MAX_POINTS_AT = 1_000


def _count(value: float) -> str:
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if value >= size:
            return f"{value / size:g}{unit}"
    return f"{value:g}"


def predict_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--points", metavar="FILE.csv", required=True,
                        help="ladder runs as CSV with the header params,tokens,loss (optional column group: one law "
                             "per group)")
    parser.add_argument("--at", action="append", default=[], metavar="PARAMS:TOKENS",
                        help="where to forecast, e.g. --at 450M:10B (repeatable)")
    parser.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                        help="bootstrap replicates of the fit (50 to 100,000; default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list of {params, tokens, loss, lo, hi[, group]}")


def predict_verb(args: argparse.Namespace) -> int:
    from exoformer.report.ladder_points import fit_groups, forecast, parse_at, read_points

    if not args.at:
        raise UserError("no point to forecast", where="--at", fix="add e.g. --at 450M:10B")
    if len(args.at) > MAX_POINTS_AT:
        raise UserError(f"{len(args.at)} points", where="--at", fix=f"give at most {MAX_POINTS_AT}")
    at = [parse_at(text) for text in args.at]
    fits = fit_groups(read_points(args.points), bootstrap=args.bootstrap, seed=args.seed, where=args.points)
    rows = forecast(fits, at)
    if args.json:
        print(json.dumps([row.to_json() for row in rows], indent=1))
        return 0
    for name, fit in fits.items():
        label = f"group {name}: " if name is not None else ""
        print(f"{label}L(N, D) = {fit.E:.4g} + {fit.A:.4g}/N^{fit.alpha:.3f} + {fit.B:.4g}/D^{fit.beta:.3f}  "
              f"(n={fit.n}, residual sd {fit.sigma:.3g}, {fit.dof} dof)")
    print(f"{'GROUP':<12} {'PARAMS':>8} {'TOKENS':>8} {'LOSS':>8}  {'95% (LAW)':<19} 95% (ONE RUN)")
    for row in rows:
        print(f"{row.group or '-':<12} {_count(row.params):>8} {_count(row.tokens):>8} {row.loss:>8.4f}  "
              f"[{row.lo:.4f}, {row.hi:.4f}]  [{row.run_lo:.4f}, {row.run_hi:.4f}]")
    print("95% (law): the expected loss, t with n-5 dof x the residual-bootstrap sd; 95% (one run): plus the runs' "
          "spread about the law (docs/forecast.md)")
    return 0


VERBS = [
    options.Verb("predict", "fit a loss law L(N, D) = E + A/N^alpha + B/D^beta to ladder runs and forecast larger "
                 "points with 95% intervals", predict_arguments, predict_verb),
]
