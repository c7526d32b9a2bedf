"""A run directory removed or replaced under a live job stops the job (never a partial SUCCEEDED, never a
recreated directory), and the temporary files of writes cut short are gone after the next start."""

from __future__ import annotations

import shutil

import pytest

from exoformer.cli import main
from exoformer.runs import pipeline, rundirs as runs
from exoformer.registry.registry import Registry
from exoformer.rundir import RunDir

TINY = ["--preset", "smoke", "--set", "train.steps=2"]


@pytest.fixture(scope="module")
def spec():
    return Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=2"])


def _save(ctx):
    import torch

    from exoformer.train.checkpoint import save_checkpoint

    save_checkpoint(RunDir(ctx.run_dir).checkpoints, 1, {"w": torch.zeros(1)}, keep=1)
    return {"step": 1}


def _removed(ctx):
    shutil.rmtree(ctx.run_dir)
    return _save(ctx)


def _removed_then_written(ctx):
    shutil.rmtree(ctx.run_dir)
    rd = RunDir(ctx.run_dir)
    rd.write_rows(rd.eval_rows, [{"task": "x", "metric": "acc", "value": 0.5}])  # an atomic write of results
    return {}


def _replaced(ctx):
    ctx.run_dir.rename(ctx.run_dir.with_name(ctx.run_dir.name + ".moved"))
    ctx.run_dir.mkdir()
    return {"step": 1}


@pytest.fixture()
def stages(monkeypatch):
    for name in pipeline.STAGES:
        monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, name, lambda ctx: {})
    monkeypatch.setattr(pipeline, "_final_checkpoint_problem", lambda rd, spec: None)
    return monkeypatch


@pytest.mark.parametrize("how", [_removed, _removed_then_written, _replaced])
@pytest.mark.parametrize("stage", ["train", "evaluate"])
def test_a_run_directory_gone_under_its_job_stops_it(tmp_path, spec, stages, how, stage):
    stages.setitem(pipeline.STAGE_FUNCTIONS, stage, how)
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    with pytest.raises(Exception, match="removed or replaced"):
        pipeline.run_pipeline(run_dir, spec, backend="inline")
    if how is not _replaced:
        assert not run_dir.exists()  # nothing recreated a partial directory
    else:
        assert sorted(p.name for p in run_dir.iterdir()) == []  # the new directory got nothing from the old job
    moved = run_dir.with_name(run_dir.name + ".moved")
    if moved.exists():
        assert runs.read_status(moved).state != runs.SUCCEEDED


def test_the_cli_says_it_in_one_line_and_a_plain_run_starts_over(tmp_path, capsys, spec, stages):
    stages.setitem(pipeline.STAGE_FUNCTIONS, "validate", _removed)
    argv = ["run", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--backend", "inline"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "removed or replaced while its job ran" in out
    assert not runs.run_dir_for(spec, tmp_path).exists()
    stages.setitem(pipeline.STAGE_FUNCTIONS, "validate", lambda ctx: {})
    assert main(argv) == 0 and runs.read_status(runs.run_dir_for(spec, tmp_path)).state == runs.SUCCEEDED


def test_temp_files_of_cut_writes_are_removed_when_the_job_starts(tmp_path, spec, stages):
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    rd = RunDir(run_dir)
    cut = [rd.checkpoints / ".step_00000002.pt.k3j_x9Qa.tmp", run_dir / ".STATUS.ab12cd34.tmp",
           rd.eval_dir / ".long.jsonl.zzzzzzzz.tmp"]
    for path in cut:
        path.write_bytes(b"\0" * 1024)
    kept = rd.checkpoints / "notes.tmp"  # not a name our writers use
    kept.write_text("mine")
    assert pipeline.run_pipeline(run_dir, spec, backend="inline") == pipeline.DONE
    assert not any(p.exists() for p in cut) and kept.exists()


def test_a_launch_removes_a_cut_manifest_write(tmp_path, capsys, spec, stages):
    (tmp_path / ".manifest.json.Ab3dE6gH.tmp").write_text("{")
    assert main(["run", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--backend", "inline"]) == 0
    assert not (tmp_path / ".manifest.json.Ab3dE6gH.tmp").exists()


SLOW_LAUNCHER = """
import sys, time
from exoformer.runs import pipeline
def slow(ctx):
    print("training", flush=True)
    time.sleep(120)
    return {}
for name in pipeline.STAGES:
    pipeline.STAGE_FUNCTIONS[name] = slow if name == "train" else (lambda ctx: {})
pipeline._final_checkpoint_problem = lambda rd, spec: None
from exoformer.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_specs_queued_behind_a_killed_launcher_stay_unrun(tmp_path, capsys):
    """`run table1 --jobs 1`-like: one spec runs, six wait; SIGKILL the launcher. The one that ran is INTERRUPTED
    (a plain run resumes it), the six that never started are un-run, not FAILED."""
    import json
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    launcher = subprocess.Popen([sys.executable, "-c", SLOW_LAUNCHER, "run", "table1", *TINY, "--runs-dir",
                                 str(tmp_path), "--backend", "inline"], stdout=subprocess.PIPE, text=True, env=env,
                                cwd=repo)
    try:
        for line in launcher.stdout:
            if "training" in line:
                break
        launcher.send_signal(signal.SIGKILL)
    finally:
        launcher.wait()
    assert main(["plan", "table1", *TINY, "--runs-dir", str(tmp_path), "--json"]) == 0
    actions = [s["action"] for s in json.loads(capsys.readouterr().out)["specs"]]
    assert actions == ["resume"] + ["run"] * (len(actions) - 1), actions
    main(["status", "table1", *TINY, "--runs-dir", str(tmp_path), "--json"])
    states = [json.loads(line)["state"] for line in capsys.readouterr().out.splitlines()]
    assert states == ["INTERRUPTED"] + ["NEW"] * (len(states) - 1), states
