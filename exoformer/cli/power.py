"""Verb `power`: the seeds per row each claimed difference needs for 80% power at its effect, what would settle its
size, and their GPU-hours, before paying.

`power TABLE`: the paper's differences of a table, with the seed spread measured in the runs we have (any preset:
report/tables/seed_plan.py) or given per metric (`--seed-sd avg6=0.5 --seed-sd val_ppl=0.2`; a bare number when the
table's claims share one metric), priced at the target preset on a profile (budget/cost.py through `plan`). Where the
spread is not measured (one seed per row), the output names the command that measures it (`run TABLE --all-seeds`)
and its cost. `power --effect LABEL=VALUE ... --seed-sd SD --item-sd SD --items N`: claims and spreads given on the
command line (the item noise is never assumed: `--item-sd 0` says the seed sd already holds it). Both forms plan with
report/tables/seed_plan.py, which calls the verdict's own power (report/stats/replication.py); a spread measured at
another preset than the one priced gets no GPU-hours. The rules are in docs/replication.md.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
from typing import TYPE_CHECKING

from exoformer.cli import options
from exoformer.errors import UserError

if TYPE_CHECKING:
    from exoformer.registry.registry import Registry
    from exoformer.report.tables.seed_plan import ClaimSpread, PlannedClaim

GIVEN = "given by --seed-sd"


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
    parser.add_argument("--seed-sd", action="append", default=[], metavar="[METRIC=]SD",
                        help="sd over seeds of a row difference beyond item noise, in the metric's units. With TABLE: "
                             "one per metric (--seed-sd avg6=0.5 --seed-sd val_ppl=0.2; a bare number only when the "
                             "table's claims share one metric), replacing the measured spread of that metric's "
                             "claims. With --effect: one number")
    parser.add_argument("--item-sd", type=float, default=None,
                        help="with --effect (required): sd of one item's difference within a seed (0: the seed sd "
                             "already holds the item noise)")
    parser.add_argument("--items", type=int, default=None,
                        help="with --effect and a non-zero --item-sd (required): items a row's value averages")
    parser.add_argument("--hours-per-run", type=float, default=0.0,
                        help="GPU-hours of one run (`plan` prints them per spec); 0 prints no cost")
    parser.add_argument("--alpha", type=float, default=0.05, help="the family's test level (default 0.05)")
    parser.add_argument("--no-holm", action="store_true", help="plan each claim at alpha, not alpha / claims")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options.add_reading(parser)


def power_verb(args: argparse.Namespace) -> int:
    from exoformer.report.stats.power import MAX_HOURS_PER_RUN, MAX_ITEMS, MAX_MAGNITUDE, check_alpha
    from exoformer.report.tables.seed_plan import ClaimSpread, plan_claims

    bare_sd, metric_sds = options.seed_sds(args.seed_sd, high=MAX_MAGNITUDE, bare=True)
    if args.table is not None:
        if args.effect:
            raise UserError("give a TABLE or --effect, not both", where="--effect",
                            fix="leave --effect out to plan the table's own claims")
        given = [flag for flag, value, default in (("--item-sd", args.item_sd, None), ("--items", args.items, None),
                                                   ("--hours-per-run", args.hours_per_run, 0.0),
                                                   ("--no-holm", args.no_holm, False)) if value != default]
        if given:
            raise UserError(f"{given[0]} applies to --effect claims only; a TABLE's spread and prices are measured",
                            where=given[0], fix="leave it out (use --seed-sd, --to, --profile with a TABLE)")
        return _table_power(args, bare_sd, metric_sds)
    if not args.effect or (bare_sd is None and not metric_sds):
        raise UserError("nothing to plan", where="power",
                        fix="name a TABLE, or give --effect NAME=1.47 --seed-sd 0.8 --item-sd 0.3 --items 1000")
    if metric_sds:
        raise UserError(f"with --effect, --seed-sd is one number shared by the claims, got "
                        f"{next(iter(metric_sds))}=...", where="--seed-sd",
                        fix="--seed-sd 0.8 (plan claims of different metrics in separate commands)")
    seed_sd = bare_sd

    claims = [_effect(text) for text in args.effect]
    check_alpha(args.alpha)
    _bounded(args.hours_per_run, flag="--hours-per-run", high=MAX_HOURS_PER_RUN, example="12.5")
    if args.item_sd is not None:
        _bounded(args.item_sd, flag="--item-sd", high=MAX_MAGNITUDE, example="0.3")
    if args.items is not None and not 1 <= args.items <= MAX_ITEMS:
        raise UserError(f"must be an integer in [1, {MAX_ITEMS:,}], got {args.items!r}", where="--items",
                        fix="the items a row's value averages, e.g. --items 10042")
    if args.item_sd is None:
        raise UserError("the item noise is not given (it is never assumed 0)", where="--item-sd",
                        fix="give the sd of one item's difference within a seed and the items a row averages, e.g. "
                            "--item-sd 0.3 --items 10042, or --item-sd 0 when --seed-sd already holds the item noise")
    if args.item_sd > 0 and args.items is None:
        raise UserError(f"--item-sd {args.item_sd:g} needs the number of items a row's value averages (never "
                        "assumed 1)", where="--items", fix="e.g. --items 10042")
    items = args.items or 1
    sd = math.sqrt(seed_sd**2 + args.item_sd**2 / items)
    # the rows are not known here: each claim gets two rows of its own, so it is priced alone (no table total)
    spreads = [ClaimSpread(minuend=f"a{i}", subtrahend=f"b{i}", effect=value, sd=sd)
               for i, (_, value) in enumerate(claims)]
    plans, _ = plan_claims(spreads, hours_per_run={row: args.hours_per_run for s in spreads
                                                   for row in (s.minuend, s.subtrahend)},
                           alpha=args.alpha, holm=not args.no_holm)
    if args.json:
        print(json.dumps({"claims": [{"label": label, "effect": p.spread.effect, "seeds_per_row": p.seeds_per_row,
                                      "power_at": p.spread.effect, "size_seeds_per_row": p.size_seeds,
                                      "size_beyond_our_seeds": p.size_beyond, "gpu_hours": p.gpu_hours}
                                     for (label, _), p in zip(claims, plans, strict=True)]}, allow_nan=False))
        return 0
    for (label, _), p in zip(claims, plans, strict=True):
        print(_effect_line(label, p, cost=bool(args.hours_per_run)))
    level = args.alpha if args.no_holm else args.alpha / len(plans)
    noise = f"sqrt({seed_sd:g}^2 + {args.item_sd:g}^2 / {items})" if args.item_sd else f"{seed_sd:g} (--item-sd 0)"
    print(f"two-sided t test at {level:.3g} per claim; sd of one seed's difference {noise}, as given by --seed-sd "
          "and --item-sd (docs/replication.md)")
    return 0


def _size_words(p: PlannedClaim) -> str:
    """What would settle the claim's size (the verdict `replicates` rather than `size undetermined`)."""
    from exoformer.report.stats.power import TARGET_POWER
    from exoformer.report.stats.replication import MAX_SIZE_SEEDS, SIZE_FACTOR

    effect = p.spread.effect
    if effect == 0 or p.sd is None:
        return ""
    tell = f"tell {effect:+g} from 3x it ({SIZE_FACTOR * effect:+g})"
    if p.size_beyond:
        return (f"size: no count of our seeds would {tell}: the paper's single seed (sd about {p.sd:.3g}, as ours) "
                "is too noisy")
    if p.size_seeds is None and p.size_ceiling < TARGET_POWER:
        return (f"size: no seed count makes it 80% likely to {tell}: a spread from {p.spread.seeds} seeds leaves a "
                f"{1 - p.size_ceiling:.0%} chance that the paper's single seed is too noisy at any count (more seeds "
                "measure the spread)")
    if p.size_seeds is None:
        return f"size: more than {MAX_SIZE_SEEDS} seeds per row to {tell}"
    return f"size: {p.size_seeds} seeds per row {tell} 80% of the time, were ours the paper's"


def _effect_line(label: str, p: PlannedClaim, *, cost: bool) -> str:
    """"the +1.47 avg6 claim needs N seeds per row for 80% power at its effect (+1.47): X GPU-hours; size: ..."
    (without cost: no hours)."""
    from exoformer.report.stats.power import MAX_SEEDS

    effect = p.spread.effect
    if p.seeds_per_row is None:
        need = "no finite seed count (zero effect)" if effect == 0 else f"more than {MAX_SEEDS} seeds per row"
        return f"the {effect:+g} {label} claim needs {need} for 80% power"
    hours = f": {p.gpu_hours:.1f} GPU-hours" if cost else ""
    size = _size_words(p)
    return (f"the {effect:+g} {label} claim needs {p.seeds_per_row} seeds per row for 80% power at its effect "
            f"({effect:+g}){hours}" + (f"; {size}" if size else ""))


def _table_line(p: PlannedClaim) -> str:
    from exoformer.report.stats.power import MAX_SEEDS

    c = p.spread.claim
    head = f"{c.table}: {c.minuend} - {c.subtrahend}, {c.column} (paper {c.value:+g})"
    if p.sd is None:
        return f"{head}: {p.spread.how}"
    sd = f"sd {p.sd:.3g}" + (f" ({GIVEN})" if p.given else "")
    at = f"80% power at the paper's effect ({c.value:+g})"
    if p.seeds_per_row is None:
        return f"{head}: {sd}: more than {MAX_SEEDS} seeds per row for {at}"
    hours = "" if p.gpu_hours is None else f": {p.gpu_hours:,.1f} GPU-hours"
    size = _size_words(p)
    return f"{head}: {sd}, needs {p.seeds_per_row} seeds per row for {at}{hours}" + (f"; {size}" if size else "")


def _metrics(spreads: list[ClaimSpread]) -> list[str]:
    return list(dict.fromkeys(s.claim.column for s in spreads))


def _given_sds(table: str, metrics: list[str], bare: float | None, per_metric: dict[str, float]) -> dict[str, float]:
    """metric -> the sd given for it; one line when a bare number would serve metrics in different units, or a
    METRIC names none of the table's claims."""
    if bare is not None:
        if len(metrics) > 1:
            raise UserError(f"table {table}'s claims are in {len(metrics)} metrics ({', '.join(metrics)}), each needs "
                            "its own seed sd in its units", where="--seed-sd",
                            fix=" ".join(f"--seed-sd {m}=SD" for m in metrics))
        return {metrics[0]: bare} if metrics else {}
    unknown = [m for m in per_metric if m not in metrics]
    if unknown:
        raise UserError(f"table {table} has no claim in {unknown[0]!r}; its claims are in {', '.join(metrics)}",
                        where="--seed-sd", fix=" ".join(f"--seed-sd {m}=SD" for m in metrics))
    return dict(per_metric)


def _spread_words(plans: list[PlannedClaim], preset: str | None) -> str:
    """What the sd of each metric is: given, measured over N seeds on a preset, or not measured (never "measured"
    of a given or a missing spread)."""
    where = f"preset {preset}" if preset else "each spec's own preset"
    words = {}
    for metric in dict.fromkeys(p.spread.claim.column for p in plans):
        mine = [p for p in plans if p.spread.claim.column == metric]
        if all(p.given for p in mine):
            words[metric] = GIVEN
        elif all(p.sd is not None for p in mine):
            seeds = sorted({p.spread.seeds for p in mine if not p.given})
            count = str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
            words[metric] = f"measured over {count} seeds on {where}"
        else:
            words[metric] = f"not measured on {where} (fewer than two seeds per row)"
    if len(set(words.values())) == 1:
        return f"seed sd {next(iter(words.values()))}"
    return "seed sd " + ", ".join(f"of {metric} {text}" for metric, text in words.items())


def _measuring(registry: Registry, args: argparse.Namespace, root, preset: str | None) -> dict:
    """The command that measures the seed spread (`run TABLE --all-seeds`, with the --preset, --set and --runs-dir
    read) and what it would start, priced by the plan's cost model (nothing is written)."""
    from exoformer.runs.plan import plan, totals

    command = ["reproduce.py", "run", args.table, *(["--preset", preset] if preset else []), "--all-seeds"]
    for text in args.overrides:
        command += ["--set", text]
    if args.runs_dir is not None:
        command += ["--runs-dir", str(args.runs_dir)]
    planned = plan(registry, args.table, preset=preset, overrides=args.overrides, runs_root=root, all_seeds=True)
    total = totals(planned)
    profiles = sorted({p.profile for p in planned if p.launches})
    return {"command": shlex.join(command), "to_run": total["to_run"], "to_resume": total["to_resume"],
            "gpu_hours": total["gpu_hours"], "cpu_minutes": total["cpu_minutes"], "profiles": profiles}


def _measuring_line(m: dict, missing: list[str]) -> str:
    starts = [f"{m['to_run']} runs to add"] + ([f"{m['to_resume']} to resume"] if m["to_resume"] else [])
    cost = [f"{m['gpu_hours']:,.1f} GPU-hours"] if m["gpu_hours"] is not None else []
    cost += [f"{m['cpu_minutes']:,.1f} CPU-minutes"] if m["cpu_minutes"] is not None else []
    if m["to_run"] + m["to_resume"] == 0:
        price = "it has no run left to start: see `reproduce.py status` for the seeds that failed"
    else:
        price = ", ".join(starts) + ": " + (" + ".join(cost) or "no estimate") + f" on {'/'.join(m['profiles'])}"
    return (f"the seed spread of {', '.join(missing)} is not measured (fewer than two seeds per row): "
            f"`{m['command']}` measures it ({price}), then run this command again; or give it: "
            + " ".join(f"--seed-sd {metric}=SD" for metric in missing))


def _table_power(args: argparse.Namespace, bare_sd: float | None, metric_sds: dict[str, float]) -> int:
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
    given = _given_sds(args.table, _metrics(spreads), bare_sd, metric_sds)
    priced = plan(registry, args.table, preset=args.to, runs_root=root, profile=args.profile)
    rows = {row.specs[0]: row.id for row in registry.tables[args.table].rows}
    hours = {rows[p.spec.name]: p.cost.gpu_hours for p in priced if p.spec.name in rows}
    profile = cost_profile_name(registry, priced[0].spec, args.profile) if priced else args.profile
    load_profile(profile)  # a bad --profile is one line here too
    target = priced[0].spec.preset if priced else args.to
    plans, total = plan_claims(spreads, hours_per_run=hours, seed_sd=given, alpha=args.alpha, priced_preset=target)
    read_preset = spreads[0].preset
    unpriced = next((p.unpriced for p in plans if p.unpriced), "")
    missing = list(dict.fromkeys(p.spread.claim.column for p in plans if p.sd is None))
    measuring = _measuring(registry, args, root, read_preset) if missing else None
    measured = [p for p in plans if p.sd is not None and not p.given]
    if args.json:
        print(json.dumps({"table": args.table, "runs_preset": read_preset,
                          "measured_preset": read_preset if measured else None, "seed_sd_given": given,
                          "priced_preset": target, "profile": profile, "gpu_hours_total": total,
                          "unpriced": unpriced or None,
                          "seed_sd": _spread_words(plans, read_preset),
                          "measure_with": None if measuring is None else {**measuring, "metrics": missing},
                          "claims": [{"claim": f"{p.spread.minuend} - {p.spread.subtrahend}",
                                      "column": p.spread.claim.column, "paper": p.spread.effect,
                                      "seeds_measured": p.spread.seeds, "sd": p.sd,
                                      "sd_from": GIVEN if p.given else p.spread.how,
                                      "sd_df": None if p.given else p.spread.df,
                                      "seeds_per_row": p.seeds_per_row, "power_at": p.spread.effect,
                                      "size_seeds_per_row": p.size_seeds, "size_beyond_our_seeds": p.size_beyond,
                                      "gpu_hours": p.gpu_hours}
                                     for p in plans]}))
        return 0
    print(f"power {args.table}: seeds per row for 80% power at the paper's effect, two-sided t at "
          f"{args.alpha:g}/{len(plans)} (Holm's strictest level); {_spread_words(plans, read_preset)}"
          f", priced at {target} on {profile}")
    for p in plans:
        print(f"  {_table_line(p)}")
        if p in measured:
            print(f"      (sd from {p.spread.how}; planned over its uncertainty, so the seeds reach 80% for the "
                  "spreads those seeds allow)")
    if unpriced:
        at = next(p.spread.measured_at for p in plans if p.unpriced)
        print(f"table total: no GPU-hours: {unpriced}, and seed noise differs between scales; the seed counts "
              f"hold at {at}. Give --seed-sd METRIC=SD from runs at {target} to price them")
    else:
        print("table total: " + ("not known (a claim has no seed count)" if total is None else
                                 f"{total:,.1f} GPU-hours, each row run to the largest count its claims need"))
    if measuring is not None:
        print(_measuring_line(measuring, missing))
    return 0


VERBS = [
    options.Verb("power", "seeds per row each claimed difference of a table needs for 80% power, and their "
                 "GPU-hours, from the spread measured in our runs (or given)", power_arguments, power_verb),
]
