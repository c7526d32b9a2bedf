"""lm-eval's per-sample results, kept compactly beside a run's results: `eval/samples.json`.

For each task, the documents' ids in order and, per metric, one value per document (acc and acc_norm are 0/1):
{"format": 1, "tasks": {"arc_easy": {"doc_id": [0, 1, ...], "acc": [1.0, 0.0, ...], "acc_norm": [...]}}}.
The documents, prompts and responses are dropped (they are lm-eval's inputs, not results). The paired
bootstrap of report/verdicts.py resamples documents from these lists. Torch-free.
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


def read_samples(run_dir: str | os.PathLike) -> dict[str, dict[str, list]] | None:
    """{task: {"doc_id": [...], metric: [...]}} of a run, or None when it kept none (or the file is unreadable)."""
    path = samples_file(run_dir)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    tasks = data.get("tasks") if isinstance(data, dict) else None
    return tasks if isinstance(tasks, dict) else None
