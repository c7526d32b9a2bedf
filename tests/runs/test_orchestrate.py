"""exoformer.runs.orchestrate.run_target, `run` as one call, on the inline backend with stand-in stages: what it
returns and its exit status for a run that succeeds, one skipped, one that fails and one stopped by Ctrl-C."""

from __future__ import annotations

import json

import pytest

from exoformer.registry.spec import STAGES
from exoformer.runs import pipeline, rundirs as runs
from exoformer.runs.orchestrate import INTERRUPTED_EXIT, run_target


@pytest.fixture
def stages(monkeypatch):
    for name in STAGES:
        monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, name, lambda ctx: {})
    monkeypatch.setattr(pipeline, "_final_checkpoint_problem", lambda rd, spec: None)  # the stand-ins save none
    return monkeypatch


def test_a_run_then_the_same_call_skips_it(tmp_path, stages):
    decided, done = [], []
    result = run_target("base-s42", preset="smoke", overrides=["train.steps=3"], backend="inline",
                        runs_root=tmp_path, on_decided=lambda planned, backend: decided.append((planned, backend)),
                        on_done=done.append)
    assert result.exit_code == 0 and result.launched == 1 and result.waited and result.interrupted is None
    assert [(r["spec"], r["state"], r["action"]) for r in result.rows] == [("base-s42", runs.SUCCEEDED, "run")]
    assert result.failed == [] and result.unfinished == []
    assert len(decided) == 1 and decided[0][1].name == "inline" and [i.spec.name for i in done] == ["base-s42"]
    run_dir = result.run_dir("base-s42")
    assert run_dir.parent.parent == tmp_path and runs.read_status(run_dir).state == runs.SUCCEEDED
    recorded = json.loads((run_dir / "provenance.json").read_text())["command"]
    assert recorded == ["reproduce.py", "run", "base-s42", "--preset", "smoke", "--set", "train.steps=3",
                        "--backend", "inline"]

    again = run_target("base-s42", preset="smoke", overrides=["train.steps=3"], backend="inline", runs_root=tmp_path)
    assert again.exit_code == 0 and again.launched == 0 and again.rows[0]["action"] == "skip"


def test_a_failed_stage_is_exit_1_and_named(tmp_path, stages):
    def broken(ctx):
        raise RuntimeError("no")

    stages.setitem(pipeline.STAGE_FUNCTIONS, "evaluate", broken)
    result = run_target("base-s42", preset="smoke", backend="inline", runs_root=tmp_path)
    assert result.exit_code == 1 and result.failed == ["base-s42"]
    assert [name for name, _ in result.unfinished] == ["base-s42"] and "RuntimeError" in result.unfinished[0][1]
    assert result.rows[0]["state"] == runs.FAILED


def test_ctrl_c_is_exit_130_and_marks_the_run_interrupted(tmp_path, stages):
    def interrupted(ctx):
        raise KeyboardInterrupt

    stages.setitem(pipeline.STAGE_FUNCTIONS, "validate", interrupted)
    result = run_target("base-s42", preset="smoke", backend="inline", runs_root=tmp_path)
    assert result.exit_code == INTERRUPTED_EXIT and result.interrupted == ["base-s42"] and result.planned == []
    run_dir = next(tmp_path.glob("base-s42/*"))
    assert runs.read_status(run_dir).state == runs.INTERRUPTED


def test_bad_input_raises_before_anything_is_written(tmp_path):
    from exoformer.errors import UserError

    with pytest.raises(UserError, match="backend"):
        run_target("base-s42", preset="smoke", backend="nowhere", runs_root=tmp_path)
    assert not list(tmp_path.iterdir())


def test_the_run_verb_prints_what_run_target_returns(tmp_path, stages, capsys):
    from exoformer.cli import main

    args = ["run", "base-s42", "--preset", "smoke", "--backend", "inline", "--runs-dir", str(tmp_path)]
    assert main([*args, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["target"] == "base-s42" and shown["backend"] == "inline"
    assert [(r["spec"], r["state"], r["action"]) for r in shown["runs"]] == [("base-s42", runs.SUCCEEDED, "run")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "skip: SUCCEEDED" in out and "ran 0, skipped 1 in" in out and "not done" not in out
