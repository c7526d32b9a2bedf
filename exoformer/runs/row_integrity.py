"""Is what a finished run's files say still what its stages recorded? A run whose result rows were edited after
the fact reads DAMAGED in every reading verb, and none of its numbers is shown.

A run is damaged when (checked in this order, the first problem found is its reason):
- its identity's spec is not the directory it lives in (`<root>/<name>/<hash12>/`);
- a result row's value is not a finite number, or is outside its metric's range (`RANGES`: accuracies are
  fractions in [0, 1], perplexities >= 1, losses >= 0);
- two rows of the run name the same (task, metric): a duplicate, or a conflict when their values differ;
- a row disagrees with the stage record that wrote it (`stages/evaluate.json` metrics,
  `stages/validate.json` val_ppl / val_loss / val_ppl_ce), or a recorded metric has no row;
- its per-sample results differ from the sha256 the evaluate stage recorded of them, or they or its metrics
  log disagree with the rows (exoformer/runs/verify.py; a run evaluated before the digest was recorded is
  checked without it).
The rows are read by the one strict reader (RunDir.result_files), so a file the reading verbs could not read
is a reason too. The run index (exoformer/runs/run_index.py) asks once per change of a run's files.
Torch-free; reads only the run directory.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from exoformer.errors import UserError
from exoformer.rundir import DAMAGED, SUCCEEDED, RunDir
from exoformer.runs.verify import SAMPLES_DIGEST_KEY, run_files_problem

RANGES = {"acc": (0.0, 1.0), "acc_norm": (0.0, 1.0), "ppl": (1.0, math.inf), "ppl_ce": (1.0, math.inf),
          "loss": (0.0, math.inf), "loss_ce": (0.0, math.inf)}
"""metric -> (low, high), inclusive; other metrics need only be finite."""
VALIDATION_RECORD = {"ppl": "val_ppl", "loss": "val_loss", "ppl_ce": "val_ppl_ce"}
"""validation row metric -> key of the validate stage's record."""
RELATIVE = 1e-9


def integrity_problem(run: RunDir, spec_name: str) -> str | None:
    """What makes the run's rows untrustworthy (one line), or None when they are what its stages recorded.
    `spec_name`: the spec its identity names."""
    if run.path.parent.name != spec_name:
        return f"its identity names spec {spec_name!r} but the run lives under {run.path.parent.name!r}"
    try:
        files = run.result_files(spec_name)
    except UserError as err:
        return f"{run.display(Path(err.where or ''))}: {err.problem}"
    seen: dict[tuple[str, str], Any] = {}
    for row in (row for rows in files.values() for row in rows):
        key = (str(row.get("task")), str(row.get("metric")))
        value = row.get("value")
        if value is None and key[0] != "validation":
            continue  # lm-eval has no value for this metric (shown "no value")
        problem = _out_of_range(key, value)
        if problem:
            return problem
        if key in seen:
            what = "duplicate" if seen[key] == value else f"conflicting ({seen[key]!r} and {value!r})"
            return f"{what} rows for {key[0]}/{key[1]}"
        seen[key] = value
    eval_values = {f"{r.get('task')}/{r.get('metric')}": r.get("value") for r in files.get("eval_rows", [])}
    validation_values = {key: seen[("validation", metric)] for metric, key in VALIDATION_RECORD.items()
                         if ("validation", metric) in seen}
    return (_disagrees(run, "evaluate", eval_values) or _disagrees(run, "validate", validation_values)
            or run_files_problem(run, files.get("eval_rows", []), samples_sha256=_recorded_samples_digest(run)))


def _recorded_samples_digest(run: RunDir) -> Any:
    """The sha256 of eval/samples.json the evaluate stage recorded; None without one (a run evaluated before the
    stage recorded it, or no evaluate record: its per-sample file is then checked without a digest)."""
    if not run.stage_done("evaluate"):
        return None
    try:
        record = (run.read_json(run.stage_file("evaluate")) or {}).get("result") or {}
    except (UserError, AttributeError):
        return None  # _disagrees has named the unreadable record already
    return record.get(SAMPLES_DIGEST_KEY) if isinstance(record, dict) else None


def _out_of_range(key: tuple[str, str], value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"{key[0]}/{key[1]} is {value!r}, not a finite number"
    low, high = RANGES.get(key[1].partition(",")[0], (-math.inf, math.inf))
    if not low <= value <= high:
        return f"{key[0]}/{key[1]} is {value!r}, outside its range [{low:g}, {high:g}]"
    return None


def _disagrees(run: RunDir, stage: str, rows: dict[str, Any]) -> str | None:
    """The first value where the rows and the stage record differ (the record was written with the rows)."""
    if not run.stage_done(stage):
        return None
    try:
        record = (run.read_json(run.stage_file(stage)) or {}).get("result") or {}
    except (UserError, AttributeError):
        return f"its {stage} stage record cannot be read"
    recorded = record.get("metrics") if stage == "evaluate" else {k: record.get(k) for k in rows}
    if not isinstance(recorded, dict):
        return None
    for key, value in recorded.items():
        if value is None:
            continue
        if key not in rows:
            return f"the {stage} stage recorded {key} = {value!r} but no row holds it"
        got = rows[key]
        if not isinstance(got, (int, float)) or abs(got - value) > RELATIVE * max(1.0, abs(value)):
            return f"{key} reads {got!r} but the {stage} stage recorded {value!r}"
    return None


def reading_state(run: RunDir, state: str | None, spec_name: str) -> tuple[str | None, str | None]:
    """(state, reason) as the reading verbs show a run: a SUCCEEDED run whose rows fail the checks is DAMAGED
    (`spec_name`: the spec its identity names). Other states pass unchanged."""
    if state != SUCCEEDED:
        return state, None
    problem = integrity_problem(run, spec_name)
    if problem is None:
        return state, None
    return DAMAGED, f"{problem}; its numbers are not shown (fix: re-run it with --force)"
