"""Exact resume: SIGTERM at a random step, resume, end bitwise equal to an uninterrupted run (CPU, fp32)."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from same_state import assert_same_tensors
from train_run_tiny import EXIT_PREEMPTED
from train_tiny import tiny_model, tiny_train

from exoformer.train.checkpoint import latest_checkpoint, load_checkpoint
from exoformer.train.loop import train

RUNNER = Path(__file__).parent / "train_run_tiny.py"
KILL_SEED = 25
"""Chooses the step after which SIGTERM is sent: seeded, so a failure names a step that reproduces it."""


def train_lines(run: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if k not in ("ms_per_step", "tokens_per_s")} for line in lines]


@pytest.mark.slow
def test_sigterm_at_random_step_then_resume_is_bitwise_exact(tiny_data, tmp_path):
    reference = tmp_path / "reference"
    result = train(tiny_model(), tiny_train(tiny_data), reference)
    assert result.step == 12 and not result.interrupted

    kill_after = random.Random(KILL_SEED).randint(1, 8)  # leaves slack before step 12 under load
    run = tmp_path / "killed"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    child = subprocess.Popen([sys.executable, str(RUNNER), str(tiny_data), str(run), "0.15"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and child.poll() is None:
        if metrics.exists() and sum('"train"' in line for line in metrics.read_text().splitlines()) >= kill_after:
            child.send_signal(signal.SIGTERM)
            break
        time.sleep(0.02)
    output, _ = child.communicate(timeout=300)
    assert child.returncode == EXIT_PREEMPTED, f"kill_after={kill_after}\n{output}"
    stopped_at = json.loads(output.split("RESULT ")[1])["step"]
    assert kill_after <= stopped_at < 12, output
    assert load_checkpoint(latest_checkpoint(run / "checkpoints"))["step"] == stopped_at

    resumed = subprocess.run([sys.executable, str(RUNNER), str(tiny_data), str(run)], env=env,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resuming at step {stopped_at}/12" in resumed.stdout

    ours = load_checkpoint(latest_checkpoint(run / "checkpoints"))
    theirs = load_checkpoint(latest_checkpoint(reference / "checkpoints"))
    assert ours["step"] == theirs["step"] == 12
    for key in ("model", "muon", "adamw", "loader", "tokens", "final_train_loss"):
        assert_same_tensors(ours[key], theirs[key], f"{key} (killed after {kill_after})")
    assert train_lines(run) == train_lines(reference)


def test_finished_run_started_again_does_nothing(tiny_data, tmp_path, capsys):
    train(tiny_model(), tiny_train(tiny_data, steps=3, val_every=0), tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "checkpoints").iterdir()}
    result = train(tiny_model(), tiny_train(tiny_data, steps=3, val_every=0), tmp_path)
    assert result.step == 3 and not result.interrupted
    assert "already finished" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "checkpoints").iterdir()} == before
