"""Reading verbs on a large runs root cost what the runs they show cost (targets: table and diff <= 1.5x their
time on a root holding only the shown runs; `report` <= 10 s on 2 cores).

Builds two synthetic runs roots of finished run directories (SUCCEEDED, every result file and stage record,
an identity file, a short metrics.jsonl): BIG holds --runs directories over the seven seed-42 specs of Table 1,
of which those seven are current (the others are variants of them made with --set); SMALL holds only the
seven. Then times, in this process, `table table1`, `diff table1`, `status`, `claims` on both roots (best of
--repeat, after one warm-up call that builds the run index) and prints BIG / SMALL; then `report` on BIG in
absolute seconds (and the first, index-building call of `table` on BIG). A cProfile of `table` on BIG is
written with --profile.

    .venv/bin/python benchmarks/bench_reading.py [--runs 2000] [--repeat 3] [--profile table.prof]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from exoformer.cli import main  # noqa: E402
from exoformer.registry.registry import Registry  # noqa: E402
from exoformer.runs.rundirs import identity_for  # noqa: E402
from exoformer.registry.tables import TASKS  # noqa: E402
from exoformer.rundir import SUCCEEDED, RunDir, Status  # noqa: E402

RATIO_TARGET = 1.5
REPORT_TARGET_S = 10.0
TABLE = "table1"


def _write_run(run: RunDir, spec_data: dict, identity, rng: random.Random) -> None:
    run.create()
    run.spec_file.write_text(yaml.safe_dump(spec_data, sort_keys=False))
    run.write_identity(identity)
    run.write_provenance({"command": ["reproduce.py", "run", identity.spec]})
    rows = []
    for task in TASKS:
        acc = 0.3 + 0.2 * rng.random()
        metrics = {"acc": acc} if task == "winogrande" else {"acc": acc, "acc_norm": acc + 0.01}
        rows += [{"spec": identity.spec, "seed": identity.seed, "task": task, "metric": m, "value": v,
                  "stderr": 0.01, "n": 1000} for m, v in metrics.items()]
    run.write_rows(run.eval_rows, rows)
    ppl = 14 + rng.random()
    run.validation.write_text(json.dumps({"val_ppl": ppl, "rows": [
        {"spec": identity.spec, "seed": identity.seed, "task": "validation", "metric": "ppl", "value": ppl,
         "stderr": None, "n": 4096}]}))
    for stage in ("train", "validate", "evaluate", "analyse"):
        run.record_stage(stage, {"done": True})
    run.metrics_file.write_text("".join(json.dumps({"kind": "val", "step": s, "tokens": 1000 * s,
                                                    "val_loss": 4.0 - 0.1 * s}) + "\n" for s in range(1, 6)))
    run.write_status(Status(state=SUCCEEDED, stage="analyse"))


def build_roots(base: Path, n_runs: int) -> tuple[Path, Path, list[str]]:
    """(BIG, SMALL, the seven spec names): BIG with n_runs run directories, SMALL with the seven current ones."""
    registry = Registry()
    names = [row.specs[0] for row in registry.tables[TABLE].rows]
    rng = random.Random(0)
    big, small = base / "big", base / "small"
    resolved = {name: registry.resolve(name) for name in names}
    identities = {name: identity_for(registry, spec) for name, spec in resolved.items()}
    for i in range(n_runs):
        name = names[i % len(names)]
        spec, identity = resolved[name], identities[name]
        data = spec.to_dict()
        if i < len(names):
            for root in (big, small):
                _write_run(RunDir(root / name / spec.hash12), data, identity, rng)
            continue
        steps = 1000 + i  # a variant made with --set train.steps=N: its own hash (not resolved: 2,000 resolves)
        hash12 = f"{rng.getrandbits(48):012x}"
        variant = {**data, "train": {**data["train"], "steps": steps}, "hash": hash12 * 5}
        _write_run(RunDir(big / name / hash12), variant,
                   replace(identity, hash12=hash12, overrides={"train.steps": steps},
                           differs=(f"train.steps={steps} (paper {spec.train.steps})",)), rng)
    return big, small, names


def run_verb(argv: list[str]) -> float:
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(argv)
    return time.perf_counter() - start


def best(argv: list[str], repeat: int) -> float:
    return min(run_verb(argv) for _ in range(repeat))


def main_bench() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", default=None, metavar="FILE", help="write a cProfile of `table` on BIG")
    parser.add_argument("--keep", default=None, metavar="DIR",
                        help="build the roots in DIR and keep them; a DIR that holds them already is reused")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.keep or tmp)
        t0 = time.perf_counter()
        if args.keep and (base / "small").is_dir():
            big, small = base / "big", base / "small"
            print(f"reusing the run directories under {base}")
        else:
            big, small, names = build_roots(base, args.runs)
            print(f"built {args.runs} run directories ({len(names)} spec names, {len(names)} current) in "
                  f"{time.perf_counter() - t0:.1f} s")
        run_verb(["table", TABLE, "--runs-dir", str(small)])  # imports, registry caches
        first = run_verb(["table", TABLE, "--runs-dir", str(big)])  # builds BIG's run index
        print(f"table {TABLE} on BIG, first call (builds the run index): {first:.2f} s")
        ok = True
        for verb in (["table", TABLE], ["diff", TABLE], ["status"], ["claims"]):
            on_small = best([*verb, "--runs-dir", str(small)], args.repeat)
            on_big = best([*verb, "--runs-dir", str(big)], args.repeat)
            ratio = on_big / on_small
            judged = verb[0] in ("table", "diff")
            verdict = ("ok" if ratio <= RATIO_TARGET else "OVER") if judged else "shows every run: not judged"
            ok &= not judged or ratio <= RATIO_TARGET
            print(f"{' '.join(verb):<14} small {on_small * 1000:8.1f} ms  big {on_big * 1000:8.1f} ms  "
                  f"ratio {ratio:5.2f}x (target <= {RATIO_TARGET}x: {verdict})")
        report = best(["report", "--runs-dir", str(big), "--out", str(base / "report")], 1)
        ok &= report <= REPORT_TARGET_S
        print(f"report on BIG: {report:.2f} s (target <= {REPORT_TARGET_S:g} s: "
              f"{'ok' if report <= REPORT_TARGET_S else 'OVER'})")
        if args.profile:
            import cProfile

            with contextlib.redirect_stdout(io.StringIO()):
                cProfile.runctx("main(['table', TABLE, '--runs-dir', str(big)])", globals(),
                                {"main": main, "TABLE": TABLE, "big": big}, args.profile)
            print(f"profile of table on BIG: {args.profile}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main_bench())
