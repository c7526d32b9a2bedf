"""Verb `power`: the seeds per row each claimed difference needs for 80% power, and their GPU-hours, before paying.

`power TABLE`: the paper's differences of a table, with the seed spread measured in the runs we have (any preset:
report/tables/seed_plan.py) or given (`--seed-sd`), priced at the target preset on a profile (budget/cost.py through
`plan`). `power --effect LABEL=VALUE ... --seed-sd SD`: claims and spreads given on the command line. The rules
are in docs/replication.md.
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
    from exoformer.report.stats.power import PlannedClaim, plan_seeds

    if args.seed_sd is not None and not (math.isfinite(args.seed_sd) and args.seed_sd >= 0):
        raise UserError(f"must be a finite sd >= 0, got {args.seed_sd}", where="--seed-sd", fix="e.g. --seed-sd 0.8")
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


def _table_power(args: argparse.Namespace) -> int:
    from exoformer.registry.profiles import load_profile
    from exoformer.report.tables.seed_plan import measured_spreads, plan_claims, table_hours
    from exoformer.runs.plan import cost_profile_name, plan

    registry = options.registry(args)
    if args.table not in registry.tables:
        from exoformer.errors import did_you_mean

        raise UserError(f"unknown table {args.table!r}", where="TABLE", fix=did_you_mean(args.table, registry.tables))
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
    plans = plan_claims(spreads, hours_per_run=hours, seed_sd=args.seed_sd, alpha=args.alpha)
    total = table_hours(plans, hours)
    target = priced[0].spec.preset if priced else args.to
    if args.json:
        print(json.dumps({"table": args.table, "measured_preset": spreads[0].preset, "priced_preset": target,
                          "profile": profile, "gpu_hours_total": total,
                          "claims": [{"claim": f"{p.spread.claim.minuend} - {p.spread.claim.subtrahend}",
                                      "column": p.spread.claim.column, "paper": p.spread.claim.value,
                                      "seeds_measured": p.spread.seeds, "sd": p.sd, "sd_from": p.spread.how,
                                      "seeds_per_row": p.seeds_per_row, "gpu_hours": p.gpu_hours}
                                     for p in plans]}))
        return 0
    print(f"power {args.table}: seeds per row for 80% power at the paper's effect, two-sided t at "
          f"{args.alpha:g}/{len(plans)} (Holm's strictest level); spread measured on preset "
          f"{spreads[0].preset or 'of each spec'}" + (" (given --seed-sd)" if args.seed_sd is not None else "")
          + f", priced at {target} on {profile}")
    for p in plans:
        print(f"  {p.line()}")
        if args.seed_sd is None and p.sd is not None:
            print(f"      (sd from {p.spread.how})")
    print("table total: " + ("not known (a claim has no seed count)" if total is None else
                             f"{total:,.1f} GPU-hours, each row run to the largest count its claims need"))
    if spreads[0].preset and spreads[0].preset != target:
        print(f"note: the spread was measured on preset {spreads[0].preset}, not {target}: at another scale the seed "
              "spread differs; give --seed-sd from runs at the target scale when you have them")
    return 0


VERBS = [
    options.Verb("power", "seeds per row each claimed difference of a table needs for 80%% power, and their "
                 "GPU-hours, from the spread measured in our runs (or given)", power_arguments, power_verb),
]
