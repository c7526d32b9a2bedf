"""lm-eval's per-sample results, kept compactly beside a run's results: `eval/samples.json`.

For each task, the documents' ids in order and, per metric, one value per document (acc and acc_norm are 0/1):
{"format": 1, "tasks": {"arc_easy": {"doc_id": [0, 1, ...], "acc": [1.0, 0.0, ...], "acc_norm": [...]}}}.
The documents, prompts and responses are dropped (they are lm-eval's inputs, not results). The paired
bootstrap of report/tables/verdicts.py resamples documents from these lists. Torch-free.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

FORMAT = 1
SAMPLES_NAME = "samples.json"
SKIP_KEYS = {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics", "doc_hash",
             "prompt_hash", "target_hash"}


def samples_file(run_dir: str | os.PathLike) -> Path:
    """Where a run keeps its per-sample results (beside eval/results.json)."""
    return Path(run_dir) / "eval" / SAMPLES_NAME


def compact_samples(samples: dict[str, list[dict[str, Any]]] | None) -> dict[str, Any]:
    """lm-eval's `results["samples"]` reduced to per-task doc ids and per-metric numeric values."""
    tasks: dict[str, dict[str, list]] = {}
    for task, examples in sorted((samples or {}).items()):
        ordered = sorted(examples, key=lambda e: int(e.get("doc_id", 0)))
        metrics = sorted({k for e in ordered for k, v in e.items() if k not in SKIP_KEYS and _numeric(v)})
        body: dict[str, list] = {"doc_id": [int(e.get("doc_id", i)) for i, e in enumerate(ordered)]}
        for metric in metrics:
            body[metric] = [float(e[metric]) if _numeric(e.get(metric)) else None for e in ordered]
        tasks[task] = body
    return {"format": FORMAT, "tasks": tasks}


def _numeric(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


UNIT_METRICS = ("acc", "acc_norm")
"""Per-document metrics that are 0/1 scores, so lie in [0, 1]."""


def samples_shape_problem(data: Any) -> str | None:
    """Why `data` is not per-sample results of the compact form (module docstring), or None: the tasks a
    mapping of mappings, `doc_id` distinct integers, one value per document for every metric, each value finite
    or null, and 0/1 metrics in [0, 1]."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("tasks"), dict):
        return f"not per-sample results of format {FORMAT}"
    for task, body in data["tasks"].items():
        if not isinstance(body, dict) or not isinstance(body.get("doc_id"), list):
            return f"task {task!r} has no doc_id list"
        ids = body["doc_id"]
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids) or len(set(ids)) != len(ids):
            return f"task {task!r}: doc_id is not a list of distinct integers"
        for metric, values in body.items():
            if metric == "doc_id":
                continue
            if not isinstance(values, list) or len(values) != len(ids):
                return f"{task}/{metric} does not hold one value per document ({len(ids)})"
            for i, v in enumerate(values):
                if v is None:
                    continue
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    return f"{task}/{metric}[{i}] is {v!r}, not a finite number"
                if metric in UNIT_METRICS and not 0.0 <= v <= 1.0:
                    return f"{task}/{metric}[{i}] is {v!r}, outside [0, 1]"
    return None


def read_samples(run_dir: str | os.PathLike) -> dict[str, dict[str, list]] | None:
    """{task: {"doc_id": [...], metric: [...]}} of a run, or None when it kept none, the file is unreadable or not
    of the compact form (samples_shape_problem: the bootstrap then falls back to its t interval)."""
    from exoformer.io import read_regular

    path = samples_file(run_dir)
    try:
        data = json.loads(read_regular(path))
    except (OSError, ValueError):
        return None
    return None if samples_shape_problem(data) is not None else data["tasks"]
