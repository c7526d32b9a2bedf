"""Verification of the run files a reading verb uses beside the result rows (exoformer/runs/row_integrity.py checks
those): a finished run whose per-sample results or metrics log disagree with what its stages wrote
reads DAMAGED, never a quieter number.

- `eval/samples.json` (the paired bootstrap's input): its sha256 equal to the one the evaluate stage recorded
  (`SAMPLES_DIGEST_KEY` in `stages/evaluate.json`: reordering a task's per-document scores keeps its count and
  mean, yet moves a paired interval); every value finite and in its metric's range, one value per document,
  and per task the document count and the mean of each metric equal to the result row's `n` and `value`
  (lm-eval's accuracy is the mean of the per-document scores). A run evaluated before the stage recorded the
  digest has none: its file is accepted on the other checks alone;
- `metrics.jsonl` (the loss curves): every line a JSON object (a finished run has no torn line: a resumed
  job drops one, exoformer/train/state.py), else the first damaged line is named `file:line`.

Pure functions over one run directory, and the run index's key of these files; torch-free.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from typing import Any

from exoformer.eval.samples import samples_file, samples_shape_problem
from exoformer.eval.stage import SAMPLES_DIGEST_KEY
from exoformer.io import read_regular
from exoformer.rundir import RunDir

_SHA256 = re.compile(r"\A[0-9a-f]{64}\Z")
MEAN_TOLERANCE = 1e-6
"""How far a task's per-sample mean may be from its result row (both are means of the same 0/1 scores)."""


def samples_problem(samples: Any, rows: list[dict[str, Any]], *, where: str) -> str | None:
    """Why per-sample results (`samples.json`'s parsed content) disagree with the evaluation rows, or None."""
    problem = samples_shape_problem(samples)
    if problem is not None:
        return f"{where}: {problem}"
    by_key = {(str(r.get("task")), str(r.get("metric"))): r for r in rows if isinstance(r, dict)}
    tasks = {str(r.get("task")) for r in rows if isinstance(r, dict)}
    for task, body in samples["tasks"].items():
        if task not in tasks:
            return f"{where}: task {task!r} has no result row"
        n = len(body["doc_id"])
        for metric, values in body.items():
            if metric == "doc_id":
                continue
            row = by_key.get((task, metric))
            if row is None:
                continue
            want_n = row.get("n")
            if isinstance(want_n, int) and not isinstance(want_n, bool) and want_n != n:
                return f"{where}: {task} has {n} documents but its result row says n = {want_n}"
            value = row.get("value")
            if any(v is None for v in values) or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            mean = math.fsum(values) / n if n else math.nan
            if not abs(mean - value) <= MEAN_TOLERANCE:
                return f"{where}: {task}/{metric} averages {mean:.6f} over its documents but its row says {value!r}"
    return None


def run_samples_problem(run: RunDir, eval_rows: list[dict[str, Any]], *,
                        recorded_sha256: Any = None) -> str | None:
    """samples_problem of a run's `eval/samples.json`, after its digest: `recorded_sha256` is what the evaluate
    stage recorded (`SAMPLES_DIGEST_KEY`); None for a run evaluated before it recorded one, whose file is then
    checked without it (and may be absent: a run that kept none)."""
    path = samples_file(run.path)
    if recorded_sha256 is not None and not (isinstance(recorded_sha256, str) and _SHA256.match(recorded_sha256)):
        return f"its evaluate stage record's {SAMPLES_DIGEST_KEY} is {recorded_sha256!r}, not a sha256 digest"
    if not os.path.lexists(path):
        return None if recorded_sha256 is None else f"{path} is missing but the evaluate stage recorded its sha256"
    try:
        raw = read_regular(path)
        data = json.loads(raw)
    except (OSError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else "is not JSON"
        return f"{path} {why}"
    if recorded_sha256 is not None and (got := hashlib.sha256(raw).hexdigest()) != recorded_sha256:
        return (f"{path} changed after evaluation: its sha256 is {got[:12]}..., the evaluate stage recorded "
                f"{recorded_sha256[:12]}...")
    return samples_problem(data, eval_rows, where=str(path))


def metrics_problem(run: RunDir) -> str | None:
    """The first damaged line of a finished run's metrics.jsonl as `file:line: why`, or None."""
    problems: list[str] = []
    for _ in run.numbered_metrics(problems=problems):
        pass
    return problems[0] if problems else None


def run_files_problem(run: RunDir, eval_rows: list[dict[str, Any]], *, samples_sha256: Any = None) -> str | None:
    """The first problem of the files of this module's docstring (a finished run's), or None. `samples_sha256`:
    the digest the evaluate stage recorded (None when it recorded none)."""
    return run_samples_problem(run, eval_rows, recorded_sha256=samples_sha256) or metrics_problem(run)


# ------------------------------------------------------------------------------------------ the run index

def key_paths(run: RunDir) -> list[str]:
    """The files this module verifies, which an index entry's key must cover too."""
    return [str(samples_file(run.path)), str(run.metrics_file)]


def file_stamp(path: str | os.PathLike) -> list[int]:
    """What an index key holds of one file: modification time, size and inode change time (an edit in place
    that keeps the size and sets the modification time back still changes the last; only the kernel sets it)."""
    try:
        st = os.lstat(path)
    except OSError:
        return [0, -1, 0]
    return [st.st_mtime_ns, st.st_size, st.st_ctime_ns]

