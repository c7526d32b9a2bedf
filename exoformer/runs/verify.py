"""Verification of the run files a reading verb uses beside the result rows (exoformer/runs/row_integrity.py checks
those): a finished run whose per-sample results, identity or metrics log disagree with what its stages wrote
reads DAMAGED, never a quieter number.

- `eval/samples.json` (the paired bootstrap's input): every value finite and in its metric's range, one value
  per document, and per task the document count and the mean of each metric equal to the result row's `n` and
  `value` (lm-eval's accuracy is the mean of the per-document scores);
- `identity.json` (what decides comparability): spec, seed, preset, hash, source and scoring equal to the
  spec file's, each `--set` it records held by the spec file, the suite equal to the evaluate stage record's,
  and `differs` consistent with its own hashes (the paper's recipe differs in nothing; a run of another preset,
  or with a `--set` of a compared field, differs in something, and one of another preset names it first);
- `metrics.jsonl` (the loss curves): every line a JSON object (a finished run has no torn line: a resumed
  job drops one, exoformer/train/state.py), else the first damaged line is named `file:line`.

The run index's key and seal (exoformer/runs/run_index.py): a file's key holds its inode change time, which an
edit in place changes even when the size stays and the modification time is set back; an entry carries a seal
over its key and its fields, so an entry edited by hand is rebuilt from the run's files. Pure functions over
one run directory; torch-free.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from typing import Any

from exoformer.errors import UserError
from exoformer.eval.samples import samples_file, samples_shape_problem
from exoformer.io import read_regular
from exoformer.run_identity import CHECKPOINT, OURS, flat_fields, scoring_of
from exoformer.rundir import RunDir

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


def run_samples_problem(run: RunDir, eval_rows: list[dict[str, Any]]) -> str | None:
    """samples_problem of a run's `eval/samples.json` (None when it kept none)."""
    path = samples_file(run.path)
    if not os.path.lexists(path):
        return None
    try:
        data = json.loads(read_regular(path))
    except (OSError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else "is not JSON"
        return f"{path} {why}"
    return samples_problem(data, eval_rows, where=str(path))


def _same(a: Any, b: Any) -> bool:
    def norm(value: Any) -> Any:
        return [norm(v) for v in value] if isinstance(value, (list, tuple)) else value

    return norm(a) == norm(b)


def identity_problem(run: RunDir, spec_data: dict[str, Any]) -> str | None:
    """Why the run's identity file disagrees with its spec file and stage records, or None (also without one)."""
    try:
        identity = run.identity()
    except UserError as err:
        return err.problem
    if identity is None:
        return None
    where = run.display(run.identity_file)
    source = str(spec_data.get("source") or OURS)
    recorded = {"spec": identity.spec, "seed": identity.seed, "preset": identity.preset, "source": identity.source}
    held = {"spec": spec_data.get("name"), "seed": spec_data.get("seed"), "preset": spec_data.get("preset"),
            "source": source}
    if source == CHECKPOINT:
        recorded.update(as_row=identity.as_row, table=identity.table)
        held.update(as_row=spec_data.get("as_row"), table=spec_data.get("table"))
    for name, value in recorded.items():
        if not _same(value, held[name]):
            return f"{where} says {name} {value!r} but the spec file says {held[name]!r}"
    full_hash = spec_data.get("hash")
    if isinstance(full_hash, str) and not full_hash.startswith(identity.hash12):
        return f"{where} says hash {identity.hash12!r} but the spec file says {full_hash[:12]!r}"
    scoring = scoring_of(spec_data)
    for key, value in identity.scoring.items():
        if key in scoring and not _same(value, scoring[key]):
            return f"{where} says scoring {key} {value!r} but the spec file says {scoring[key]!r}"
    fields = flat_fields(spec_data)
    for key, value in identity.overrides.items():
        if key in fields and not _same(value, fields[key]):
            return f"{where} records --set {key}={value!r} but the spec file holds {fields[key]!r}"
    if identity.reference_hash12 is not None:
        is_recipe = identity.hash12 == identity.reference_hash12
        compared = identity.preset_hash12 != identity.reference_hash12 or any(k in fields for k in identity.overrides)
        if identity.source == OURS and is_recipe == bool(identity.differs) and (is_recipe or compared):
            said = "nothing" if not identity.differs else repr(list(identity.differs))
            return (f"{where} says the run differs from the paper's recipe in {said}, but its hash "
                    f"{identity.hash12} {'is' if is_recipe else 'is not'} the recipe's {identity.reference_hash12}")
        other_preset = identity.preset_hash12 is not None and identity.preset_hash12 != identity.reference_hash12
        if other_preset and not (identity.differs and identity.differs[0].startswith(f"preset {identity.preset} ")):
            return f"{where} does not name preset {identity.preset}, which is not the paper's recipe's"
    if run.stage_done("evaluate"):
        try:
            record = (run.read_json(run.stage_file("evaluate")) or {}).get("result") or {}
        except (UserError, AttributeError):
            return "its evaluate stage record cannot be read"
        suite = record.get("suite") if isinstance(record, dict) else None
        if suite is not None and identity.suite and suite != identity.suite:
            return f"{where} says suite {identity.suite!r} but the evaluate stage ran {suite!r}"
    return None


def metrics_problem(run: RunDir) -> str | None:
    """The first damaged line of a finished run's metrics.jsonl as `file:line: why`, or None."""
    problems: list[str] = []
    for _ in run.numbered_metrics(problems=problems):
        pass
    return problems[0] if problems else None


def run_files_problem(run: RunDir, eval_rows: list[dict[str, Any]], spec_data: dict[str, Any]) -> str | None:
    """The first problem of the files of this module's docstring (a finished run's), or None; `spec_data` is its
    spec file as the run index read it."""
    return run_samples_problem(run, eval_rows) or identity_problem(run, spec_data) or metrics_problem(run)


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


SEAL_VERSION = "exoformer-run-index-seal-1"


def seal(key: Any, info: Any) -> str:
    """The seal of an index entry: a digest of its key and fields (an entry edited by hand no longer matches)."""
    text = json.dumps([SEAL_VERSION, key, info], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def sealed(entry: Any) -> bool:
    """Whether a cached index entry still carries the seal of its own key and fields."""
    return isinstance(entry, dict) and entry.get("seal") == seal(entry.get("key"), entry.get("info"))
