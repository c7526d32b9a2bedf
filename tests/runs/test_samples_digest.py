"""Per-document scores are pinned: the evaluate stage records the sha256 of eval/samples.json in its stage record,
and a file that no longer has it reads DAMAGED naming the file (exoformer/runs/verify.py). Reversing a task's
per-document lists keeps its count and mean, which every other check compares, yet moves a paired interval.
A run evaluated before the stage recorded a digest is checked as before."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

from synthetic import make_run, registry

from exoformer.eval.stage import SAMPLES_DIGEST_KEY
from exoformer.rundir import RunDir
from exoformer.runs.run_index import find_runs

SPEC = "base-s42"
TASK = "smoke_arc_easy"
SCORES = [1.0, 0.0, 0.0]
"""One task's per-document accuracies: reversed, the count (3) and the mean (1/3) stay."""


def _lm_eval_output() -> dict:
    """What exoformer.eval.run.evaluate returns with keep_samples: lm-eval's results and the compact samples."""
    return {"results": {TASK: {"alias": TASK, "acc,none": 1 / 3, "acc_stderr,none": 0.33}},
            "n-samples": {TASK: {"original": 3, "effective": 3}},
            "per_sample": {"format": 1, "tasks": {TASK: {"doc_id": [0, 1, 2], "acc": list(SCORES)}}}}


@pytest.fixture()
def evaluated(tmp_path, monkeypatch) -> RunDir:
    """A finished smoke run whose evaluate stage ran (lm-eval and the model replaced by their output) and was
    recorded as the pipeline records it."""
    from exoformer.data import tokenizer
    from exoformer.eval import precision, run, scoring
    from exoformer.eval.stage import evaluate_stage
    from exoformer.stage import StageContext
    from exoformer.train import checkpoint, loop

    monkeypatch.setattr(checkpoint, "load_model_from_run", lambda *a, **k: (object(), None))
    monkeypatch.setattr(precision, "check_local_scoring_device", lambda *a, **k: None)
    monkeypatch.setattr(scoring, "scoring_model", lambda model, precision: model)
    monkeypatch.setattr(tokenizer, "for_data", lambda data_dir: None)
    monkeypatch.setattr(loop, "resolve_data_dir", lambda data: data)
    monkeypatch.setattr(run, "evaluate", lambda *a, **k: _lm_eval_output())
    rd = RunDir(make_run(tmp_path, SPEC, preset="smoke", accuracies=None, ppl=None))
    spec = registry().resolve(SPEC, preset="smoke")
    result = evaluate_stage(StageContext(run_dir=rd.path, spec=spec, device="cpu",
                                         say=logging.getLogger("test_samples_digest").info))
    rd.record_stage("evaluate", {"stage": "evaluate", "result": result})
    return rd


def _samples(run: RunDir) -> Path:
    return run.eval_dir / "samples.json"


def _reverse_scores(run: RunDir) -> None:
    data = json.loads(_samples(run).read_text())
    for body in data["tasks"].values():
        for metric in body:
            if metric != "doc_id":
                body[metric].reverse()
    _samples(run).write_text(json.dumps(data, indent=2) + "\n")


def _state(root: Path) -> tuple[str | None, str | None]:
    [info] = find_runs(root)
    return info.state, info.damage


def test_the_evaluate_stage_records_the_sha256_of_the_samples_it_wrote(evaluated):
    record = json.loads(evaluated.stage_file("evaluate").read_text())["result"]
    assert record[SAMPLES_DIGEST_KEY] == hashlib.sha256(_samples(evaluated).read_bytes()).hexdigest()
    assert json.loads(_samples(evaluated).read_text())["tasks"][TASK]["acc"] == SCORES


def test_reversed_per_document_scores_read_damaged_naming_the_file(evaluated):
    root = evaluated.path.parent.parent
    assert _state(root) == ("SUCCEEDED", None)
    _reverse_scores(evaluated)
    state, damage = _state(root)
    assert state == "DAMAGED" and str(_samples(evaluated)) in damage and "changed after evaluation" in damage, damage


def test_samples_removed_after_a_digest_was_recorded_read_damaged(evaluated):
    _samples(evaluated).unlink()
    state, damage = _state(evaluated.path.parent.parent)
    assert state == "DAMAGED" and "samples.json is missing" in damage, damage


@pytest.mark.parametrize("digest", ["abc", 7, "G" * 64])
def test_a_recorded_digest_that_is_not_a_sha256_reads_damaged(evaluated, digest):
    record = json.loads(evaluated.stage_file("evaluate").read_text())
    record["result"][SAMPLES_DIGEST_KEY] = digest
    evaluated.record_stage("evaluate", record)
    state, damage = _state(evaluated.path.parent.parent)
    assert state == "DAMAGED" and SAMPLES_DIGEST_KEY in damage, damage


def test_a_run_evaluated_before_the_digest_was_recorded_is_checked_as_before(evaluated):
    """No digest in its stage record: reordered scores keep the count and mean the other checks compare, so the
    run reads SUCCEEDED (such runs are accepted); scores that change a mean still read DAMAGED."""
    record = json.loads(evaluated.stage_file("evaluate").read_text())
    del record["result"][SAMPLES_DIGEST_KEY]
    evaluated.record_stage("evaluate", record)
    root = evaluated.path.parent.parent
    _reverse_scores(evaluated)
    assert _state(root) == ("SUCCEEDED", None)
    data = json.loads(_samples(evaluated).read_text())
    data["tasks"][TASK]["acc"] = [1.0, 1.0, 1.0]
    _samples(evaluated).write_text(json.dumps(data))
    state, damage = _state(root)
    assert state == "DAMAGED" and "averages 1.000000" in damage, damage
