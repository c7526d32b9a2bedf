"""`run TARGET`: launch the specs of a spec name, glob, table or figure, each exactly once.

Per spec, under the runs root's launch lock: SUCCEEDED -> skip (unless --force, or a stage that was not
available then is now); FAILED -> skip unless --retry-failed (it resumes from its last checkpoint); PENDING or
RUNNING with a live job -> skip (already queued or running); else claim it in the manifest and launch it.
inline and local wait and print a summary; slurm returns after submission unless --wait.

Default backend: `local` with one job per core, each job one torch thread (backends.default_concurrency says
what was measured: on a shared 2-core machine a 2-thread smoke step was ~12x slower than a 1-thread one). Each
job is its own process, so a crash or a SIGKILL leaves the others running.
`--backend inline` runs one spec after the other in this process (debugging).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from exoformer.errors import UserError
from exoformer.harness import locking, runs
from exoformer.harness.cli_common import add_registry_arg, add_resolve_args, load_registry, split_overrides
from exoformer.harness.spec import Spec

HELP = "run a spec, glob, table or figure (train -> validate -> evaluate -> analyse), skipping finished runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="spec name, glob, table id or figure id")
    parser.add_argument("--backend", default="local", help="inline | local | slurm (default: local)")
    parser.add_argument("--profile", default=None, help="cluster profile in slurm/profiles/ (slurm: required "
                        "unless the spec names one; local: its time limit, default the preset's)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="local backend: jobs side by side (default: number of cores)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="local backend: torch threads per job (default: $OMP_NUM_THREADS, else 1)")
    parser.add_argument("--timeout-min", type=float, default=None,
                        help="local backend: time limit per job (default: the profile's time_min)")
    parser.add_argument("--retry-failed", action="store_true", help="relaunch FAILED runs (they resume)")
    parser.add_argument("--force", action="store_true",
                        help="rerun from scratch, even SUCCEEDED runs (their directory is moved aside, not deleted)")
    parser.add_argument("--wait", action="store_true", help="slurm: wait until the jobs end")
    parser.add_argument("--dry-run", action="store_true", help="show the plan (same as `plan`) and launch nothing")
    parser.add_argument("--all-seeds", action="store_true", help="for a table: also the seed replicates")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    add_resolve_args(parser)
    add_registry_arg(parser)


def run(args: argparse.Namespace) -> int:
    if args.dry_run:
        from exoformer.harness import cli_plan

        return cli_plan.run(argparse.Namespace(**{**vars(args), "profile": args.profile}))
    from exoformer.harness.backends import make_backend

    reg = load_registry(args)
    spec_sets, profile_sets = split_overrides(args.overrides)
    specs = [reg.resolve(n, preset=args.preset, overrides=spec_sets)
             for n in reg.select(args.target, replicates=args.all_seeds)]
    profile_name = args.profile or _common_profile(specs)
    preset_profile = reg.presets[specs[0].preset].profile if specs else None
    backend = make_backend(args.backend, profile_name=profile_name, preset_profile=preset_profile,
                           concurrency=args.jobs, timeout_min=args.timeout_min, threads=args.threads,
                           profile_overrides=profile_sets)
    roots = {s.hash: runs.runs_root(args.runs_dir, s) for s in specs}
    for root in set(roots.values()):
        runs.check_writable(root)
    for spec in specs:
        runs.check_identity(spec, runs.run_dir_for(spec, roots[spec.hash]))
    backend.check(specs)

    decisions: dict[str, str] = {}
    launch: dict[Path, list] = {}
    from exoformer.harness.backends import Item
    from exoformer.harness.status import SlurmView

    view = SlurmView()
    for root in sorted(set(roots.values())):
        group = [s for s in specs if roots[s.hash] == root]
        with locking.launch_lock(root):
            manifest = locking.read_manifest(root)
            claims = []
            for spec in group:
                run_dir = runs.run_dir_for(spec, root)
                action = _decide(spec, run_dir, manifest.get(spec.hash), args, view)
                decisions[spec.hash] = action
                if action not in ("launch", "resume", "rerun"):
                    continue
                if action == "rerun" and run_dir.exists():
                    _move_aside(run_dir)
                runs.prepare(spec, run_dir, command=[Path(sys.argv[0]).name, *sys.argv[1:]])
                runs.write_status(run_dir, runs.Status(state=runs.PENDING, backend=backend.name,
                                                       reason="queued by run"))
                claim = locking.new_claim(spec_hash=spec.hash, name=spec.name, run_dir=run_dir, backend=backend.name)
                claims.append(claim)
                launch.setdefault(root, []).append(Item(spec=spec, run_dir=run_dir, claim=claim))
            manifest.update({c.hash: c for c in claims})
            locking.write_manifest(root, manifest)
            if backend.name == "slurm" and launch.get(root):  # sbatch is quick: submit while holding the lock
                _submit(backend, launch[root], root, manifest)

    started = time.time()
    _print_decisions(specs, decisions, roots, backend.name, args.json)
    if backend.name != "slurm":
        for root, items in launch.items():
            backend.launch(items, root, record=lambda cs, r=root: locking.update_claims(r, cs),
                           on_done=None if args.json else _announce)
    elif args.wait:
        _wait_slurm([i for items in launch.values() for i in items])
    code = _summary(specs, decisions, roots, time.time() - started, backend.name, args)
    finished = backend.name != "slurm" or args.wait
    if finished and args.target in reg.tables and len(set(roots.values())) == 1 and not args.json:
        _print_table(reg, args.target, next(iter(roots.values())), specs[0].preset if specs else None)
    return code


def _print_table(reg, table_id: str, root: Path, preset: str | None) -> None:
    """After a table's runs end: the table beside the paper's numbers, and its figures (issue 6)."""
    from exoformer.report.summary import report_table

    try:
        text, written = report_table(reg, table_id, runs_root=root, preset=preset)
    except UserError as err:  # the runs are done either way; say why the table could not be built
        print(f"table {table_id}: not built: {err}", flush=True)
        return
    print(f"\n{text}")
    if written:
        print("figures: " + ", ".join(str(p) for p in written if p.suffix == ".png"), flush=True)


def _submit(backend, items, root: Path, manifest: dict) -> None:
    """sbatch through submitit while holding the lock; a refused submission marks its runs FAILED (exit 2)."""
    try:
        backend.launch(items, root, record=lambda cs: _record(root, manifest, cs))
    except Exception as err:  # noqa: BLE001 - sbatch's own message is the useful part
        message = " ".join(str(err).split())[:300]
        for item in items:
            runs.update_status(item.run_dir, state=runs.FAILED, reason=f"submission failed: {message}")
        raise UserError(f"sbatch refused the job: {message}", where=f"--profile {backend.profile.name}",
                        fix="fix the profile (partition, account, qos, resources) and run again") from None


def _announce(item) -> None:
    """One line as each local/inline run ends, so a long table shows progress."""
    from exoformer.harness.status import SlurmView, reconcile

    status = reconcile(item.run_dir, item.claim, SlurmView())  # a job killed outright is FAILED (dead) here
    state = status.state if status else "?"
    detail = status.reason if status and status.state == runs.FAILED else ""
    print(f"{item.spec.name}: {state}" + (f" ({detail}; log {status.log})" if detail else ""), flush=True)


def _record(root: Path, manifest: dict, claims: list) -> None:
    manifest.update({c.hash: c for c in claims})
    locking.write_manifest(root, manifest)


def _common_profile(specs: list[Spec]) -> str | None:
    names = {s.placement.profile for s in specs if s.placement.profile}
    return names.pop() if len(names) == 1 else None


def _decide(spec: Spec, run_dir: Path, claim, args, view) -> str:
    """What `run` does with one spec; a run whose job died is first marked FAILED (dead), as `status` would."""
    from exoformer.harness.status import reconcile

    status = reconcile(run_dir, claim, view)
    if status is not None and status.state in runs.ACTIVE_STATES:
        return "skip-active"  # even with --force: its job is alive and writes into this directory
    if args.force:
        return "rerun" if run_dir.exists() else "launch"
    if status is None:
        ckpt = run_dir / "checkpoints"
        return "resume" if ckpt.is_dir() and any(ckpt.iterdir()) else "launch"
    if status.state == runs.SUCCEEDED:
        if status.skipped:
            from exoformer.harness.pipeline import missing_stages

            if set(status.skipped) - set(missing_stages(spec)):
                return "resume"  # a stage that was not available then is now
        return "skip-succeeded"
    return "resume" if args.retry_failed else "skip-failed"


def _move_aside(run_dir: Path) -> None:
    """--force keeps the old results: the directory becomes <hash12>.old-<timestamp>."""
    shutil.move(str(run_dir), str(run_dir.with_name(f"{run_dir.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")))


WORDS = {"launch": "launch", "resume": "resume", "rerun": "rerun (--force)", "skip-succeeded": "skip: SUCCEEDED",
         "skip-failed": "skip: FAILED (use --retry-failed)", "skip-active": "skip: already queued or running"}


def _print_decisions(specs, decisions, roots, backend: str, as_json: bool) -> None:
    if as_json:
        return
    w = max(4, *(len(s.name) for s in specs)) if specs else 4
    for s in specs:
        print(f"{s.name:<{w}}  {s.hash12}  {WORDS[decisions[s.hash]]}")
    n = sum(d in ("launch", "resume", "rerun") for d in decisions.values())
    print(f"{n} to run on {backend}, {len(specs) - n} skipped", flush=True)


def _wait_slurm(items) -> None:
    from exoformer.harness.status import SlurmView, reconcile

    while True:
        view = SlurmView()
        states = [reconcile(i.run_dir, i.claim, view) for i in items]
        if all(s is not None and s.state not in runs.ACTIVE_STATES for s in states):
            return
        time.sleep(5)


def _summary(specs, decisions, roots, seconds: float, backend: str, args) -> int:
    from exoformer.harness.status import collect, format_table

    dirs = [(runs.run_dir_for(s, roots[s.hash]), s.name, s.train.steps) for s in specs]
    rows = collect(dirs, {d: roots[s.hash] for (d, _, _), s in zip(dirs, specs)})
    for row, s in zip(rows, specs):
        row["action"] = decisions[s.hash]
    failed = [r for r in rows if r["state"] == runs.FAILED and r["action"] in ("launch", "resume", "rerun")]
    if args.json:
        print(json.dumps({"target": args.target, "backend": backend, "seconds": round(seconds, 1), "runs": rows}))
    else:
        print(format_table(rows))
        launched = sum(d in ("launch", "resume", "rerun") for d in decisions.values())
        verb = "submitted" if backend == "slurm" and not args.wait else "ran"
        print(f"{verb} {launched}, skipped {len(specs) - launched} in {seconds:.1f} s"
              + (f"; {len(failed)} FAILED (see the log paths above)" if failed else ""))
    return 1 if failed else 0

