"""Run state that is not model or optimiser: RNG states and the metrics log, both restorable exactly."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import numpy as np
import torch

from exoformer.io import atomic_write_text


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def rng_state() -> dict:
    """Python, numpy, torch and CUDA RNG states in types torch.load(weights_only=True) accepts."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


class MetricsLog:
    """Append-only `metrics.jsonl`, one JSON object per line, flushed per line.

    On start, lines after the step being resumed from (and any torn last line) are dropped, so after a
    resume the file equals what an uninterrupted run writes (timings aside). A damaged line (not UTF-8,
    not a JSON object, a non-integer step) is dropped too, with a warning naming file:line.
    """

    def __init__(self, path: str | Path, *, resume_step: int) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._truncate_after(resume_step)
        self._file = open(self.path, "a", encoding="utf-8")

    def _truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        torn = lines.pop() if lines else b""  # the bytes after the last newline: a write cut short, if any
        kept = []
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            record, problem = _parse_line(raw)
            if problem:
                warnings.warn(f"{self.path}:{number}: dropping a damaged metrics line ({problem})", stacklevel=3)
            elif record.get("step", 0) <= step:
                kept.append(raw.decode("utf-8"))
        record, _ = _parse_line(torn) if torn.strip() else (None, None)
        if record is not None and record.get("step", 0) <= step:
            kept.append(torn.decode("utf-8"))  # a complete last record that only lacks its newline
        atomic_write_text(self.path, "".join(f"{line}\n" for line in kept))

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _parse_line(raw: bytes) -> tuple[dict | None, str | None]:
    """(record, None) for a JSON object whose `step` (if any) is an integer, else (None, what is wrong)."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not UTF-8"
    except json.JSONDecodeError as error:
        return None, f"not JSON: {error.msg}"
    if not isinstance(record, dict):
        return None, f"a JSON {type(record).__name__}, not an object"
    step = record.get("step", 0)
    if isinstance(step, bool) or not isinstance(step, int):
        return None, f"step is {step!r}, not an integer"
    return record, None
