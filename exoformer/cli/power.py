"""Verb `power`: the seeds per row each claimed difference needs for 80% power, and their GPU-hours, before paying.

`power TABLE`: the paper's differences of a table, with the seed spread measured in the runs we have (any preset:
report/tables/seed_plan.py) or given (`--seed-sd`), priced at the target preset on a profile (budget/cost.py through
`plan`). `power --effect LABEL=VALUE ... --seed-sd SD`: claims and spreads given on the command line. Both forms
plan with report/tables/seed_plan.py; the rules are in docs/replication.md.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING

from exoformer.cli import options
from exoformer.errors import UserError

if TYPE_CHECKING:
    from exoformer.report.tables.seed_plan import PlannedClaim


def _effect(text: str) -> tuple[str, float]:
    from exoformer.report.stats.power import MAX_MAGNITUDE

    label, sep, value = text.rpartition("=")
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not sep or not label.strip() or not math.isfinite(number):
        raise UserError(f"expected LABEL=VALUE with a finite value, got {text!r}", where="--effect",
                        fix="--effect 'table1 avg6 dynamic - gated=1.47'")
    if abs(number) > MAX_MAGNITUDE:
        raise UserError(f"{value.strip()!r} is beyond +-{MAX_MAGNITUDE:,.0f}", where="--effect",
                        fix="give the difference in the metric's units, e.g. 1.47 accuracy points")
    return label.strip(), number


def _bounded(value: float, *, flag: str, high: float, example: str) -> None:
    """One line unless 0 <= value <= high (and finite): the squares and products of `power` stay finite."""
    if not (math.isfinite(value) and 0 <= value <= high):
        raise UserError(f"must be a finite number in [0, {high:,.0f}], got {value!r}", where=flag,
                        fix=f"e.g. {flag} {example}")


def power_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", nargs="?", metavar="TABLE",
                        help="a table id: plan its paper differences from the runs we have (see `list`)")
    parser.add_argument("--to", metavar="PRESET", default=None,
                        help="with TABLE: price the runs at this preset (default: each spec's own, e.g. 450m)")
    parser.add_argument("--profile", default=None, help="with TABLE: the cluster profile that prices a run")
    parser.add_argument("--effect", action="append", default=[], metavar="LABEL=VALUE",
                        help="without TABLE: a claimed difference between two rows in the metric's units "
                             "(repeatable; the claims given together form one Holm family)")
    parser.add_argument("--seed-sd", type=float, default=None,
                        help="sd over seeds of a row difference beyond item noise (with TABLE: replaces the "
                             "measured spread of every claim)")
    parser.add_argument("--item-sd", type=float, default=0.0, help="sd of one item's difference within a seed")
    parser.add_argument("--items", type=int, default=1, help="items a row's value averages (default 1)")
    parser.add_argument("--hours-per-run", type=float, default=0.0,
                        help="GPU-hours of one run (`plan` prints them per spec); 0 prints no cost")
    parser.add_argument("--alpha", type=float, default=0.05, help="the family's test level (default 0.05)")
    parser.add_argument("--no-holm", action="store_true", help="plan each claim at alpha, not alpha / claims")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options.add_reading(parser)


def power_verb(args: argparse.Namespace) -> int:
    from exoformer.report.stats.power import MAX_HOURS_PER_RUN, MAX_ITEMS, MAX_MAGNITUDE, check_alpha
    from exoformer.report.tables.seed_plan import ClaimSpread, plan_claims

    if args.seed_sd is not None:
        _bounded(args.seed_sd, flag="--seed-sd", high=MAX_MAGNITUDE, example="0.8")
    if args.table is not None:
        if args.effect:
            raise UserError("give a TABLE or --effect, not both", where="--effect",
                            fix="leave --effect out to plan the table's own claims")
        given = [flag for flag, value, default in (("--item-sd", args.item_sd, 0.0), ("--items", args.items, 1),
                                                   ("--hours-per-run", args.hours_per_run, 0.0),
                                                   ("--no-holm", args.no_holm, False)) if value != default]
        if given:
            raise UserError(f"{given[0]} applies to --effect claims only; a TABLE's spread and prices are measured",
                            where=given[0], fix="leave it out (use --seed-sd, --to, --profile with a TABLE)")
        return _table_power(args)
    if not args.effect or args.seed_sd is None:
        raise UserError("nothing to plan", where="power",
                        fix="name a TABLE, or give --effect NAME=1.47 and --seed-sd 0.8")

    claims = [_effect(text) for text in args.effect]
    check_alpha(args.alpha)
    _bounded(args.hours_per_run, flag="--hours-per-run", high=MAX_HOURS_PER_RUN, example="12.5")
    _bounded(args.item_sd, flag="--item-sd", high=MAX_MAGNITUDE, example="0.3")
    if not 1 <= args.items <= MAX_ITEMS:
        raise UserError(f"must be an integer in [1, {MAX_ITEMS:,}], got {args.items!r}", where="--items",
                        fix="the items a row's value averages, e.g. --items 10042")
    sd = math.sqrt(args.seed_sd**2 + args.item_sd**2 / args.items)
    # the rows are not known here: each claim gets two rows of its own, so it is priced alone (no table total)
    spreads = [ClaimSpread(minuend=f"a{i}", subtrahend=f"b{i}", effect=value, sd=sd)
               for i, (_, value) in enumerate(claims)]
    plans, _ = plan_claims(spreads, hours_per_run={row: args.hours_per_run for s in spreads
                                                   for row in (s.minuend, s.subtrahend)},
                           alpha=args.alpha, holm=not args.no_holm)
    if args.json:
        print(json.dumps({"claims": [{"label": label, "effect": p.spread.effect, "seeds_per_row": p.seeds_per_row,
                                      "gpu_hours": p.gpu_hours} for (label, _), p in zip(claims, plans, strict=True)]},
                         allow_nan=False))
        return 0
    for (label, _), p in zip(claims, plans, strict=True):
        print(_effect_line(label, p, cost=bool(args.hours_per_run)))
    level = args.alpha if args.no_holm else args.alpha / len(plans)
    print(f"two-sided t test at {level:.3g} per claim; sd of one seed's difference "
          f"sqrt({args.seed_sd:g}^2 + {args.item_sd:g}^2 / {args.items}) (docs/replication.md)")
    return 0


def _effect_line(label: str, p: PlannedClaim, *, cost: bool) -> str:
    """"the +1.47 avg6 claim needs N seeds per row for 80% power: X GPU-hours" (without cost: no hours)."""
    from exoformer.report.stats.power import MAX_SEEDS

    effect = p.spread.effect
    if p.seeds_per_row is None:
        need = "no finite seed count (zero effect)" if effect == 0 else f"more than {MAX_SEEDS} seeds per row"
        return f"the {effect:+g} {label} claim needs {need} for 80% power"
    hours = f": {p.gpu_hours:.1f} GPU-hours" if cost else ""
    return f"the {effect:+g} {label} claim needs {p.seeds_per_row} seeds per row for 80% power{hours}"


def _table_line(p: PlannedClaim) -> str:
    from exoformer.report.stats.power import MAX_SEEDS

    c = p.spread.claim
    head = f"{c.table}: {c.minuend} - {c.subtrahend}, {c.column} (paper {c.value:+g})"
    if p.sd is None:
        return f"{head}: {p.spread.how}; give --seed-sd (the sd of one seed's difference) to plan it"
    if p.seeds_per_row is None:
        return f"{head}: sd {p.sd:.3g}: more than {MAX_SEEDS} seeds per row for 80% power"
    hours = "" if p.gpu_hours is None else f": {p.gpu_hours:,.1f} GPU-hours"
    return f"{head}: sd {p.sd:.3g}, needs {p.seeds_per_row} seeds per row for 80% power{hours}"


def _table_power(args: argparse.Namespace) -> int:
    from exoformer.registry.profiles import load_profile
    from exoformer.report.tables.seed_plan import measured_spreads, plan_claims
    from exoformer.runs.plan import cost_profile_name, plan

    registry = options.registry(args)
    options.check_table(registry, args.table)
    root = options.existing_runs_root(args)
    spreads = measured_spreads(registry, root, args.table, preset=args.preset, overrides=args.overrides)
    if not spreads:
        raise UserError(f"table {args.table} has no paper difference to plan (experiments/claims.yaml)",
                        where="TABLE", fix="name a table whose rows the paper compares, e.g. table1")
    priced = plan(registry, args.table, preset=args.to, runs_root=root, profile=args.profile)
    rows = {row.specs[0]: row.id for row in registry.tables[args.table].rows}
    hours = {rows[p.spec.name]: p.cost.gpu_hours for p in priced if p.spec.name in rows}
    profile = cost_profile_name(registry, priced[0].spec, args.profile) if priced else args.profile
    load_profile(profile)  # a bad --profile is one line here too
    plans, total = plan_claims(spreads, hours_per_run=hours, seed_sd=args.seed_sd, alpha=args.alpha)
    target = priced[0].spec.preset if priced else args.to
    if args.json:
        print(json.dumps({"table": args.table, "measured_preset": spreads[0].preset, "priced_preset": target,
                          "profile": profile, "gpu_hours_total": total,
                          "claims": [{"claim": f"{p.spread.minuend} - {p.spread.subtrahend}",
                                      "column": p.spread.claim.column, "paper": p.spread.effect,
                                      "seeds_measured": p.spread.seeds, "sd": p.sd, "sd_from": p.spread.how,
                                      "seeds_per_row": p.seeds_per_row, "gpu_hours": p.gpu_hours}
                                     for p in plans]}))
        return 0
    print(f"power {args.table}: seeds per row for 80% power at the paper's effect, two-sided t at "
          f"{args.alpha:g}/{len(plans)} (Holm's strictest level); spread measured on preset "
          f"{spreads[0].preset or 'of each spec'}" + (" (given --seed-sd)" if args.seed_sd is not None else "")
          + f", priced at {target} on {profile}")
    for p in plans:
        print(f"  {_table_line(p)}")
        if args.seed_sd is None and p.sd is not None:
            print(f"      (sd from {p.spread.how})")
    print("table total: " + ("not known (a claim has no seed count)" if total is None else
                             f"{total:,.1f} GPU-hours, each row run to the largest count its claims need"))
    if spreads[0].preset and spreads[0].preset != target:
        print(f"note: the spread was measured on preset {spreads[0].preset}, not {target}: at another scale the seed "
              "spread differs; give --seed-sd from runs at the target scale when you have them")
    return 0


VERBS = [
    options.Verb("power", "seeds per row each claimed difference of a table needs for 80% power, and their "
                 "GPU-hours, from the spread measured in our runs (or given)", power_arguments, power_verb),
]
