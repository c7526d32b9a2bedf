"""Verb `power`: the seeds per row each claimed difference needs for 80% power, and their GPU-hours, before paying.

The variances are given on the command line (`--seed-sd`, `--item-sd`, `--items`; measured from existing runs
by exoformer.report.power.variance_components); the rules are in docs/replication.md.
"""

from __future__ import annotations

import argparse
import json
import math

from exoformer.cli import options
from exoformer.errors import UserError


def _effect(text: str) -> tuple[str, float]:
    label, sep, value = text.rpartition("=")
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not sep or not label.strip() or not math.isfinite(number):
        raise UserError(f"expected LABEL=VALUE with a finite value, got {text!r}", where="--effect",
                        fix="--effect 'table1 avg6 dynamic - gated=1.47'")
    return label.strip(), number


def power_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--effect", action="append", default=[], metavar="LABEL=VALUE", required=True,
                        help="a claimed difference between two rows in the metric's units (repeatable; the claims "
                             "given together form one Holm family)")
    parser.add_argument("--seed-sd", type=float, required=True,
                        help="sd over seeds of a row difference beyond item noise (sqrt of variance_components' "
                             "seed_var)")
    parser.add_argument("--item-sd", type=float, default=0.0, help="sd of one item's difference within a seed")
    parser.add_argument("--items", type=int, default=1, help="items a row's value averages (default 1)")
    parser.add_argument("--hours-per-run", type=float, default=0.0,
                        help="GPU-hours of one run (`plan` prints them per spec); 0 prints no cost")
    parser.add_argument("--alpha", type=float, default=0.05, help="the family's test level (default 0.05)")
    parser.add_argument("--no-holm", action="store_true", help="plan each claim at alpha, not alpha / claims")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def power_verb(args: argparse.Namespace) -> int:
    from exoformer.report.power import PlannedClaim, plan_seeds

    claims = []  # the rows are not known here, so each claim is priced alone (no table total)
    for i, text in enumerate(args.effect):
        label, value = _effect(text)
        claims.append(PlannedClaim(label=label, minuend=f"a{i}", subtrahend=f"b{i}", effect=value))
    plans, _ = plan_seeds(claims, seed_sd=args.seed_sd, item_sd=args.item_sd, n_items=args.items,
                              hours_per_run=args.hours_per_run, alpha=args.alpha, holm=not args.no_holm)
    if args.json:
        print(json.dumps({"claims": [{"label": p.claim.label, "effect": p.claim.effect,
                                      "seeds_per_row": p.seeds_per_row, "gpu_hours": p.gpu_hours}
                                     for p in plans]}))
        return 0
    for p in plans:
        print(p.line(cost=bool(args.hours_per_run)))
    level = args.alpha if args.no_holm else args.alpha / len(plans)
    print(f"two-sided t test at {level:.3g} per claim; sd of one seed's difference "
          f"sqrt({args.seed_sd:g}^2 + {args.item_sd:g}^2 / {args.items}) (docs/replication.md)")
    return 0


VERBS = [
    options.Verb("power", "seeds per row each claimed difference needs for 80%% power, and their GPU-hours, from "
                 "given seed and item sds", power_arguments, power_verb),
]
