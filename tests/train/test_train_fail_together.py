"""A rank that fails before the first barrier stops every rank at once, each with its error (2 gloo ranks).

Without the shared failure key the waiting rank sits in the process-group rendezvous (failure before the
group starts) or gets only gloo's "Connection reset by peer" (failure before the first barrier), for up to
the distributed timeout; the communicate() timeout below is far shorter than that timeout (set to 600 s here
so that a regression cannot hide behind it) and far longer than the seconds the stop takes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_train_ddp import free_port, losses
from train_tiny import tiny_model, tiny_train

from exoformer.train.loop import train

RUNNER = Path(__file__).parent / "train_run_failing_rank.py"


def run_two_ranks(data: Path, out: Path, failing: int, where: str) -> list[tuple[int, str]]:
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", EXOFORMER_DIST_TIMEOUT_S="600")
        procs.append(subprocess.Popen([sys.executable, str(RUNNER), str(data), str(out), str(failing), where],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        outputs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert not any("WATCHER ALIVE" in text for text in outputs), outputs  # no thread left inside a store call
    return [(p.returncode, text) for p, text in zip(procs, outputs)]


def error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("ERROR ")]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("failing", [0, 1])
def test_a_rank_failing_before_the_group_starts_stops_the_other(tiny_data, tmp_path, failing):
    results = run_two_ranks(tiny_data, tmp_path / "run", failing, "before-group")
    assert [code for code, _ in results] == [3, 3], results
    own = error_line(results[failing][1])
    other = error_line(results[1 - failing][1])
    assert own.startswith("ERROR UserError: ") and "this rank cannot start" in own, own
    assert other.startswith(f"ERROR PeerFailed: stopping rank {1 - failing} because rank {failing} failed: "
                            "UserError: ") and "this rank cannot start" in other, other


@pytest.mark.timeout(300)
def test_rank_zero_failing_before_the_first_barrier_stops_the_waiting_rank_with_its_message(tiny_data, tmp_path):
    results = run_two_ranks(tiny_data, tmp_path / "run", 0, "before-barrier")
    assert [code for code, _ in results] == [3, 3], results
    own = error_line(results[0][1])
    assert own.startswith("ERROR UserError: ") and "data is neither a known name nor an existing directory" in own
    other = error_line(results[1][1])
    assert other.startswith("ERROR PeerFailed: stopping rank 1 because rank 0 failed: UserError: ")
    assert "data is neither a known name nor an existing directory" in other, other
    assert not (tmp_path / "run" / "checkpoints").exists() or not list((tmp_path / "run" / "checkpoints").iterdir())


@pytest.mark.timeout(300)
def test_ranks_that_do_not_fail_train_through_the_shared_store_as_one_process_does(tiny_data, tmp_path):
    """The group built on the shared store is a plain gloo group: same losses as 1 process (tolerance as in
    test_train_ddp.py: only the order of fp32 additions differs)."""
    results = run_two_ranks(tiny_data, tmp_path / "run", -1, "nowhere")
    assert [code for code, _ in results] == [0, 0], results
    assert "2 rank(s)" in results[0][1] and all("DONE" in text for _, text in results)
    train(tiny_model(), tiny_train(tiny_data, steps=2, val_every=0), tmp_path / "single")
    assert len(losses(tmp_path / "run")) == 2
    assert losses(tmp_path / "run") == pytest.approx(losses(tmp_path / "single"), rel=1e-4, abs=1e-5)
