"""Many stale runs, read and launched at once: nothing lost, nothing stuck (docs/architecture.md "Trust model").

Builds a runs root of --runs run directories as benchmarks/bench_reading.py does (the current seed-42 runs of
Table 1 and variants of them), then makes all but the current ones stale: STATUS says RUNNING in train, on this
host, under a process that is gone, and no job holds the run's lock. Then starts, side by side, in processes of
their own: `run table1` (its runs are done: it skips them), `status` (which turns every stale run INTERRUPTED),
`table table1` twice in a row and `report`. Each has --timeout seconds.

Checked afterwards: every process ended in time with its usual exit code; every run directory kept its identity
and result rows byte for byte; every stale STATUS reads INTERRUPTED; no temporary file is left; `table` printed
the same table in each call as once every process has ended. Written: results/bench_stale_load.json with the
seconds of each process and of `table`'s first and later calls.

    .venv/bin/python benchmarks/bench_stale_load.py [--runs 2100] [--timeout 600] [--out results/bench_stale_load.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_reading import TABLE, build_roots  # noqa: E402
from exoformer.rundir import RunDir, Status  # noqa: E402
from exoformer.runs import rundirs as runs  # noqa: E402

TEMP_MARKERS = (".tmp", ".partial")


def dead_pid() -> int:
    """A process id that is no longer running (a child that has exited and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def make_stale(big: Path, current: set[Path]) -> list[Path]:
    """Every run but the current ones says RUNNING in train under a gone process, with one attempt log."""
    stale, pid = [], dead_pid()
    for run_dir in sorted(p for p in big.glob("*/*") if p.is_dir() and p not in current):
        rd = RunDir(run_dir)
        rd.logs.mkdir(parents=True, exist_ok=True)
        (rd.logs / "attempt-001.log").write_text("train: start\n")
        rd.write_status(Status(state=runs.RUNNING, stage="train", backend="local", host=os.uname().nodename,
                               pid=pid, started=runs.now(), reason=None))
        stale.append(run_dir)
    return stale


def fingerprint(run_dir: Path) -> str:
    """sha256 of what must never change under concurrent readers: the identity and the result rows."""
    rd, digest = RunDir(run_dir), hashlib.sha256()
    for path in (rd.path / "identity.json", rd.eval_rows, rd.validation):
        digest.update(path.read_bytes() if path.is_file() else b"missing")
    return digest.hexdigest()


def start(argv: list[str], root: Path, env: dict[str, str], timeout: float) -> dict:
    """Start one verb in a process of its own; a thread waits for it and records when it ended."""
    proc = subprocess.Popen([sys.executable, str(REPO / "reproduce.py"), *argv, "--runs-dir", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    job = {"proc": proc, "began": time.perf_counter()}

    def wait() -> None:
        try:
            job["out"], job["err"] = proc.communicate(timeout=timeout)
            job["stuck"] = False
        except subprocess.TimeoutExpired:
            proc.kill()
            job["out"], job["err"] = proc.communicate()
            job["stuck"] = True
        job["seconds"] = round(time.perf_counter() - job["began"], 2)

    job["thread"] = threading.Thread(target=wait)
    job["thread"].start()
    return job


def finish(job: dict) -> dict:
    job["thread"].join()
    return {"seconds": job["seconds"], "exit": job["proc"].returncode, "stuck": job["stuck"],
            "out": job["out"], "err": job["err"][-500:]}


def main_bench() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2100)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out", default=str(REPO / "results" / "bench_stale_load.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        env = {**os.environ, "XDG_CACHE_HOME": str(base / "cache"), "OMP_NUM_THREADS": "1"}
        t0 = time.perf_counter()
        big, small, _ = build_roots(base, args.runs)
        current = {p for p in big.glob("*/*") if (small / p.parent.name / p.name).is_dir()}
        stale = make_stale(big, current)
        before = {p: fingerprint(p) for p in big.glob("*/*") if p.is_dir()}
        print(f"built {args.runs} run directories, {len(stale)} of them stale, in {time.perf_counter() - t0:.1f} s")

        jobs = {"run": ["run", TABLE, "--backend", "inline"], "status": ["status"],
                "report": ["report", "--out", str(base / "report")]}
        procs = {name: start(argv, big, env, args.timeout) for name, argv in jobs.items()}
        tables = []  # table's first call (it builds the index beside the others) and a later one
        for _ in range(2):
            tables.append(finish(start(["table", TABLE], big, env, args.timeout)))
        ended = {name: finish(job) for name, job in procs.items()}
        after = {p: fingerprint(p) for p in before}
        lost = sorted(str(p) for p in before if after[p] != before[p])
        states = {}
        for run_dir in stale:
            status = RunDir(run_dir).read_status()
            states[status.state if status else "none"] = states.get(status.state if status else "none", 0) + 1
        temps = sorted(str(p) for p in big.rglob("*") if any(m in p.name for m in TEMP_MARKERS))
        quiet = subprocess.run([sys.executable, str(REPO / "reproduce.py"), "table", TABLE, "--runs-dir", str(big)],
                               capture_output=True, text=True, env=env, cwd=REPO).stdout  # once all is still
        same_table = all(t["out"] == quiet for t in tables)

    ok = (not lost and not temps and same_table and states == {runs.INTERRUPTED: len(stale)}
          and all(not e["stuck"] for e in [*ended.values(), *tables]) and all(t["exit"] == 0 for t in tables)
          and ended["run"]["exit"] == 0 and ended["report"]["exit"] == 0)
    result = {
        "tool": "benchmarks/bench_stale_load.py", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "runs": args.runs, "stale": len(stale), "processes": ended,
        "table_calls_s": [t["seconds"] for t in tables], "table_exits": [t["exit"] for t in tables],
        "runs_changed": lost, "stale_states_after": states, "temp_files_left": temps,
        "table_same_as_when_still": same_table, "ok": ok,
    }
    for e in [*ended.values(), *tables]:
        e.pop("out")
    for name, e in ended.items():
        print(f"{name:<7} {e['seconds']:7.2f} s  exit {e['exit']}  {'STUCK' if e['stuck'] else ''}")
    print(f"table   first {tables[0]['seconds']:.2f} s, later {tables[1]['seconds']:.2f} s; same table as once all "
          f"is still: {same_table}")
    print(f"runs changed: {len(lost)}; stale runs now {states}; temp files left: {len(temps)}; ok: {ok}")
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main_bench())
