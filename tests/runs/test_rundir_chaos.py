"""Chaos in a run directory: every file the reading verbs read, one at a time, truncated, made non-finite, replaced
by a symbolic link out of the runs root, by a FIFO, by a directory and by a 1 GB sparse file, then `table`, `diff`,
`claims`, `status`, `report` and `run` (the inline backend with stages that do no work). Each verb must end, within
seconds, in numbers equal to the untouched root's, DAMAGED (a cell not shown) or one `error:` line (exit 2), never a
traceback or a hang; nothing outside the runs root may change.

The runs are synthetic (tests/report/synthetic.py: the files a finished run has, no training): two rows of table1
at the smoke preset, with result rows, per-sample results, stage records and a metrics log. The cases run in one
child process (a hang fails the test through its timeout instead of blocking it); inside, each verb gets an alarm,
so a verb that blocks names itself.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRESET = "smoke"
RUN_FILES = ("STATUS", "spec.yaml", "identity.json", "provenance.json", "metrics.jsonl", "eval/long.jsonl",
             "eval/samples.json", "eval/validation.json", "stages/evaluate.json", "stages/validate.json", ".job.lock")
"""Files of the damaged run (relative to it) that the reading verbs read."""
ROOT_FILES = (".index/{spec}.json", "manifest.json")
"""Files of the runs root (relative to it) that the reading verbs read."""
KINDS = ("truncated", "nonfinite", "symlink", "fifo", "directory", "sparse")
VERB_ALARM_S = 120
"""A verb that takes longer is taken as hung (a blocked read uses no CPU; a contended CI machine may be slow)."""
N_DOCS = 40


# ------------------------------------------------------------------------------------------ the child process

def _build(root: Path) -> list[str]:
    """One finished smoke run (seed 42) of every table1 row, with every file a finished run has; returns their
    spec names in row order."""
    sys.path.insert(0, str(REPO / "tests"))  # also run as a child script, without pytest's paths
    from synthetic import make_run, registry

    from exoformer.registry.tables import TASKS
    from exoformer.rundir import RunDir

    names = []
    for k, row in enumerate(registry().tables["table1"].rows):
        name, acc = row.specs[0], 0.4 + 0.025 * k
        names.append(name)
        run = RunDir(make_run(root, name, preset=PRESET, accuracies={t: acc for t in TASKS}, ppl=14.0 + k,
                              curve=[(1000.0 * i, 5.0 - 0.1 * i) for i in range(1, 6)]))
        ones = round(acc * N_DOCS)
        values = [1.0 if i < ones else 0.0 for i in range(N_DOCS)]
        rows = [{**json.loads(line), "n": N_DOCS, "value": ones / N_DOCS} for line in
                run.eval_rows.read_text().splitlines()]
        run.write_rows(run.eval_rows, rows)
        tasks = {r["task"]: {"doc_id": list(range(N_DOCS))} for r in rows}
        for r in rows:
            tasks[r["task"]][r["metric"]] = values
        (run.eval_dir / "samples.json").write_text(json.dumps({"format": 1, "tasks": tasks}))
        run.record_stage("evaluate", {"stage": "evaluate", "result": {
            "metrics": {f"{r['task']}/{r['metric']}": r["value"] for r in rows}}})
        run.record_stage("validate", {"stage": "validate", "result": {"val_ppl": 14.0 + k}})
    return names


def _corrupt(path: Path, kind: str, outside: Path) -> None:
    """Damage one file (or create it damaged) in the way `kind` names."""
    data = path.read_bytes() if path.is_file() else b"{}\n"
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif kind == "nonfinite":
        import re

        text = data.decode("utf-8", errors="replace")
        word = ".nan" if path.suffix == ".yaml" else "NaN"
        path.write_text(re.sub(r"(?<![\w.\"])\d+(\.\d+)?(?![\w.\"])", word, text))
    elif kind == "symlink":
        target = outside / f"{path.parent.name}-{path.name}"
        if not target.exists():  # plausible content elsewhere: a reader must not follow it, a writer not write it
            target.write_bytes(data)
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "sparse":
        with open(path, "wb") as f:
            f.truncate(1 << 30)


class Hung(Exception):
    pass


def _on_alarm(signum, frame):
    raise Hung()


def _verb(argv: list[str]) -> dict:
    """Run one verb in this process: exit code, stdout, stderr, and the traceback when one escaped."""
    from exoformer.cli import main

    out, err = io.StringIO(), io.StringIO()
    result = {"argv": argv}
    signal.alarm(VERB_ALARM_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            result["rc"] = main(argv)
    except Hung:
        result["rc"] = "hung"
    except BaseException as error:  # noqa: BLE001 - the test reports it
        import traceback

        result["rc"] = "traceback"
        result["traceback"] = "".join(traceback.format_exception(error))[-1500:]
    finally:
        signal.alarm(0)
    result["stdout"], result["stderr"] = out.getvalue(), err.getvalue()
    return result


def _fake_stages() -> None:
    """Stages that do no work but write what a finished run has (the `run` verb must not train)."""
    from exoformer.runs import pipeline
    from exoformer.rundir import RunDir

    def validate(ctx):
        rd = RunDir(ctx.run_dir)
        rd.eval_dir.mkdir(parents=True, exist_ok=True)
        rd.validation.write_text(json.dumps({"rows": [{"task": "validation", "metric": "ppl", "value": 14.0}]}))
        return {"val_ppl": 14.0}

    for name in pipeline.STAGES:
        pipeline.STAGE_FUNCTIONS[name] = lambda ctx: {"fake": True}
    pipeline.STAGE_FUNCTIONS["validate"] = validate
    pipeline._final_checkpoint_problem = lambda rd, spec: None


def _verbs(root: Path, out: Path) -> list[list[str]]:
    reading = ["--runs-dir", str(root), "--preset", PRESET]
    return [["table", "table1", "--format", "csv", *reading], ["diff", "table1", "--bootstrap", "50", *reading],
            ["claims", "--bootstrap", "50", *reading], ["status", "--runs-dir", str(root)],
            ["report", "table1", "--out", str(out), *reading],
            ["run", "table1", "--preset", PRESET, "--backend", "inline", "--runs-dir", str(root)]]


def _snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size, p.read_bytes()) for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _restore(path: Path, pristine: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    if pristine.is_dir():
        shutil.copytree(pristine, path, symlinks=True)
    elif pristine.exists():
        shutil.copy2(pristine, path)


def child(work: Path) -> None:
    """Build the runs; for each kind of damage, damage one file in each of several runs (each run one file, so
    a verb sees them all at once), run every verb, and when a verb ends in an error line, put back the file it
    names and run it again, until it reads the rest. Results as JSON lines in work/results.jsonl: one line per
    (file, kind, verb)."""
    signal.signal(signal.SIGALRM, _on_alarm)
    os.environ["EXOFORMER_REPORTED"] = str(REPO / "results" / "paper" / "reported.yaml")
    import matplotlib.figure

    matplotlib.figure.Figure.savefig = lambda self, fname, **kw: fname.write(b"")  # pixels are not the point
    _fake_stages()
    pristine, outside = work / "pristine", work / "outside"
    outside.mkdir()
    names = _build(pristine)
    _verb(["status", "--runs-dir", str(pristine)])  # builds the run index, a file the verbs read too
    targets = []
    for k, file in enumerate([*RUN_FILES, *ROOT_FILES]):
        name = names[k % len(names)]
        run = next((pristine / name).iterdir()).relative_to(pristine)
        targets.append(file.format(spec=name) if file in ROOT_FILES else f"{run}/{file}")
    groups = [targets[: len(names)], targets[len(names):]]
    with (work / "results.jsonl").open("w") as log:
        baseline = _verb(_verbs(pristine, work / "out-baseline")[0])
        log.write(json.dumps({"case": "baseline", "result": baseline}) + "\n")
        for kind in KINDS:
            for group in groups:
                root = work / "root"
                shutil.rmtree(root, ignore_errors=True)
                shutil.copytree(pristine, root, symlinks=True)
                for rel in group:
                    _corrupt(root / rel, kind, outside)
                before = _snapshot(outside)
                for argv in _verbs(root, work / "out"):
                    damaged = list(group)
                    while True:
                        result = _verb(argv)
                        blamed = [rel for rel in damaged if result["rc"] == 2 and _names(result, root, rel)]
                        for rel in damaged:
                            if rel not in blamed and blamed:
                                continue  # this outcome belongs to the file the error line names
                            log.write(json.dumps({"case": f"{rel} {kind}", "result": result}) + "\n")
                        if not blamed:
                            break
                        for rel in blamed:  # read the others: put the named file back, run the verb again
                            _restore(root / rel, pristine / rel)
                            damaged.remove(rel)
                        if not damaged:
                            break
                    for rel in group:
                        if rel not in damaged:
                            _corrupt(root / rel, kind, outside)  # damaged again for the next verb
                log.write(json.dumps({"case": f"{kind} outside", "touched": before != _snapshot(outside)}) + "\n")
                log.flush()
                shutil.rmtree(root)  # a FIFO or a 1 GB file must not outlive its case


def _names(result: dict, root: Path, rel: str) -> bool:
    """Whether the verb's error line names the damaged file, or (for a run's file) its run directory."""
    text = result["stderr"]
    parts = rel.split("/")
    run_dir = str(root.joinpath(*parts[:2])) if rel not in ROOT_FILES and len(parts) > 2 else None
    return str(root / rel) in text or (run_dir is not None and f"{run_dir}:" in text)


# ------------------------------------------------------------------------------------------ the test

def _cells(text: str) -> dict[tuple[str, str], str]:
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return {}
    head = rows[0]
    return {(r[0], head[i]): v for r in rows[1:] for i, v in enumerate(r) if i < len(head)}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _verdict(result: dict, baseline: dict[tuple[str, str], str]) -> str | None:
    """Why one verb's outcome is not acceptable, or None."""
    rc = result["rc"]
    if rc in ("hung", "traceback"):
        return f"{rc}: {result.get('traceback', '')[-600:]}"
    if "Traceback" in result["stderr"]:
        return "a traceback on stderr"
    if rc == 2:
        errors = [line for line in result["stderr"].splitlines() if line.startswith("error: ")]
        return None if len(errors) == 1 else f"exit 2 without exactly one error line: {result['stderr'][-400:]}"
    if rc not in (0, 1):
        return f"exit {rc}: {result['stderr'][-400:]}"
    if result["argv"][0] == "table":
        for key, value in _cells(result["stdout"]).items():
            number = _number(value)
            if number is not None and key in baseline and _number(baseline[key]) != number:
                return f"cell {key} reads {value}, the untouched runs {baseline[key]!r}"
    return None


@pytest.mark.slow
def test_every_run_file_damaged_every_way_ends_right_damaged_or_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, __file__, str(tmp_path)], capture_output=True, text=True, timeout=900,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    baseline = _cells(lines[0]["result"]["stdout"])
    assert sum(_number(v) is not None for v in baseline.values()) > 50, lines[0]
    problems, table, seen = [], {}, set()
    for line in lines[1:]:
        if "touched" in line:
            if line["touched"]:
                problems.append(f"{line['case']}: a file outside the runs root changed")
            continue
        kind = line["case"].rsplit(" ", 1)[1]
        seen.add((line["case"], line["result"]["argv"][0]))
        why = _verdict(line["result"], baseline)
        cases, handled = table.get(kind, (0, 0))
        table[kind] = (cases + 1, handled + (why is None))
        if why:
            problems.append(f"{line['case']}: {' '.join(line['result']['argv'][:2])}: {why}")
    summary = "\n".join(f"{kind:<10} {cases:>4} cases {handled:>4} handled" for kind, (cases, handled) in table.items())
    print(summary)
    assert len(seen) == (len(RUN_FILES) + len(ROOT_FILES)) * len(KINDS) * 6, len(seen)
    assert not problems, "\n".join(problems[:20]) + f"\n({len(problems)} in all)\n{summary}"


if __name__ == "__main__":
    child(Path(sys.argv[1]))
