"""benchmarks/paper_shape_steps.py at one layer: the same rows (real train loop, checkpoint, resume) in CI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_one_layer_rows_train_repeat_and_resume(tmp_path):
    out = tmp_path / "rows.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "paper_shape_steps.py"),
                           "--specs", "dynamic-e-exoformer-s42", "--layers", "1", "--width", "64", "--heads", "4",
                           "--vocab", "4096", "--seq", "32", "--threads", "1", "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    rows = {r["precision"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"official-pure-bf16", "fp32"}, done.stderr[-2000:]
    for row in rows.values():
        assert "error" not in row, row
        assert row["shape"] == "1x64" and row["finite"] and row["repeat_equal"]
        assert row["s_per_step"] > 0 and row["checkpoint_mb"] > 0 and row["save_s"] > 0 and row["load_s"] > 0
        assert row["peak_rss_gb"] > 0 and row["cpu_hours_10b"] > 0
        assert (row["gpu_hours_h100"] is None) == (row["precision"] == "fp32")  # the cost model prices bf16
        assert row["precision"] == "fp32" or row["gpu_hours_h100"] > 0
        assert row["resume"] == "equal", row["resume"]
        assert f"{row['precision']:<18}" in done.stdout
    assert done.returncode == 0, done.stdout[-2000:]
