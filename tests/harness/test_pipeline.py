"""The per-spec pipeline with fake stages: order, completion records, resume, failure, interruption."""

from __future__ import annotations

import json

import pytest

from exoformer.harness import pipeline, runs
from exoformer.harness.registry import Registry


@pytest.fixture(scope="module")
def spec():
    return Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=2"])


@pytest.fixture()
def run_dir(tmp_path, spec):
    return runs.prepare(spec, runs.run_dir_for(spec, tmp_path))


class Fakes:
    """Stage functions that record their calls; `fail` and `interrupt` change their behaviour."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail: str | None = None
        self.interrupt = False

    def stage_for(self, name: str):
        def stage(ctx: pipeline.StageContext) -> dict:
            self.calls.append(name)
            print(f"fake {name} ran")
            assert ctx.run_dir.name == ctx.spec.hash12
            if name == self.fail:
                raise ValueError(f"intentional failure in {name}")
            if name == "train" and self.interrupt:
                self.interrupt = False
                raise pipeline.StageInterrupted({"step": 1})
            return {"value": name.upper()}

        return stage


@pytest.fixture()
def fakes(monkeypatch):
    f = Fakes()
    for name in pipeline.STAGES:
        monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, name, f.stage_for(name))
    return f


def test_stages_run_in_order_and_are_recorded(run_dir, spec, fakes):
    assert pipeline.run_pipeline(run_dir, spec, backend="inline") == pipeline.DONE
    assert fakes.calls == list(pipeline.STAGES)
    for stage in pipeline.STAGES:
        record = json.loads((run_dir / "stages" / f"{stage}.json").read_text())
        assert record["result"] == {"value": stage.upper()} and record["seconds"] >= 0
    status = runs.read_status(run_dir)
    assert status.state == runs.SUCCEEDED and status.backend == "inline"
    log = (run_dir / "logs" / "attempt-001.log").read_text()
    assert "fake evaluate ran" in log and "SUCCEEDED" in log
    # a restarted job skips every finished stage
    assert pipeline.run_pipeline(run_dir, spec, backend="inline") == pipeline.DONE
    assert fakes.calls == list(pipeline.STAGES)
    assert (run_dir / "logs" / "attempt-002.log").is_file()


def test_failure_records_reason_and_traceback_then_resumes(run_dir, spec, fakes):
    fakes.fail = "evaluate"
    with pytest.raises(ValueError, match="intentional failure"):
        pipeline.run_pipeline(run_dir, spec, backend="inline")
    status = runs.read_status(run_dir)
    assert status.state == runs.FAILED and status.stage == "evaluate"
    assert status.reason == "evaluate: ValueError: intentional failure in evaluate"
    trace = (run_dir / "logs" / "attempt-001.traceback.txt")
    assert status.log == str(trace) and "Traceback" in trace.read_text() and "intentional" in trace.read_text()
    assert not (run_dir / "stages" / "evaluate.json").exists()
    fakes.fail = None
    assert pipeline.run_inline(run_dir, spec, echo=False) == pipeline.DONE
    assert fakes.calls == ["train", "validate", "evaluate", "evaluate", "analyse"]
    assert runs.read_status(run_dir).state == runs.SUCCEEDED


def test_run_inline_reports_failure_without_raising(run_dir, spec, fakes):
    fakes.fail = "train"
    assert pipeline.run_inline(run_dir, spec, echo=False) == runs.FAILED
    assert runs.read_status(run_dir).state == runs.FAILED


def test_interruption_leaves_a_pending_run(run_dir, spec, fakes):
    fakes.interrupt = True
    assert pipeline.run_pipeline(run_dir, spec, backend="inline") == pipeline.INTERRUPTED
    status = runs.read_status(run_dir)
    assert status.state == runs.PENDING and "step 1" in status.reason
    assert fakes.calls == ["train"]
    assert pipeline.run_pipeline(run_dir, spec, backend="inline") == pipeline.DONE
    assert fakes.calls == ["train", *pipeline.STAGES]


def test_disabled_analysis_is_not_run(tmp_path, fakes):
    spec = Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=2", "analysis.enabled=false"])
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    pipeline.run_pipeline(run_dir, spec, backend="inline")
    assert fakes.calls == ["train", "validate", "evaluate"]


def test_real_stage_functions_are_imported():
    from exoformer.analysis.stage import analyse_stage
    from exoformer.eval.stage import evaluate_stage, validate_stage

    assert pipeline.STAGE_FUNCTIONS == {"train": pipeline.train_stage, "validate": validate_stage,
                                        "evaluate": evaluate_stage, "analyse": analyse_stage}


def test_wrong_directory_is_refused(tmp_path, spec):
    with pytest.raises(ValueError, match="not the run directory"):
        pipeline.run_pipeline(tmp_path, spec, backend="inline")
