"""What one reconciliation of N Slurm runs costs the Slurm controller: client commands, lines read, seconds.

`status` (and each look of `run --wait`) reconciles every active run with the scheduler. On a busy cluster the
way it asks matters more than the harness's own work, so this benchmark counts the Slurm client commands of one
reconciliation against a fake Slurm (tests/fake_slurm.py) that holds --others jobs of other users plus ours.

Two sides, each in a child process over a fresh copy of the same runs root (the copy is not timed):
  before: the code at --before (a git worktree at --before-tree, made when missing): one squeue of the whole
          cluster queue, then one sacct per job that left the queue.
  after:  the working tree (this checkout), as it is when the benchmark runs.
Timed: `exoformer.runs.status.status_rows(...)` inside `run_index.one_view()`, with time.perf_counter in the child.
Counted: every fake Slurm call (state/calls.jsonl), by command, the lines squeue and sacct printed, and the
seconds the fake spent answering (fake_work_s, without each call's Python start-up of ~35 ms).

The runs root holds N run directories of a Slurm launch (arrays of 200 tasks): half queued (PENDING, in squeue),
a third running on node-17 (RUNNING, in squeue), a sixth ended without a result (an attempt log, gone from the
queue, sacct says CANCELLED/TIMEOUT/NODE_FAIL/OUT_OF_MEMORY). Roots are written with the --before tree's code
(a stable writer while the working tree changes; the run-directory layout is the same in both).

Rows: both sides at --runs with --repeat repetitions (best seconds kept); both sides once at each --scale size;
the after side once with two injected transient failures (fake_slurm.FakeCluster.fail_next(2)).

    .venv/bin/python benchmarks/bench_slurm_polling.py [--runs 600] [--scale 60,600,6000] [--others 100000]
        [--repeat 3] [--quick] [--out results/bench_slurm_polling.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import fake_slurm  # noqa: E402

USER = "exo-bench"
ARRAY_TASKS = 200
FIRST_ARRAY = 500_000
ENDED_STATES = (("CANCELLED by 0", "0:15"), ("TIMEOUT", "0:0"), ("NODE_FAIL", "0:0"), ("OUT_OF_MEMORY", "0:125"))

CHILD = r"""
import json, sys, time
from collections import Counter
from pathlib import Path
from exoformer.runs import status
from exoformer.runs.run_index import one_view
root = Path(sys.argv[1])
triples = [(d, s.name, None) for s in sorted(root.iterdir()) if s.is_dir() and not s.name.startswith(".")
           for d in sorted(s.iterdir()) if d.is_dir()]
with one_view():
    start = time.perf_counter()
    rows = status.status_rows(triples, {d: root for d, _, _ in triples})
    seconds = time.perf_counter() - start
reasons = sorted({(r["reason"] or "")[:120] for r in rows if r["state"] == "INTERRUPTED"})[:3]
print(json.dumps({"seconds": seconds, "states": Counter(r["state"] for r in rows), "reasons": reasons}))
"""


def ensure_worktree(tree: Path, commit: str) -> None:
    """The --before code as a detached worktree (never touches this checkout)."""
    if not (tree / "exoformer").is_dir():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), commit], check=True,
                       capture_output=True)


def build_root(root: Path, n: int, writer_tree: Path) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """N run directories under `root` in a child process of the writer tree; (squeue states of ours, sacct rows)."""
    ours, accounting, plan = {}, {}, []
    for i in range(n):
        job = f"{FIRST_ARRAY + i // ARRAY_TASKS}_{i % ARRAY_TASKS}"
        kind = ("queued", "queued", "queued", "running", "running", "ended")[i % 6]
        if kind == "queued":
            ours[job] = "PENDING"
        elif kind == "running":
            ours[job] = "RUNNING"
        else:
            accounting[job] = ENDED_STATES[(i // 6) % len(ENDED_STATES)]
        plan.append((job, kind))
    code = r"""
import json, random, sys, time
from dataclasses import replace
from pathlib import Path
import yaml
from exoformer.registry.registry import Registry
from exoformer.runs import locking
from exoformer.runs.rundirs import identity_for
from exoformer.rundir import RunDir, Status
root, plan = Path(sys.argv[1]), json.load(sys.stdin)
reg = Registry()
names = [row.specs[0] for row in reg.tables["table1"].rows]
specs = {name: reg.resolve(name, preset="smoke") for name in names}
ids = {name: identity_for(reg, spec) for name, spec in specs.items()}
rng = random.Random(0)
claims = {}
for i, (job, kind) in enumerate(plan):
    name = names[i % len(names)]
    spec, data = specs[name], specs[name].to_dict()
    steps = 1000 + i
    h12 = f"{rng.getrandbits(48):012x}"
    rd = RunDir(root / name / h12)
    rd.create()
    rd.spec_file.write_text(yaml.safe_dump({**data, "train": {**data["train"], "steps": steps}, "hash": h12 * 5},
                                           sort_keys=False))
    rd.write_identity(replace(ids[name], hash12=h12, overrides={"train.steps": steps}))
    rd.write_provenance({"command": ["reproduce.py", "run", name, "--backend", "slurm"]})
    running = kind == "running" or (kind == "ended" and i % 12 == 5)
    if kind == "ended":
        (rd.logs / "attempt-001.log").write_text("started\n")
    if running:
        rd.write_status(Status(state="RUNNING", stage="train", backend="slurm", job_id=job, host="node-17", pid=4242,
                               started="2026-12-03T10:00:00+00:00"))
    else:
        rd.write_status(Status(state="PENDING", backend="slurm", job_id=job, reason="queued by run"))
    claim = locking.new_claim(spec_hash=h12 * 5, name=name, run_dir=rd.path, backend="slurm")
    claim.job_id, claim.folder = job, str(root / "jobs" / job.split("_")[0])
    claims[claim.hash] = claim
locking.write_manifest(root, claims)
"""
    root.mkdir(parents=True)
    subprocess.run([sys.executable, "-c", code, str(root)], input=json.dumps(plan), text=True, check=True,
                   cwd=writer_tree, env={**os.environ, "PYTHONPATH": str(writer_tree)})
    return ours, accounting


def reconcile_once(tree: Path, template: Path, cluster: fake_slurm.FakeCluster, work: Path,
                   fail: int = 0) -> dict:
    """One reconciliation by the code in `tree` over a fresh copy of `template`: its numbers or its error."""
    root = work / "root"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(template, root, symlinks=True)
    cluster.reset_calls()
    if fail:
        cluster.fail_next(fail)
    env = {**cluster.env(), "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(root)], capture_output=True, text=True, env=env,
                          cwd=tree, timeout=1800)
    wall = time.perf_counter() - start
    log = cluster.call_log()
    out = {"child_wall_s": round(wall, 3), "commands": len(log),
           "by_name": dict(Counter(entry["argv"][0] for entry in log)),
           "failed_calls": sum(1 for entry in log if entry["rc"] != 0),
           "squeue_lines": sum(entry["lines"] for entry in log if entry["argv"][0] == "squeue"),
           "sacct_lines": sum(entry["lines"] for entry in log if entry["argv"][0] == "sacct"),
           "fake_work_s": round(sum(entry["seconds"] for entry in log), 3),  # inside the scripts, no start-up
           "slurm_argv": [" ".join(entry["argv"])[:160] for entry in log[:4]]}
    if done.returncode != 0:
        return {**out, "error": (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1],
                "stderr_tail": done.stderr[-2000:]}
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return {**out, "seconds": round(answer["seconds"], 4), "states": answer["states"],
            "sample_reasons": answer["reasons"]}


def measure(side: str, tree: Path, template: Path, cluster, work: Path, n: int, repeat: int, fail: int = 0) -> dict:
    """Best of `repeat` reconciliations (commands are the same each time; seconds vary)."""
    tries = [reconcile_once(tree, template, cluster, work, fail) for _ in range(repeat)]
    ok = [t for t in tries if "error" not in t]
    best = min(ok, key=lambda t: t["seconds"]) if ok else tries[-1]
    row = {"side": side, "runs": n, "injected_failures": fail, "repeat": repeat, **best}
    if ok:
        row["seconds_all"] = [t["seconds"] for t in ok]
    return row


def expected_states(n: int) -> dict[str, int]:
    kinds = Counter(("queued", "queued", "queued", "running", "running", "ended")[i % 6] for i in range(n))
    return {"PENDING": kinds["queued"], "RUNNING": kinds["running"], "INTERRUPTED": kinds["ended"]}


def print_row(row: dict) -> None:
    seconds = f"{row['seconds']:8.3f}" if "seconds" in row else "   ERROR"
    names = " ".join(f"{k}={v}" for k, v in sorted(row["by_name"].items()))
    print(f"{row['side']:<7} {row['runs']:>6} {row['injected_failures']:>5} {row['commands']:>9} "
          f"{row['squeue_lines']:>13} {seconds} s  {names}" + (f"  [{row['error']}]" if "error" in row else ""),
          flush=True)


def main_bench() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--scale", default="60,600,6000", help="comma-separated run counts, once each")
    parser.add_argument("--others", type=int, default=100_000, help="queued jobs of other users")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="60 runs, scale 6,60, 10,000 others, 1 repeat")
    parser.add_argument("--before", default="d10df27")
    parser.add_argument("--before-tree", type=Path, default=Path("/tmp/exo-before"))
    parser.add_argument("--out", type=Path, default=None, help="write the JSON record here "
                        "(default results/bench_slurm_polling.json, none with --quick)")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.scale, args.others, args.repeat = 60, "6,60", 10_000, 1
    out = args.out or (None if args.quick else REPO / "results" / "bench_slurm_polling.json")
    sizes = sorted({args.runs, *(int(s) for s in args.scale.split(",") if s)})
    ensure_worktree(args.before_tree, args.before)
    before_head = subprocess.run(["git", "-C", str(args.before_tree), "rev-parse", "HEAD"], capture_output=True,
                                 text=True).stdout.strip()
    after_head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--short", "exoformer"], capture_output=True,
                           text=True).stdout.splitlines()
    rows = []
    print(f"{'side':<7} {'runs':>6} {'fails':>5} {'commands':>9} {'squeue lines':>13} {'seconds':>8}    by name")
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
        base = Path(tmp)
        for n in sizes:
            t0 = time.perf_counter()
            template = base / f"template-{n}"
            ours, accounting = build_root(template, n, args.before_tree)
            cluster = fake_slurm.make_fake_cluster(base / f"cluster-{n}", user=USER, others=args.others, ours=ours,
                                                   accounting=accounting,
                                                   max_job_count=max(10_000, 2 * (args.others + n)))
            print(f"# {n} runs and a queue of {args.others + len(ours)} jobs built in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
            repeat = args.repeat if n == args.runs else 1
            for side, tree in (("before", args.before_tree), ("after", REPO)):
                row = measure(side, tree, template, cluster, base / "work", n, repeat)
                row["expected_states"] = expected_states(n)
                row["states_as_expected"] = row.get("states") == row["expected_states"]
                rows.append(row)
                print_row(row)
            if n == args.runs:
                for side, tree in (("before", args.before_tree), ("after", REPO)):
                    row = measure(side, tree, template, cluster, base / "work", n, 1, fail=2)
                    row["expected_states"] = expected_states(n)
                    row["states_as_expected"] = row.get("states") == row["expected_states"]
                    rows.append(row)
                    print_row(row)
    main_rows = {r["side"]: r for r in rows if r["runs"] == args.runs and r["injected_failures"] == 0}
    ratios = {}
    if "seconds" in main_rows.get("before", {}) and "seconds" in main_rows.get("after", {}):
        b, a = main_rows["before"], main_rows["after"]
        ratios = {"commands_before_over_after": round(b["commands"] / max(1, a["commands"]), 1),
                  "seconds_before_over_after": round(b["seconds"] / a["seconds"], 2),
                  "squeue_lines_before_over_after": round(b["squeue_lines"] / max(1, a["squeue_lines"]), 1)}
        print(f"at {args.runs} runs: commands {b['commands']} -> {a['commands']} "
              f"({ratios['commands_before_over_after']}x), seconds {b['seconds']:.3f} -> {a['seconds']:.3f} "
              f"({ratios['seconds_before_over_after']}x), squeue lines {b['squeue_lines']} -> {a['squeue_lines']}")
    record = {
        "tool": "benchmarks/bench_slurm_polling.py",
        "command": ".venv/bin/python benchmarks/bench_slurm_polling.py " + " ".join(sys.argv[1:]),
        "note": ("one reconciliation (status_rows in one_view) of N Slurm runs against tests/fake_slurm.py with "
                 f"{args.others} queued jobs of other users; commands counted from the fake's call log; seconds: "
                 "status_rows alone, best of the repetitions, each over a fresh copy of the runs root; each fake "
                 "call is one Python process start (~35 ms here), the stand-in for a client's RPC"),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "parameters": {"runs": args.runs, "scale": sizes, "others": args.others, "repeat": args.repeat,
                       "array_tasks": ARRAY_TASKS, "before": before_head, "after": f"{after_head} + working tree",
                       "after_uncommitted_exoformer_files": dirty},
        "ratios": ratios, "rows": rows}
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {out}")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main_bench())
