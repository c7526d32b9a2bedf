"""Environment variables set for the length of a block and restored afterwards (evaluation's offline flags,
the thread count, quiet progress bars and the malloc settings that local jobs inherit)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

QUIET_PROGRESS_ENV = {"TQDM_DISABLE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
"""tqdm's and datasets' own switches for their progress bars, both read when the library is imported, so they are
set in the environment a job process starts with: a run's log keeps our progress lines
(exoformer/train/progress.py), not lm-eval's and datasets' bars."""


def quiet_progress_env() -> dict[str, str]:
    """QUIET_PROGRESS_ENV, where the user has not set one of its variables already (theirs wins)."""
    return {key: os.environ.get(key, value) for key, value in QUIET_PROGRESS_ENV.items()}


GLIBC_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024), "MALLOC_TRIM_THRESHOLD_": str(4 * 1024 ** 3)}
"""glibc malloc settings for a job process, read once when it starts: a CPU training step allocates and frees the
same multi-megabyte tensors, which glibc's defaults would map afresh (and the kernel zero) every step. Serving
blocks up to 32 MiB from a heap that is never trimmed keeps those pages; the trim threshold alone would freeze the
mmap threshold at 128 KiB, so both are set together (benchmarks/bench_main_job.py measures the effect). Other C
libraries ignore these variables."""


def glibc_malloc_env() -> dict[str, str]:
    """GLIBC_MALLOC_ENV, unless the user set either variable (then theirs, both as they are: the pair only works
    together)."""
    if any(key in os.environ for key in GLIBC_MALLOC_ENV):
        return {}
    return dict(GLIBC_MALLOC_ENV)


@contextlib.contextmanager
def temporary_env(updates: Mapping[str, str]) -> Iterator[None]:
    """Set `updates` in os.environ; on exit put back the previous values (unset keys are removed again)."""
    saved = {key: os.environ.get(key) for key in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
