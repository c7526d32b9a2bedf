"""Prompt templates compiled once per evaluation (exoformer/eval/templates.py) give lm-eval the very same requests."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
from lm_eval import utils

from exoformer.eval import templates
from exoformer.eval.run import evaluate

sys.path.insert(0, str(Path(__file__).parent))
from eval_fakes import RecordingLM  # noqa: E402


def smoke_requests(tmp_path, monkeypatch, *, cached: bool) -> tuple[list, dict]:
    if not cached:
        monkeypatch.setattr(templates, "compiled_templates", contextlib.nullcontext)
    lm = RecordingLM()
    results = evaluate(lm, None, "smoke", num_fewshot=5, limit=12, cache_dir=tmp_path / "hf")
    monkeypatch.undo()
    return lm.requests, results["results"]


def test_the_smoke_suite_sends_the_same_requests_with_templates_compiled_once(tmp_path, monkeypatch):
    cached, cached_results = smoke_requests(tmp_path, monkeypatch, cached=True)
    plain, plain_results = smoke_requests(tmp_path, monkeypatch, cached=False)
    assert len(cached) == len(plain) > 6 * 12
    assert cached == plain
    assert cached_results == plain_results


def test_each_distinct_template_is_compiled_once_and_the_original_is_restored(monkeypatch):
    compiled = []
    from_string = utils.env.from_string
    monkeypatch.setattr(utils.env, "from_string", lambda text: compiled.append(text) or from_string(text))
    original = utils.apply_template
    with templates.compiled_templates():
        assert utils.apply_template is not original
        rendered = [utils.apply_template("{{q}} -> {{a}}", {"q": q, "a": a}) for q, a in (("x", 1), ("y", 2))]
        rendered.append(utils.apply_template("{{a}}", {"a": 3}))
    assert rendered == ["x -> 1", "y -> 2", "3"]
    assert compiled == ["{{q}} -> {{a}}", "{{a}}"]
    assert utils.apply_template is original


def test_the_original_is_restored_when_the_evaluation_fails():
    original = utils.apply_template
    with pytest.raises(RuntimeError), templates.compiled_templates():
        raise RuntimeError("evaluation failed")
    assert utils.apply_template is original
