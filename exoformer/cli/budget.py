"""Verb `budget`: what a fixed budget of GPU-hours can decide, claim by claim, and a declared sequential design.

`budget TABLE --gpu-hours H` (or `--money M --price P`): the seeds per row that maximise the expected number of
the table's claims decided at the paper's effect (report/stats/budget_allocation.py). The spread is the one
`power TABLE` reads (measured, or `--seed-sd`); a run's cost is `plan`'s at the target preset (`--to`) on a
profile. It prints per claim its seeds, power and cost, the claims the budget cannot decide and what they would
need, and the same at half and twice the budget.
`--looks K` writes the design (report/stats/sequential.py) into `<runs root>/designs/TABLE.yaml`, refused once any
run of the table has results. `--next`: each claim's verdict at the current look, the seeds of the next look for
the claims still open, and the budget left. Rules: docs/replication.md "Spending a fixed budget".
"""

from __future__ import annotations

import argparse
import json
import math
import shlex

from exoformer.cli import options
from exoformer.cli.power import _given_sds, _metrics
from exoformer.errors import UserError


def budget_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", metavar="TABLE", help="a table id with paper differences (see `list`)")
    parser.add_argument("--gpu-hours", type=float, default=None, help="the budget in GPU-hours")
    parser.add_argument("--money", type=float, default=None,
                        help="the budget in money, with --price (no price is built in)")
    parser.add_argument("--price", type=float, default=None, help="with --money: the price of one GPU-hour")
    parser.add_argument("--to", metavar="PRESET", default=None,
                        help="price the runs at this preset (default: each spec's own, e.g. 450m)")
    parser.add_argument("--profile", default=None, help="the cluster profile that prices a run")
    parser.add_argument("--seed-sd", action="append", default=[], metavar="[METRIC=]SD",
                        help="sd of one seed's paired difference per metric (as `power`), replacing the measured one")
    parser.add_argument("--looks", type=int, default=None,
                        help="write a sequential design with K looks into the runs root (before any result)")
    parser.add_argument("--spending", choices=("obrien-fleming", "pocock"), default="obrien-fleming",
                        help="the alpha-spending function of --looks (default obrien-fleming)")
    parser.add_argument("--next", action="store_true",
                        help="the declared design's verdicts now and the seeds of the next look")
    parser.add_argument("--alpha", type=float, default=0.05, help="the family's test level (default 0.05)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options.add_reading(parser)


def _claims(args: argparse.Namespace, registry, root):
    """The table's claims with the sd each is planned with, and the GPU-hours of one run of each row."""
    from exoformer.registry.profiles import load_profile
    from exoformer.report.stats.budget_allocation import BudgetClaim
    from exoformer.report.stats.power import MAX_MAGNITUDE
    from exoformer.report.tables.seed_plan import measured_spreads
    from exoformer.runs.plan import cost_profile_name, plan

    spreads = measured_spreads(registry, root, args.table, preset=args.preset, overrides=args.overrides)
    if not spreads:
        raise UserError(f"table {args.table} has no paper difference to plan (experiments/claims.yaml)",
                        where="TABLE", fix="name a table whose rows the paper compares, e.g. table1")
    bare, per_metric = options.seed_sds(args.seed_sd, high=MAX_MAGNITUDE, bare=True)
    given = _given_sds(args.table, _metrics(spreads), bare, per_metric)
    missing = [s.claim.column for s in spreads if s.sd is None and s.claim.column not in given]
    if missing:
        metrics = list(dict.fromkeys(missing))
        raise UserError(f"the seed spread of {', '.join(metrics)} is not measured (fewer than two seeds per row)",
                        where="--seed-sd", fix=f"`reproduce.py run {args.table} --all-seeds` measures it, or give "
                        + " ".join(f"--seed-sd {m}=SD" for m in metrics))
    claims = [BudgetClaim(label=f"{s.minuend} - {s.subtrahend}, {s.claim.column}", minuend=s.minuend,
                          subtrahend=s.subtrahend, effect=s.effect, margin=s.claim.margin,
                          sd=given.get(s.claim.column, s.sd),
                          sd_df=math.inf if s.claim.column in given or s.df is None else s.df) for s in spreads]
    how = {s.claim.column: ("given by --seed-sd" if s.claim.column in given else s.how) for s in spreads}
    priced = plan(registry, args.table, preset=args.to, runs_root=root, profile=args.profile)
    rows = {row.specs[0]: row.id for row in registry.tables[args.table].rows}
    hours = {rows[p.spec.name]: p.cost.gpu_hours for p in priced if p.spec.name in rows}
    profile = cost_profile_name(registry, priced[0].spec, args.profile) if priced else args.profile
    load_profile(profile)
    unpriced = [r for c in claims for r in (c.minuend, c.subtrahend) if hours.get(r) is None]
    if unpriced:
        raise UserError(f"row {unpriced[0]} has no GPU-hour price on profile {profile}", where="--profile",
                        fix="a GPU profile, e.g. --profile h100")
    preset = priced[0].spec.preset if priced else args.to
    return claims, hours, {"columns": [s.claim.column for s in spreads], "profile": profile, "preset": preset,
                           "spread_preset": spreads[0].preset, "sd_from": how}


def _report(claims, hours, allocation, alpha: float) -> dict:
    from exoformer.report.stats.budget_allocation import seeds_for_power

    out = []
    for c, power in zip(claims, allocation.power, strict=True):
        pairs = min(allocation.seeds[c.minuend], allocation.seeds[c.subtrahend])
        need = seeds_for_power(c, m=len(claims), alpha=alpha)
        out.append({"claim": c.label, "paper": c.effect, "sd": c.sd, "seeds": pairs, "power": power,
                    "gpu_hours": pairs * (hours[c.minuend] + hours[c.subtrahend]),
                    "decidable": power >= 0.8, "seeds_for_80": need,
                    "gpu_hours_for_80": None if need is None else need * (hours[c.minuend] + hours[c.subtrahend])})
    return {"seeds_per_row": allocation.seeds, "gpu_hours": allocation.gpu_hours,
            "expected_decisive": allocation.expected_decisive, "search": allocation.method, "claims": out}


def _print_report(budget: float, r: dict, *, brief: bool = False) -> None:
    rows = ", ".join(f"{row} {n}" for row, n in r["seeds_per_row"].items())
    print(f"{budget:,.0f} GPU-hours: seeds per row {rows} ({r['gpu_hours']:,.1f} GPU-hours); "
          f"{r['expected_decisive']:.2f} claims decided in expectation at the paper's effects")
    if brief:
        return
    for c in r["claims"]:
        line = (f"  {c['claim']} (paper {c['paper']:+g}, sd {c['sd']:.3g}): {c['seeds']} paired seeds, power "
                f"{c['power']:.0%}, {c['gpu_hours']:,.1f} GPU-hours")
        if not c["decidable"]:
            need = ("more seeds than any plan searches" if c["seeds_for_80"] is None else
                    f"{c['seeds_for_80']} seeds per row ({c['gpu_hours_for_80']:,.1f} GPU-hours) for 80%")
            line += f"; below 80% in this budget: alone it needs {need}"
        print(line)


def budget_verb(args: argparse.Namespace) -> int:
    from exoformer.report.stats.budget_allocation import allocate
    from exoformer.report.stats.power import check_alpha
    from exoformer.report.stats.sequential import MAX_LOOKS

    registry = options.registry(args)
    options.check_table(registry, args.table)
    alpha = check_alpha(args.alpha, where="--alpha")
    if args.next:
        return _next(args, registry, alpha)
    if args.looks is not None and not 1 <= args.looks <= MAX_LOOKS:
        raise UserError(f"the looks of a design must be 1 to {MAX_LOOKS}, got {args.looks}", where="--looks",
                        fix="--looks 3")
    args.gpu_hours = _budget_hours(args)
    if args.gpu_hours is None or not (math.isfinite(args.gpu_hours) and args.gpu_hours > 0):
        raise UserError(f"a positive budget is needed, got {args.gpu_hours!r}", where="--gpu-hours",
                        fix=f"reproduce.py budget {args.table} --gpu-hours 500 --profile h100")
    root = options.writable_runs_root(args) if args.looks else options.existing_runs_root(
        args, default_may_be_missing=True)
    claims, hours, about = _claims(args, registry, root)
    reports = {}
    for factor in (1.0, 0.5, 2.0):
        reports[factor] = _report(claims, hours, allocate(claims, hours, factor * args.gpu_hours, alpha=alpha), alpha)
    design = (_write_design(args, registry, root, claims, about.pop("columns"), hours, reports[1.0], alpha)
              if args.looks else None)
    about.pop("columns", None)
    if args.json:
        print(json.dumps({"table": args.table, "budget_gpu_hours": args.gpu_hours, **about,
                          "allocation": reports[1.0], "half_budget": reports[0.5], "twice_budget": reports[2.0],
                          "design": None if design is None else {**design.content(), "digest": design.digest,
                                                                 "expected_gpu_hours": _expected(design)}},
                         allow_nan=False))
        return 0
    print(f"budget {args.table}: seeds per row that decide the most claims in expectation, power at the paper's "
          f"effect, the verdict's direction test at {alpha:g}/{len(claims)} (as `power`), priced at "
          f"{about['preset']} on {about['profile']}; seed sd "
          + "; ".join(f"{m}: {w}" for m, w in about["sd_from"].items()))
    _print_report(args.gpu_hours, reports[1.0])
    print("at half the budget: ", end="")
    _print_report(0.5 * args.gpu_hours, reports[0.5], brief=True)
    print("at twice the budget: ", end="")
    _print_report(2.0 * args.gpu_hours, reports[2.0], brief=True)
    if about["spread_preset"] and about["spread_preset"] != about["preset"]:
        print(f"note: the spread was measured on preset {about['spread_preset']}, not {about['preset']}: at another "
              "scale the seed spread differs; give --seed-sd from runs at the target scale when you have them")
    if design is not None:
        _print_design(design, root)
    return 0


def _budget_hours(args: argparse.Namespace) -> float | None:
    """--gpu-hours, or --money / --price (both, and not with --gpu-hours)."""
    if args.money is None and args.price is None:
        return args.gpu_hours
    if args.gpu_hours is not None or args.money is None or args.price is None:
        raise UserError("give --gpu-hours, or --money with --price", where="--money",
                        fix="--money 30000 --price 2.5 (the price of one GPU-hour in the same currency)")
    for flag, value in (("--money", args.money), ("--price", args.price)):
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"must be a positive number, got {value!r}", where=flag, fix=f"e.g. {flag} 2.5")
    return args.money / args.price


def _write_design(args, registry, root, claims, columns, hours, report, alpha):
    from exoformer.report.stats import sequential as sq

    plan = [sq.PlanClaim(label=c.label, minuend=c.minuend, subtrahend=c.subtrahend, column=column, paper=c.effect,
                         sd=c.sd, margin=c.margin) for c, column in zip(claims, columns, strict=True)]
    design = sq.make_design(args.table, plan, report["seeds_per_row"], looks=args.looks, spending=args.spending,
                            alpha=alpha, budget_gpu_hours=args.gpu_hours, hours_per_run=hours)
    sq.write_design(design, root, has_results=sq.table_has_results(registry, root, args.table))
    return design


def _expected(design) -> dict[str, float | None]:
    """Expected GPU-hours of the design at the paper's effects, half of them and none (simulated)."""
    from exoformer.report.stats.sequential import expected_use

    return {name: expected_use(design, scale=scale)[1] for name, scale in
            (("paper", 1.0), ("half", 0.5), ("none", 0.0))}


def _print_design(design, root) -> None:
    from scipy import stats

    from exoformer.report.stats.sequential import design_path

    print(f"sequential design written to {design_path(root, design.table)} ({design.looks} looks, "
          f"{design.spending} spending, futility below {design.futility_power:.0%} conditional power, non-binding; "
          f"at most {design.max_gpu_hours():,.1f} GPU-hours)")
    used = _expected(design)
    if None not in used.values():
        print(f"  expected GPU-hours: {used['paper']:,.1f} at the paper's effects, {used['half']:,.1f} at half of "
              f"them, {used['none']:,.1f} at no effect (4000 simulated tables at the planned spreads, claims drawn "
              "independently)")
    for row, seeds in design.seeds.items():
        print(f"  {row}: seeds {', '.join(map(str, seeds))} at looks 1-{design.looks}")
    m = len(design.claims)
    for c in design.claims:
        sided = 2 if c.margin is None else 1
        ps = [sided * stats.t.sf(b, n - 1) for b, n in zip(c.boundaries[m - 1], c.pairs, strict=True)]
        print(f"  {c.label}: p boundaries " + ", ".join(f"{p:.2g}" for p in ps)
              + f" (alpha/{m}; lower once another claim is decided)")


def _next(args: argparse.Namespace, registry, alpha: float) -> int:
    """The design's verdicts at the current look, and the runs of the next look for the claims still open."""
    from exoformer.report.stats import sequential as sq
    from exoformer.report.tables.compose import compose
    from exoformer.report.tables.verdicts import claimed_pairs, design_seeds, paper_differences

    root = options.existing_runs_root(args)
    design = sq.read_design(root, args.table)
    if design is None:
        raise UserError(f"table {args.table} has no declared design", where=str(sq.design_path(root, args.table)),
                        fix=f"reproduce.py budget {args.table} --gpu-hours 500 --looks 3 (before any run)")
    read = compose(registry, root, tables=[args.table], preset=args.preset, overrides=args.overrides).tables[args.table]
    claims = [c for c in paper_differences(registry) if c.table == args.table]
    claimed = [claimed_pairs(read.built, read.selection, c) for c in claims]
    # the same seeds and the same look as `diff` (verdicts.design_seeds): a stopped claim holds no look back
    _, diffs, _ = design_seeds(design, claims, claimed, runs_root=str(root))
    outcome = sq.sequential_verdicts(design, diffs)
    k = outcome.looks_taken
    open_ = [i for i in range(len(design.claims)) if outcome.state[0, i] == sq.OPEN]
    rows = list(dict.fromkeys(r for i in open_ for r in (design.claims[i].minuend, design.claims[i].subtrahend)))
    table_rows = {r.id: r for r in registry.tables[args.table].rows}
    have = {row: [pick is not None for pick in read.selection.row_runs(table_rows[row].specs)]
            for row in design.seeds if row in table_rows}
    spent = sum(sum(ran[:s[-1]]) * (design.hours_per_run.get(r) or 0.0) for r, s in design.seeds.items()
                for ran in [have.get(r, [])])
    lines, commands = [], []
    for i, c in enumerate(design.claims):
        lines.append(f"{c.label}: " + (sq.verdict_line(design, outcome, i) if k
                                       else f"look 0 of {design.looks}: {c.pairs[0]} paired seeds needed"))
    if k < design.looks and open_:
        for row in rows:
            want = design.seeds[row][k]
            specs = table_rows[row].specs
            if want > len(specs):
                commands.append(f"# {row}: look {k + 1} needs {want} seeds, the registry declares {len(specs)}: add "
                                "seeds to `seed:` of the table's sweep in experiments/main.yaml and the new specs to "
                                "the row in experiments/tables.yaml")
            for spec, ran in zip(specs[:want], have[row][:want]):
                if not ran:
                    commands.append(shlex.join(["reproduce.py", "run", spec, *(["--preset", args.preset]
                                                                               if args.preset else [])]))
    left = None if design.budget_gpu_hours is None else design.budget_gpu_hours - spent
    if args.json:
        print(json.dumps({"table": args.table, "look": k, "looks": design.looks, "verdicts": lines,
                          "next": commands, "gpu_hours_spent": spent, "gpu_hours_left": left}, allow_nan=False))
        return 0
    print(f"budget {args.table}: declared design (digest {design.digest[:12]}), look {k} of {design.looks}")
    for line in lines:
        print(f"  {line}")
    if not open_ or k >= design.looks:
        print("no look left to run: every claim has stopped" if not open_ else "the last look is taken")
    else:
        print(f"next look ({k + 1} of {design.looks}), for the claims still open:")
        for command in commands:
            print(f"  {command}")
    if left is not None:
        print(f"budget: {spent:,.1f} of {design.budget_gpu_hours:,.1f} GPU-hours spent, {left:,.1f} left")
    return 0


VERBS = [
    options.Verb("budget", "the seeds per row a fixed GPU-hour budget should buy to decide the most claims of a "
                 "table, and a declared sequential design that stops when a claim is decided", budget_arguments,
                 budget_verb),
]
