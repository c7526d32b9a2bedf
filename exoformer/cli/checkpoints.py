"""The verb that evaluates given checkpoints as table rows: evaluate. The run logic lives in
exoformer.checkpoint_import.checkpoint_run; planning, launching and the summary are those of `run`."""

from __future__ import annotations

import argparse

from exoformer.cli import options
from exoformer.cli.runs import launch_and_report, launch_options, print_plan
from exoformer.eval.precision import SCORING_PRECISIONS


def evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="checkpoint file: the author's ckpt_step:N.pt (model1-4 / model.py layouts) or a "
                             "checkpoints/step_N.pt of one of our runs")
    parser.add_argument("--as", dest="as_row", required=True, metavar="ROW",
                        help="the table row the checkpoint stands for, e.g. gated")
    parser.add_argument("--table", default="table1", help="the table of ROW (default: table1)")
    parser.add_argument("--suite", default=None, choices=("paper", "smoke"),
                        help="evaluation suite (default: the preset's)")
    parser.add_argument("--precision", default=None, choices=tuple(SCORING_PRECISIONS),
                        help="scoring (and validation) precision, the same as --set eval.precision=...: bf16 as "
                             "the author's run_eval.py (default), or fp32 (not comparable with the paper)")
    parser.add_argument("--backend", default="local", help="inline | local | slurm (default: local)")
    parser.add_argument("--profile", default=None, help="cluster profile in slurm/profiles/")
    parser.add_argument("--jobs", type=int, default=None, metavar="N", help="local backend: jobs side by side")
    parser.add_argument("--threads", type=int, default=None, metavar="N", help="local backend: torch threads per job")
    parser.add_argument("--timeout-min", type=float, default=None, help="local backend: time limit per job")
    parser.add_argument("--retry-failed", action="store_true", help="relaunch FAILED runs (they resume)")
    parser.add_argument("--force", action="store_true", help="evaluate again (the old directory is moved aside)")
    parser.add_argument("--wait", action="store_true", help="slurm: wait until the jobs end")
    parser.add_argument("--dry-run", action="store_true", help="read the files, show the plan, launch nothing")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    options.add_resolve(parser)


def evaluate_verb(args: argparse.Namespace) -> int:
    from exoformer.checkpoint_import.checkpoint_run import plan_checkpoints, resolve_checkpoint_spec
    from exoformer.model.official_info import format_checkpoint_info

    reg = options.registry(args)
    overrides = [*args.overrides, *([f"eval.suite={args.suite}"] if args.suite else [])]
    specs = []
    for path in args.paths:
        spec = resolve_checkpoint_spec(reg, path, as_row=args.as_row, table=args.table, preset=args.preset,
                                       overrides=overrides, precision=args.precision)
        specs.append(spec)
        if not args.json:
            info = {**spec.imported, "file": spec.checkpoint_path, "sha256": spec.checkpoint_sha256,
                    "size": spec.checkpoint_size, "model_config": spec.model.to_dict()}
            print(format_checkpoint_info(info) + f"\n  as         {args.table} row {args.as_row} "
                  f"({spec.name}, preset {spec.preset}, scoring {spec.eval.precision})", flush=True)
    planned = plan_checkpoints(reg, specs, runs_root=options.writable_runs_root(args), force=args.force,
                               retry_failed=args.retry_failed, profile=args.profile, overrides=args.overrides)
    target = f"{args.table}:{args.as_row}"
    if args.dry_run:
        print_plan(planned, target, as_json=args.json)
        return 0
    return launch_and_report(reg, planned, launch_options(args), target=target, as_json=args.json)


VERBS = [options.Verb("evaluate", "evaluate checkpoint files (the author's released ones, or ours) as a table row: "
                      "validate, evaluate and analyse, skipping files already done", evaluate_arguments,
                      evaluate_verb)]
