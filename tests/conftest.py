"""Every test chooses its own runs root: the caller's $EXOFORMER_RUNS_DIR (maybe a missing folder) never leaks in."""

from __future__ import annotations

import pytest

from exoformer.runs.rundirs import RUNS_ENV


@pytest.fixture(autouse=True)
def _no_runs_root_from_the_environment(monkeypatch):
    monkeypatch.delenv(RUNS_ENV, raising=False)
