"""The per-spec pipeline with fake stages: order, completion records, resume, failure, interruption."""

from __future__ import annotations

import json

import pytest

from exoformer.runs import pipeline, rundirs as runs
from exoformer.registry.registry import Registry


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
    monkeypatch.setattr(pipeline, "_final_checkpoint_problem", lambda rd, spec: None)  # the fake train saves none
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


def test_disabled_evaluation_is_not_run_and_the_run_succeeds(tmp_path, fakes):
    spec = Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=2", "eval.enabled=false"])
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    assert pipeline.run_pipeline(run_dir, spec, backend="inline") == pipeline.DONE
    assert fakes.calls == ["train", "validate", "analyse"]
    assert runs.read_status(run_dir).state == runs.SUCCEEDED


def test_real_stage_functions_are_imported():
    from exoformer.analysis.stage import analyse_stage
    from exoformer.eval.stage import evaluate_stage, validate_stage

    assert pipeline.STAGE_FUNCTIONS == {"train": pipeline.train_stage, "validate": validate_stage,
                                        "evaluate": evaluate_stage, "analyse": analyse_stage}


def test_wrong_directory_is_refused(tmp_path, spec):
    with pytest.raises(ValueError, match="not the run directory"):
        pipeline.run_pipeline(tmp_path, spec, backend="inline")


@pytest.mark.slow
def test_damaged_final_checkpoint_retrains_instead_of_reporting_an_earlier_step(tmp_path, monkeypatch):
    """Train done, final checkpoint truncated afterwards: the next attempt trains to the final step again before
    any result stage runs; the result stage only ever sees the final, verified step."""
    from exoformer.train.checkpoint import checkpoint_name, load_final_checkpoint

    spec = Registry().resolve("base-s42", preset="smoke",
                              overrides=["train.steps=4", "train.checkpoint_every=2", "train.val_every=0"])
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    seen: list[int] = []

    def result_stage(ctx):
        seen.append(int(load_final_checkpoint(ctx.run_dir, ctx.spec.train.steps)["step"]))
        return {}

    for name in ("validate", "evaluate", "analyse"):
        monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, name, result_stage)
    monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, "validate", lambda ctx: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        pipeline.run_pipeline(run_dir, spec, backend="inline")
    assert runs.read_status(run_dir).state == runs.INTERRUPTED
    final = run_dir / "checkpoints" / checkpoint_name(4)
    final.write_bytes(final.read_bytes()[:1000])  # damaged after training was recorded as done
    monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, "validate", result_stage)
    assert pipeline.run_pipeline(run_dir, spec, backend="inline") == pipeline.DONE
    assert seen == [4, 4, 4] and runs.read_status(run_dir).state == runs.SUCCEEDED
    log = sorted((run_dir / "logs").glob("attempt-*.log"))[-1].read_text()
    assert "recorded as done, but" in log and "training again" in log


def test_a_run_split_into_a_training_job_and_an_evaluation_job(run_dir, spec, fakes):
    """eval_as_job (docs/cluster.md): the training job stops after training with the run PENDING; the evaluation
    job runs the rest and never trains, even when training has not finished."""
    assert pipeline.run_pipeline(run_dir, spec, backend="slurm", part="after-train") == pipeline.STOPPED
    assert fakes.calls == []  # not trained yet: the evaluation job stops without training
    status = runs.read_status(run_dir)
    assert status.state == runs.INTERRUPTED and "training has not finished" in status.reason
    assert pipeline.run_pipeline(run_dir, spec, backend="slurm", part="train") == pipeline.HANDED_OVER
    assert fakes.calls == ["train"]
    status = runs.read_status(run_dir)
    assert status.state == runs.PENDING and status.reason.startswith("trained; validation, evaluation and analysis")
    assert pipeline.run_pipeline(run_dir, spec, backend="slurm", part="after-train") == pipeline.DONE
    assert fakes.calls == list(pipeline.STAGES)  # each stage once: the evaluation job did not train again
    assert runs.read_status(run_dir).state == runs.SUCCEEDED


# ------------------------------------------------------------------- runs that follow another in its job

@pytest.fixture()
def queued_job(tmp_path):
    """Three queued runs of one job, as the local backend gives it a stable run and two decay branches (the fake
    stages do not care what they train)."""
    registry, out = Registry(), []
    for steps in (4, 2, 3):
        spec = registry.resolve("base-s42", preset="smoke", overrides=[f"train.steps={steps}"])
        run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
        runs.RunDir(run_dir).write_status(runs.Status(state=runs.PENDING, backend="local", reason="queued by run"))
        out.append((str(run_dir), spec))
    return out


def _run_job(job):
    (first_dir, first), *then = job
    return pipeline.PipelineJob()(first_dir, first, "local", "all", tuple(then))


def test_a_job_runs_the_runs_that_follow_its_first_in_order_and_passes_over_finished_ones(queued_job, fakes):
    result = _run_job(queued_job)
    assert fakes.calls == list(pipeline.STAGES) * 3
    assert [r["outcome"] for r in [result, *result["then"]]] == [pipeline.DONE] * 3
    assert all(runs.read_status(d).state == runs.SUCCEEDED for d, _ in queued_job)
    pids = {json.loads((runs.RunDir(d).path / "provenance.json").read_text())["job"]["pid"] for d, _ in queued_job}
    assert len(pids) == 1  # one process ran them all
    _run_job(queued_job)  # a requeued job: nothing left to do, nothing rewritten
    assert fakes.calls == list(pipeline.STAGES) * 3
    assert all(len(list((runs.RunDir(d).path / "logs").glob("attempt-*.log"))) == 1 for d, _ in queued_job)


def test_after_a_failure_the_runs_behind_it_say_why_and_a_plain_run_starts_them(queued_job, fakes):
    fakes.fail = "train"
    with pytest.raises(ValueError, match="intentional failure"):
        _run_job(queued_job)
    assert fakes.calls == ["train"] and runs.read_status(queued_job[0][0]).state == runs.FAILED
    for run_dir, _ in queued_job[1:]:
        status = runs.read_status(run_dir)
        assert status.state == runs.INTERRUPTED, status
        assert status.reason == (f"not started: {queued_job[0][1].name}, run before it in the same job, failed; "
                                 "run the same command to start it")


def test_after_a_stop_asked_for_the_runs_behind_it_stay_queued_for_the_launcher(queued_job, fakes):
    """Ctrl-C in the launcher: the first run saves and stops; the launcher puts the unstarted ones back to un-run."""
    fakes.interrupt = True
    runs.RunDir(queued_job[0][0]).request_stop()
    result = _run_job(queued_job)
    assert result["outcome"] == pipeline.STOPPED and fakes.calls == ["train"]
    assert [runs.read_status(d).state for d, _ in queued_job] == [runs.INTERRUPTED, runs.PENDING, runs.PENDING]
    assert [runs.read_status(d).reason for d, _ in queued_job[1:]] == ["queued by run"] * 2


def test_a_stop_asked_for_a_follower_keeps_it_from_starting(queued_job, fakes):
    runs.RunDir(queued_job[2][0]).request_stop()
    _run_job(queued_job)
    assert fakes.calls == list(pipeline.STAGES) * 2 and runs.read_status(queued_job[2][0]).state == runs.PENDING
