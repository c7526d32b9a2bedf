"""Every run under a runs root as one pandas long table (spec, seed, preset, task, metric, value, stderr, n).

Sources per run directory `<root>/<spec>/<hash12>/` (docs/architecture.md "Runs"): `spec.yaml` (identity),
`eval/long.jsonl` (lm-eval rows), `eval/validation.json` (rows task "validation", metrics ppl/loss) and,
when present, `analysis/long.jsonl` (analysis rows in the same layout). Smoke-suite task names
(`smoke_arc_easy`) are reported under the paper task they mirror (`arc_easy`); the `suite` column keeps
which one it was. Torch-free: `table` and `diff` answer in well under a second.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from exoformer.errors import UserError

COLUMNS = ("spec", "seed", "preset", "task", "metric", "value", "stderr", "n")
EXTRA_COLUMNS = ("suite", "hash12", "run_dir")
ROW_FILES = ("eval/long.jsonl", "analysis/long.jsonl")
VALIDATION_FILE = "eval/validation.json"
SMOKE_PREFIX = "smoke_"


@dataclass(kw_only=True, slots=True, frozen=True)
class RunInfo:
    """Identity and state of one run directory."""

    path: Path
    spec: str
    seed: int
    preset: str
    hash12: str
    suite: str
    state: str | None
    """STATUS state (PENDING, RUNNING, SUCCEEDED, FAILED) or None when there is no STATUS file."""

    @property
    def has_eval(self) -> bool:
        return any((self.path / name).is_file() for name in (*ROW_FILES, VALIDATION_FILE))


def read_state(run_dir: Path) -> str | None:
    """The state word of STATUS: JSON {"state": ...} (docs/architecture.md) or a bare first word."""
    path = run_dir / "STATUS"
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return text.split()[0] if text else None
    return data.get("state") if isinstance(data, dict) else None


def find_runs(runs_root: str | os.PathLike, *, preset: str | None = None) -> list[RunInfo]:
    """Run directories (those holding spec.yaml) under `runs_root`, optionally of one preset, sorted."""
    root = Path(runs_root)
    if not root.is_dir():
        return []
    runs = []
    for spec_file in sorted(root.glob("*/*/spec.yaml")):
        run_dir = spec_file.parent
        try:
            data = yaml.safe_load(spec_file.read_text(encoding="utf-8"))
        except yaml.YAMLError as err:
            raise UserError(f"spec.yaml is not valid YAML ({err.__class__.__name__})", where=str(spec_file),
                            fix="restore it from the registry: the run directory is damaged") from None
        if not isinstance(data, dict) or "name" not in data:
            raise UserError("spec.yaml has no name", where=str(spec_file), fix="the run directory is damaged")
        info = RunInfo(path=run_dir, spec=str(data["name"]), seed=int(data.get("seed", 0)),
                       preset=str(data.get("preset", "")), hash12=run_dir.name,
                       suite=str((data.get("eval") or {}).get("suite", "")), state=read_state(run_dir))
        if preset is None or info.preset == preset:
            runs.append(info)
    return runs


def skipped_stages(run_dir: Path) -> list[str]:
    """Stages STATUS records as skipped (their package was not available when the job ran)."""
    try:
        data = json.loads((run_dir / "STATUS").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return []
    skipped = data.get("skipped") if isinstance(data, dict) else None
    return [str(s) for s in skipped] if isinstance(skipped, list) else []


def check_outputs(run: RunInfo) -> None:
    """A finished evaluation whose output is missing is an error; an unfinished or skipped one is "not run"."""
    for stage, output in (("evaluate", ROW_FILES[0]), ("validate", VALIDATION_FILE)):
        if (run.path / "stages" / f"{stage}.json").is_file() and not (run.path / output).is_file():
            raise UserError(f"the {stage} stage finished but {output} is missing", where=str(run.path),
                            fix=f"re-run it: reproduce.py run {run.spec} --force")
    if run.state == "SUCCEEDED" and not run.has_eval and not {"evaluate", "validate"} & set(skipped_stages(run.path)):
        raise UserError("the run SUCCEEDED but has no eval results (eval/long.jsonl, eval/validation.json)",
                        where=str(run.path), fix=f"re-run it: reproduce.py run {run.spec} --force")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise UserError("not a JSON line", where=f"{path}:{number}",
                            fix="re-run the stage that wrote it (run TARGET --force)") from None
        if not isinstance(row, dict) or not {"task", "metric", "value"} <= set(row):
            raise UserError("a result row needs task, metric and value", where=f"{path}:{number}",
                            fix="re-run the stage that wrote it (run TARGET --force)")
        rows.append(row)
    return rows


def run_rows(run: RunInfo) -> list[dict[str, Any]]:
    """All result rows of one run, in the long layout plus suite / hash12 / run_dir."""
    rows: list[dict[str, Any]] = []
    for name in ROW_FILES:
        path = run.path / name
        if path.is_file():
            found = _read_jsonl(path)
            if not found and name == ROW_FILES[0]:
                raise UserError("the run has no evaluation results (empty file)", where=str(path),
                                fix=f"re-run its evaluation: reproduce.py run {run.spec} --force")
            rows.extend(found)
    val = run.path / VALIDATION_FILE
    if val.is_file():
        try:
            rows.extend(json.loads(val.read_text(encoding="utf-8")).get("rows", []))
        except (json.JSONDecodeError, AttributeError):
            raise UserError("not a validation record", where=str(val),
                            fix=f"re-run its validation: reproduce.py run {run.spec} --force") from None
    out = []
    for row in rows:
        task = str(row["task"])
        out.append({"spec": run.spec, "seed": run.seed, "preset": run.preset,
                    "task": task.removeprefix(SMOKE_PREFIX), "metric": str(row["metric"]),
                    "value": _float(row.get("value")), "stderr": _float(row.get("stderr")), "n": row.get("n"),
                    "suite": run.suite, "hash12": run.hash12, "run_dir": str(run.path)})
    return out


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def collect(runs_root: str | os.PathLike, *, preset: str | None = None,
            specs: list[str] | None = None) -> pd.DataFrame:
    """One long table of every run's results (COLUMNS + EXTRA_COLUMNS), optionally of one preset / these specs.

    A run that SUCCEEDED but has no evaluation output is an error (its results were lost); an unfinished
    run simply contributes no rows (its cells read "not run").
    """
    wanted = set(specs) if specs is not None else None
    rows: list[dict[str, Any]] = []
    for run in find_runs(runs_root, preset=preset):
        if wanted is not None and run.spec not in wanted:
            continue
        check_outputs(run)
        rows.extend(run_rows(run))
    return pd.DataFrame(rows, columns=[*COLUMNS, *EXTRA_COLUMNS])
