"""Evaluation: the lm-eval adapter (`ExoLM`), task suites, the evaluate stage, and `prefetch`.

Names are imported lazily, so `import exoformer.eval` pulls in neither torch nor lm-eval.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ExoLM": "exoformer.eval.lm",
    "task_configs": "exoformer.eval.suites",
    "PAPER_TASKS": "exoformer.eval.suites",
    "SUITES": "exoformer.eval.suites",
    "evaluate": "exoformer.eval.run",
    "long_rows": "exoformer.eval.run",
    "prefetch": "exoformer.eval.prefetch",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'exoformer.eval' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
