"""Every test chooses its own runs root: the caller's $EXOFORMER_RUNS_DIR (maybe a missing folder) never leaks in.

Real smoke runs that several modules read are trained once per session here (tests/smoke_runs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from exoformer.runs.rundirs import RUNS_ENV
from smoke_runs import train_main_job


@pytest.fixture(scope="session", autouse=True)
def _run_index_cache_of_the_session(tmp_path_factory):
    """The run index lives in the user's cache directory (exoformer/rundir.py index_dir): tests, and the CLI
    processes they start, keep theirs under a temporary $XDG_CACHE_HOME, never in the real ~/.cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield


@pytest.fixture(autouse=True)
def _no_runs_root_from_the_environment(monkeypatch):
    monkeypatch.delenv(RUNS_ENV, raising=False)


@pytest.fixture(scope="session")
def smoke_main_job(tmp_path_factory) -> Path:
    """A runs root holding the README's main job in the smoke preset, trained once per session through the CLI
    (tests/smoke_runs.py train_main_job: `run table1` and e-exoformer-no-anchor-norm-s42, each `tiny()`).
    Shared: read it as it is; a test that writes into a runs root works on `copy_root(smoke_main_job, ...)`."""
    return train_main_job(tmp_path_factory.mktemp("smoke-main-job"))
