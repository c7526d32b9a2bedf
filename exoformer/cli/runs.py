"""Verbs that plan, launch and watch runs: plan, run, status. The decisions live in exoformer.runs.plan, what
`run` does in exoformer.runs.orchestrate; these verbs parse and print."""

from __future__ import annotations

import argparse
import json
import sys
import time

from exoformer.cli import options
from exoformer.errors import UserError
from exoformer.limits import check_option
from exoformer.runs import rundirs as runs
from exoformer.runs.orchestrate import LaunchOptions, RunResult, run_planned, run_target
from exoformer.runs.plan import PlannedRun, plan, resolve_target, split_overrides, totals
from exoformer.runs.status import format_table, status_rows


def _target_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="spec name, glob, table id or figure id")
    parser.add_argument("--all-seeds", action="store_true",
                        help="for a table: also the seed replicates of each row (default: the paper's run)")


def _plan(args: argparse.Namespace, *, write: bool = False) -> list[PlannedRun]:
    return plan(options.registry(args), args.target, preset=args.preset, overrides=args.overrides,
                runs_root=options.writable_runs_root(args), all_seeds=args.all_seeds,
                force=getattr(args, "force", False),
                retry_failed=getattr(args, "retry_failed", False), profile=args.profile, write=write)


# --------------------------------------------------------------------------------------------- plan

def plan_arguments(parser: argparse.ArgumentParser) -> None:
    _target_arguments(parser)
    parser.add_argument("--profile", default=None,
                        help="cost profile in slurm/profiles/ (default: the spec's, else the preset's)")
    parser.add_argument("--force", action="store_true", help="plan as `run --force` would")
    parser.add_argument("--retry-failed", action="store_true", help="plan as `run --retry-failed` would")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options.add_resolve(parser)


def plan_verb(args: argparse.Namespace) -> int:
    planned = _plan(args)
    print_plan(planned, args.target, as_json=args.json)
    return 0


def print_plan(planned: list[PlannedRun], target: str, *, as_json: bool) -> None:
    total = totals(planned)
    if as_json:
        print(json.dumps({"target": target, "specs": [p.to_dict() for p in planned], "total": total}))
        return
    w = max([4, *(len(p.spec.name) for p in planned)])
    a = max([6, *(len(p.describe()) for p in planned)])
    print(f"{'SPEC':<{w}}  {'ACTION':<{a}}  {'PRESET':<6}  {'HASH':<12}  {'PARAMS':>8}  {'TOKENS':>8}  "
          f"{'FLOPS':>9}  COST")
    for p in planned:
        c = p.cost
        print(f"{p.spec.name:<{w}}  {p.describe():<{a}}  {p.spec.preset:<6}  {p.spec.hash12}  "
              f"{p.spec.model.num_parameters() / 1e6:>7.1f}M  {_si(p.spec.train.tokens):>8}  {c.flops:>9.3g}  "
              f"{_cost(c.gpu_hours, c.cpu_minutes, p.profile)}")
    profiles = "/".join(dict.fromkeys(p.profile for p in planned))
    print(f"total: {total['to_run']} to run, {total['to_resume']} to resume, {total['to_skip']} skipped; "
          f"{total['flops']:.3g} FLOPs, {_cost(total['gpu_hours'], total['cpu_minutes'], profiles)}"
          " (excluding skipped runs)")
    sources = sorted({p.cost.mfu_source for p in planned if p.cost.mfu_source})
    if sources and any(p.cost.gpu_hours is not None for p in planned):
        print("MFU: " + "; ".join(sources))


def _si(n: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(int(n))


def _cost(gpu_hours: float | None, cpu_minutes: float | None, profile: str) -> str:
    parts = []
    if gpu_hours is not None:
        parts.append(f"{gpu_hours:,.1f} GPU-h")
    if cpu_minutes is not None:
        parts.append(f"{cpu_minutes:,.1f} CPU-min")
    return (" + ".join(parts) or "no estimate") + f" ({profile})"


# --------------------------------------------------------------------------------------------- run

def run_arguments(parser: argparse.ArgumentParser) -> None:
    _target_arguments(parser)
    parser.add_argument("--backend", default="local", help="inline | local | slurm (default: local)")
    parser.add_argument("--profile", default=None, help="cluster profile in slurm/profiles/ (slurm: required "
                        "unless the spec names one; local: its time limit, default the preset's)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="local backend: jobs side by side (default: one per core, the last few together so that "
                             "no core idles at the end)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="local backend: torch threads per job (default: $OMP_NUM_THREADS, else 1)")
    parser.add_argument("--timeout-min", type=float, default=None,
                        help="local backend: time limit per job (default: the profile's time_min)")
    parser.add_argument("--retry-failed", action="store_true", help="relaunch FAILED runs (they resume)")
    parser.add_argument("--force", action="store_true",
                        help="rerun from scratch, even SUCCEEDED runs (their directory is moved aside, not deleted)")
    parser.add_argument("--wait", action="store_true", help="slurm: wait until the jobs end")
    parser.add_argument("--no-wait", action="store_true",
                        help="when another `run` holds the runs root's launch lock, exit 2 at once naming it instead "
                             "of waiting for it (--wait is about the jobs)")
    parser.add_argument("--dry-run", action="store_true", help="show the plan (same as `plan`) and launch nothing")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--tensorboard", action="store_true",
                        help="also write TensorBoard event files into each run's tensorboard/ (metrics.jsonl stays "
                             "the record; never part of a run's identity)")
    options.add_resolve(parser)


def run_verb(args: argparse.Namespace) -> int:
    launch_options(args)  # its bounds, before a plan is printed or anything launched
    if args.dry_run:
        print_plan(_plan(args), args.target, as_json=args.json)
        return 0
    reg = options.registry(args)
    with _LiveLine(enabled=not args.json) as live:
        result = run_target(args.target, preset=args.preset, overrides=args.overrides, backend=args.backend,
                            profile=args.profile, jobs=args.jobs, threads=args.threads, timeout_min=args.timeout_min,
                            wait=args.wait, no_wait=args.no_wait, tensorboard=args.tensorboard,
                            all_seeds=args.all_seeds, force=args.force, retry_failed=args.retry_failed, registry=reg,
                            runs_root=options.writable_runs_root(args), command=_command(), **live.callbacks())
    print_result(result, as_json=args.json)
    if result.interrupted is None and result.waited and args.target in reg.tables \
            and len({p.root for p in result.planned}) == 1 and not args.json:
        _print_table(reg, args.target, result.planned[0].root, result.planned[0].spec.preset,
                     split_overrides(args.overrides)[0])
    return result.exit_code


def launch_options(args: argparse.Namespace) -> LaunchOptions:
    """The LaunchOptions of a parsed `run` or `evaluate` command line (its numeric options in their bounds)."""
    for value, option in ((args.jobs, "--jobs"), (args.threads, "--threads"), (args.timeout_min, "--timeout-min")):
        if value is not None:
            check_option(value, option)
    return LaunchOptions(backend=args.backend, profile=args.profile, jobs=args.jobs, threads=args.threads,
                         timeout_min=args.timeout_min, overrides=tuple(args.overrides), wait=args.wait,
                         no_wait=getattr(args, "no_wait", False), tensorboard=getattr(args, "tensorboard", False))


def launch_and_report(reg, planned: list[PlannedRun], launch: LaunchOptions, *, target: str,
                      as_json: bool = False) -> int:
    """`evaluate`'s launch of a plan made beforehand, shown as `run` shows one; its exit code."""
    with _LiveLine(enabled=not as_json) as live:
        result = run_planned(reg, planned, launch, target=target, command=_command(), **live.callbacks())
    print_result(result, as_json=as_json)
    return result.exit_code


def _command() -> list[str]:
    """This command line as run directories record it."""
    return ["reproduce.py", *sys.argv[1:]]


def print_result(result: RunResult, *, as_json: bool) -> None:
    """How a launch ended: the status table and one line of totals, the
    runs not done; or one JSON object. After Ctrl-C, one line to stderr."""
    if result.interrupted is not None:
        print(f"interrupted; run the same command to resume ({len(result.interrupted)} run(s) marked INTERRUPTED)",
              file=sys.stderr)
        return
    if as_json:
        print(json.dumps({"target": result.target, "backend": result.backend, "seconds": round(result.seconds, 1),
                          "submitted": result.submitted, "runs": result.rows}))
        return
    for line in result.submitted:
        print(f"slurm: {line}")
    print(format_table(result.rows))
    failed = result.failed
    verb = "ran" if result.waited else "submitted"
    print(f"{verb} {result.launched}, skipped {len(result.planned) - result.launched} in {result.seconds:.1f} s"
          + (f"; {len(failed)} FAILED (see the log paths above)" if failed else ""))
    if result.unfinished:
        print("not done: " + "; ".join(f"{name} ({why})" for name, why in result.unfinished))


class _LiveLine:
    """The decisions, one line as each local/inline run ends, and (jobs side by side on a terminal) the whole
    run's progress line below them (exoformer/runs/progress_line.py)."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.progress = None

    def callbacks(self) -> dict:
        """The launch callbacks of exoformer.runs.orchestrate (none under --json)."""
        return {"on_decided": self.decided, "on_done": self.announce} if self.enabled else {}

    def decided(self, planned: list[PlannedRun], backend) -> None:
        w = max([4, *(len(p.spec.name) for p in planned)])
        for p in planned:
            print(f"{p.spec.name:<{w}}  {p.spec.hash12}  {p.describe()}")
        n = sum(p.launches for p in planned)
        print(f"{n} to run on {backend.name}, {len(planned) - n} skipped", flush=True)
        if backend.parallel_jobs:
            from exoformer.runs.progress_line import RunProgress

            jobs = [(p.spec.name, p.run_dir, p.spec.train.steps) for p in planned if p.launches]
            self.progress = RunProgress(jobs, concurrency=backend.parallel_jobs, plan=planned).start()

    def announce(self, item) -> None:
        text = _announce(item)
        if self.progress is None:
            print(text, flush=True)
        else:
            self.progress.job_done(item.run_dir)
            self.progress.say(text)

    def __enter__(self) -> _LiveLine:
        return self

    def __exit__(self, *exc_info) -> None:
        if self.progress is not None:
            self.progress.stop()


def _announce(item) -> str:
    """The line for a local/inline run that ended, so a long table shows progress."""
    from exoformer.runs.status import SlurmView, reconcile

    status = reconcile(item.run_dir, item.claim, SlurmView())  # a job killed outright is INTERRUPTED here
    if status is None:  # the job ended and its run has no STATUS: the directory went away under it
        return (f"{item.spec.name}: stopped: the run directory was removed or replaced while its job ran; "
                "run the same command again to start it over")
    state = status.state
    detail = status.reason if status.state in (runs.FAILED, runs.INTERRUPTED) else ""
    return f"{item.spec.name}: {state}" + (f" ({detail}; log {status.log})" if detail else "")


def _print_table(reg, table_id: str, root, preset: str | None, overrides: list[str]) -> None:
    """After a table's runs end: the table beside the paper's numbers, and its figures."""
    from exoformer.report.pages.summary import report_table

    try:
        text, written = report_table(reg, table_id, runs_root=root, preset=preset, overrides=overrides)
    except UserError as err:  # the runs are done either way; say why the table could not be built
        print(f"table {table_id}: not built: {err}", flush=True)
        return
    print(f"\n{text}")
    if written:
        print("figures: " + ", ".join(str(p) for p in written if p.suffix == ".png"), flush=True)


# --------------------------------------------------------------------------------------------- status

def status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", default=None, help="spec name, glob, table id or figure id")
    parser.add_argument("--watch", action="store_true", help="refresh until every run has ended (Ctrl-C stops)")
    parser.add_argument("--interval", type=float, default=5.0,
                        help="--watch refresh period in seconds (Slurm is asked every poll_interval_s of the profile)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per run, one per line")
    parser.add_argument("--all-seeds", action="store_true", help="for a table: also the seed replicates")
    options.add_resolve(parser)


def status_verb(args: argparse.Namespace) -> int:
    from exoformer.runs.backends.slurm_query import DEFAULT_POLL_S, SlurmView
    from exoformer.runs.run_index import find_runs, one_view

    if not 0 < args.interval < float("inf"):  # also NaN
        raise UserError(f"must be a positive number of seconds, got {args.interval}", where="--interval",
                        fix="e.g. --interval 5")
    check_option(args.interval, "--interval")
    root = options.existing_runs_root(args)
    targeted = None
    if args.target is not None:
        specs = resolve_target(options.registry(args), args.target, preset=args.preset, overrides=args.overrides,
                               all_seeds=args.all_seeds)
        targeted = [(runs.run_dir_for(s, root), s.name, s.train.steps) for s in specs]
        asked = _asked_variant(specs, root, args.overrides)
    view = None
    while True:
        if view is None or time.monotonic() - view.fetched >= (view.poll_s or DEFAULT_POLL_S):
            view = SlurmView()  # Slurm is asked again only every poll_interval_s of the runs' profiles
        with one_view():  # one read of each spec directory per refresh
            dirs = targeted if targeted is not None else [(run.path, run.spec, run.steps) for run in find_runs(root)]
            rows = status_rows(dirs, {d: root for d, _, _ in dirs}, view)
            if targeted is not None:
                for row in rows:  # a run not launched yet has no identity: the variant this command names
                    if row["preset"] is None:
                        row["preset"], row["overrides"] = asked[row["run_dir"]]
        if args.json:
            for row in rows:
                print(json.dumps(row))
        else:
            if args.watch and sys.stdout.isatty():
                print("\033[2J\033[H", end="")
            print(format_table(rows), flush=True)
        if view.problem:
            print(f"slurm: {view.problem}; the states above may be out of date", file=sys.stderr, flush=True)
        active = [r for r in rows if r["state"] in runs.ACTIVE_STATES]
        if not args.watch or not active:
            break
        try:
            time.sleep(args.interval)
        except KeyboardInterrupt:
            break
        if not args.json:
            print()
    return 1 if any(r["state"] == runs.FAILED for r in rows) else 0


def _asked_variant(specs, root, overrides: list[str]) -> dict[str, tuple[str, dict]]:
    """run directory -> (preset, {key: value} of the --set words) of each targeted spec, as its identity will
    record them once it is launched."""
    from exoformer.registry.spec import parse_override

    sets = dict(parse_override(text) for text in split_overrides(overrides)[0])
    return {str(runs.run_dir_for(s, root)): (s.preset, sets) for s in specs}


VERBS = [
    options.Verb("plan", "show what would run, skip or resume for a spec, glob, table or figure, with FLOPs and "
                 "GPU-hours", plan_arguments, plan_verb),
    options.Verb("run", "run a spec, glob, table or figure (train -> validate -> evaluate -> analyse), skipping "
                 "finished runs", run_arguments, run_verb),
    options.Verb("status", "progress of runs and their jobs, with each run's preset and --set overrides (all runs "
                 "under the runs root, or those of a TARGET)",
                 status_arguments, status_verb),
]
