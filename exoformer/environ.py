"""Environment variables set for the length of a block and restored afterwards (evaluation's offline flags,
the thread count that local jobs inherit)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


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
