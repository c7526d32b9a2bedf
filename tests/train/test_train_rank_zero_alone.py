"""No rank waits past the collective timeout for rank 0 working alone (2 gloo ranks, a 4-second timeout).

Rank 0 alone prepares the data and writes each checkpoint; the other rank waits for it at the next meeting
point. Here the runner makes both phases 7 s slower, longer than the 4-s timeout allows, and the
run must still finish on both ranks: time spent `working_alone` does not count against the timeout, which
still bounds every collective (the gloo group is built with it)."""

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from test_train_ddp import free_port

from exoformer.train import distributed

RUNNER = Path(__file__).parent / "train_run_slow_rank_zero.py"
TIMEOUT_S, SLOW_S = 4, 7


@pytest.mark.timeout(300)
def test_a_slow_rank_zero_phase_longer_than_the_timeout_does_not_fail_the_run(tiny_data, tmp_path):
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", EXOFORMER_DIST_TIMEOUT_S=str(TIMEOUT_S))
        procs.append(subprocess.Popen([sys.executable, str(RUNNER), str(tiny_data), str(tmp_path / "run"),
                                       str(SLOW_S)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    try:
        outputs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    assert all("DONE 2" in text for text in outputs), outputs
    assert (tmp_path / "run" / "checkpoints" / "step_00000002.pt.sha256").is_file()


def test_the_group_timeout_is_explicit(monkeypatch):
    monkeypatch.delenv(distributed.TIMEOUT_ENV, raising=False)
    assert distributed._group_timeout() == timedelta(seconds=distributed.DEFAULT_TIMEOUT_S)
    monkeypatch.setenv(distributed.TIMEOUT_ENV, "42")
    assert distributed._group_timeout() == timedelta(seconds=42)
