"""Where the README's main job (`reproduce.py run table1 --preset smoke`) spends its CPU time, stage by stage.

Runs the real `run` verb on a few Table-1 smoke specs (`--specs`, default the cheapest and the dearest of the nine:
base-s42 and dynamic-e-exoformer-s42, 20-30% apart in CPU time at the smoke shape, so their mean times nine is the
table's cost: 12.8-14.7 CPU-minutes by load against 14.3 measured for the whole main job at load ~9.5) in a child
process with one torch thread, as the local backend runs each job, into a temporary runs root. The child wraps each
stage function of exoformer/runs/pipeline.py and records the process CPU time (user + sys, every thread) it took;
start-up is the CPU time from the interpreter's start to the first stage (imports, registry, plan), the rest after
the last stage is the table and figures `run` prints. Wall times on a shared machine say little, so the output is
CPU seconds and their ratios, with the load average beside them.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_main_job.py [--specs SPEC ...] [--set KEY=VALUE ...]
        [--out FILE.json]

`--set` measures a candidate recipe (e.g. `--set train.steps=100`) before it goes into experiments/presets.yaml.
`--one-job 'smoke-ladder-base-d64-*'` measures instead one process that runs a ladder's stable run and then its decay
branches, as a local job runs them; results/bench_main_job.json keeps such jobs under `in_parent_job`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

FINISH = r"""
import sys
from exoformer.registry.registry import Registry
from exoformer.report.pages.summary import report_table
text, written = report_table(Registry(), "table1", runs_root=sys.argv[1], preset="smoke", figures_dir=sys.argv[2])
assert written, "no figure drawn"
"""

CHILD = r"""
import json, sys, time
t0 = time.process_time()
from exoformer.runs import pipeline
from exoformer.cli import main as cli_main
record = {"stages": {}, "first_stage_at": None, "by_run": {}}
def wrap(name, fn):
    def timed(ctx):
        run = record["by_run"].setdefault(ctx.spec.name, {"stages": {}})
        start = time.process_time()
        if record["first_stage_at"] is None:
            record["first_stage_at"] = start
        run.setdefault("first_stage_at", start)
        try:
            return fn(ctx)
        finally:
            spent = time.process_time() - start
            record["stages"][name] = record["stages"].get(name, 0.0) + spent
            run["stages"][name] = run["stages"].get(name, 0.0) + spent
            record["last_stage_end"] = run["last_stage_end"] = time.process_time()
    return timed
for name, fn in list(pipeline.STAGE_FUNCTIONS.items()):
    pipeline.STAGE_FUNCTIONS[name] = wrap(name, fn)
code = 1
try:
    code = cli_main(sys.argv[2:])
finally:
    record["end"] = time.process_time()
    record["exit"] = code
    open(sys.argv[1], "w").write(json.dumps(record))
sys.exit(code or 0)
"""

STAGES = ("train", "validate", "evaluate", "analyse")


def task_scores(runs_root: Path, spec: str) -> dict[str, dict[str, float]]:
    """{task: {value, stderr, chance}} under the default convention, from the run's eval/long.jsonl (the newest run
    of `spec` under `runs_root`)."""
    from exoformer.data.smoke.tasks import CHANCE
    from exoformer.registry.tables import DEFAULT_CONVENTION

    long = max((runs_root / spec).glob("*/eval/long.jsonl"), key=lambda p: p.stat().st_mtime)
    scores = {}
    for line in long.read_text().splitlines():
        row = json.loads(line)
        task = row["task"].removeprefix("smoke_")
        if row["metric"] == DEFAULT_CONVENTION.get(task):
            scores[task] = {"value": row["value"], "stderr": row["stderr"], "chance": CHANCE["smoke_" + task]}
    return scores


def finish_cpu_s(root: Path, figures: Path) -> float:
    """CPU seconds of what `run table1` does once after its jobs: Table 1 and its figures (here from the runs of
    --specs only: the same drawing work per figure, fewer rows and curves)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", FINISH, str(root), str(figures)], cwd=REPO, env=env, check=True,
                   capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_child(args: list[str], record_path: Path, threads: int) -> dict:
    from exoformer.environ import glibc_malloc_env

    # the environment a local job process starts with (exoformer/runs/backends/local.py)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               **glibc_malloc_env())
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(record_path), *args], cwd=REPO, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"child failed with exit {proc.returncode}")
    record = json.loads(record_path.read_text())
    record["process_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    record["wall_s"] = wall
    return record


def recipe(name: str, overrides: list[str]) -> dict:
    """The recipe of the measured spec at the smoke preset (spec_recipe)."""
    from exoformer.registry.registry import Registry

    return spec_recipe(Registry().resolve(name, preset="smoke", overrides=overrides))


def spec_recipe(spec) -> dict:
    """The fields of a spec that set its stages' work (tests/budget/test_cost_calibration.py checks with this that
    the recorded measurement is of the current smoke recipe)."""
    t = spec.train
    return {"steps": t.steps, "batch_tokens": t.batch_tokens, "val_every": t.val_every, "val_batches": t.val_batches,
            "final_val_tokens": t.final_val_tokens, "eval_suite": spec.eval.suite, "eval_limit": spec.eval.limit,
            "eval_shots": spec.eval.num_fewshot}


def cost_model(specs: list[str], overrides: list[str]) -> dict[str, float]:
    """The CPU cost model's seconds per stage (exoformer/budget/cost.py cpu_stage_seconds), mean over `specs`."""
    from exoformer.budget.cost import cpu_stage_seconds
    from exoformer.registry.profiles import load_profile
    from exoformer.registry.registry import Registry

    reg, cpu = Registry(), load_profile("cpu")
    rows = [cpu_stage_seconds(reg.resolve(name, preset="smoke", overrides=overrides), cpu) for name in specs]
    return {stage: sum(r[stage] for r in rows) / len(rows) for stage in rows[0]}


def one_job(target: str, threads: int, out: Path | None) -> int:
    """CPU seconds of each run of one job process that runs several (a parent, then its decay branches), against
    the cost model's price of each as that job runs it (cpu_stage_seconds with `after`). A run's `setup_s` is the
    CPU time before its first stage: the interpreter and imports for the first run, the pipeline's own work
    between runs for the others."""
    from exoformer.budget.cost import cpu_stage_seconds
    from exoformer.registry.profiles import load_profile
    from exoformer.registry.registry import Registry

    load = os.getloadavg()
    reg, cpu = Registry(), load_profile("cpu")
    with tempfile.TemporaryDirectory() as tmp:
        command = ["run", target, "--backend", "inline", "--runs-dir", str(Path(tmp) / "runs")]
        record = run_child(command, Path(tmp) / "record.json", threads)
    order = sorted(record["by_run"], key=lambda name: record["by_run"][name]["first_stage_at"])
    runs, previous_end, first = [], 0.0, None
    for name in order:
        run = record["by_run"][name]
        spec = reg.resolve(name)
        model = cpu_stage_seconds(spec, cpu, after=first)
        setup = run["first_stage_at"] - previous_end
        if first is None:  # the job's start: also what the interpreter spent before the child's first line
            setup += max(0.0, record["process_cpu_s"] - record["end"])
        stages = {stage: run["stages"].get(stage, 0.0) for stage in STAGES}
        runs.append({"spec": name, "setup_s": setup, **{f"{k}_s": v for k, v in stages.items()},
                     "total_cpu_s": setup + sum(stages.values()), "recipe": spec_recipe(spec), "cost_model_s": model,
                     "cost_model_total_s": sum(model.values())})
        previous_end, first = run["last_stage_end"], first or spec
    result = {"target": target, "load_average": load, "load_average_end": os.getloadavg(), "cores": os.cpu_count(),
              "threads": threads, "runs": runs, "process_cpu_s": record["process_cpu_s"], "wall_s": record["wall_s"]}
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores; one job process, "
          f"{threads} torch thread(s); CPU seconds per run:")
    for r in runs:
        print(f"  {r['spec']:<28} setup {r['setup_s']:5.1f}  " + "  ".join(f"{s} {r[f'{s}_s']:5.1f}" for s in STAGES)
              + f"  total {r['total_cpu_s']:6.1f}  cost model {r['cost_model_total_s']:6.1f} "
              f"({r['cost_model_total_s'] / r['total_cpu_s'] - 1:+.0%})")
    if out:
        out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", nargs="+", default=["base-s42", "dynamic-e-exoformer-s42"],
                        help="Table-1 smoke specs to run")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the local backend's default: 1)")
    parser.add_argument("--models", type=int, default=9, help="models of the main job, to extrapolate to")
    parser.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON")
    parser.add_argument("--backend", default="inline", choices=("inline", "local"),
                        help="inline: the stages of each job measured apart; local: the README's path (a submitit job "
                             "process per spec, 1 thread), measured as one total per job")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="run a candidate recipe: passed to `run --set` and to the cost model (repeatable)")
    parser.add_argument("--keep", type=Path, default=None, help="runs root to keep (default: a temporary one)")
    parser.add_argument("--one-job", metavar="TARGET", default=None,
                        help="instead: run TARGET (a stable run and its decay branches, e.g. 'smoke-ladder-base-d64-*') "
                             "in one process, as a local job runs a parent and its branches; each run measured apart")
    args = parser.parse_args(argv)
    if args.one_job:
        return one_job(args.one_job, args.threads, args.out)

    load = os.getloadavg()
    per_spec = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp) / "runs"
        for name in args.specs:
            command = ["run", name, "--preset", "smoke", "--backend", args.backend, "--runs-dir", str(root),
                       *(f"--set={o}" for o in args.overrides)]
            if args.backend == "local":
                command += ["--jobs", "1", "--threads", str(args.threads)]
            record = run_child(command, Path(tmp) / f"{name}.json", args.threads)
            stages = {s: record["stages"].get(s, 0.0) for s in STAGES}
            startup = (record["first_stage_at"] or record["end"])
            interpreter = record["process_cpu_s"] - record["end"]  # before the child's first line, and its exit
            per_spec.append({"spec": name, "startup_s": startup + max(0.0, interpreter), **{f"{s}_s": v for s, v in
                             stages.items()}, "after_s": record["end"] - record.get("last_stage_end", record["end"]),
                             "total_cpu_s": record["process_cpu_s"], "wall_s": record["wall_s"],
                             "recipe": recipe(name, args.overrides), "tasks": task_scores(root, name)})
        finish = finish_cpu_s(root, Path(tmp) / "figures")
    if args.backend == "local":  # no stage split from a job process: the total per job is the number
        result = {"load_average": load, "cores": os.cpu_count(), "threads": args.threads, "backend": "local",
                  "per_spec": [{"spec": r["spec"], "total_cpu_s": r["total_cpu_s"], "wall_s": r["wall_s"],
                                "tasks": r["tasks"]} for r in per_spec]}
        print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores; local backend, "
              f"{args.threads} torch thread(s):")
        for r in per_spec:
            print(f"  {r['spec']}: {r['total_cpu_s']:.1f} CPU seconds (launcher, job process and its stages)")
        if args.out:
            args.out.write_text(json.dumps(result, indent=2) + "\n")
        return 0
    keys = ["startup_s", *(f"{s}_s" for s in STAGES), "after_s"]
    model = cost_model(args.specs, args.overrides)
    mean = {k: sum(r[k] for r in per_spec) / len(per_spec) for k in keys}
    total = sum(mean.values())
    result = {"cost_model_s": model, "overrides": args.overrides, "load_average": load,
              "load_average_end": os.getloadavg(), "cores": os.cpu_count(), "threads": args.threads,
              "per_spec": per_spec,
              "mean_per_model_cpu_s": mean, "ratios": {k: v / total for k, v in mean.items()},
              "eval_over_train": mean["evaluate_s"] / mean["train_s"] if mean["train_s"] else None,
              "finish_cpu_s": finish,
              "main_job_cpu_min_extrapolated": (total * args.models + finish) / 60.0, "models": args.models}
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores; "
          f"{args.threads} torch thread(s); CPU seconds (user + sys) per model, mean of {len(per_spec)}:")
    for k in keys:
        estimate = model.get(k[:-2])
        print(f"  {k[:-2]:<9} {mean[k]:8.1f} s  {mean[k] / total:6.1%}"
              + (f"   cost model {estimate:6.1f} s ({estimate / mean[k] - 1:+.0%})" if estimate and mean[k] else ""))
    print(f"  {'total':<9} {total:8.1f} s   evaluate / train = {result['eval_over_train']:.2f}")
    print(f"once per table: Table 1 and its figures {finish:.1f} s")
    for r in per_spec:
        print(f"  {r['spec']}: " + ", ".join(f"{t} {v['value']:.2f} (chance {v['chance']:.2f}, se {v['stderr']:.2f})"
                                            for t, v in r["tasks"].items()))
    print(f"main job ({args.models} models and the table, extrapolated): "
          f"{result['main_job_cpu_min_extrapolated']:.1f} CPU-minutes")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
