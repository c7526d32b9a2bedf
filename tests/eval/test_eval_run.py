"""The evaluate stage end to end with lm-eval's simple_evaluate, fully offline, and its long-format rows."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest
import torch

from exoformer.errors import UserError
from exoformer.eval.run import DEFAULT_SEEDS, evaluate, long_rows
from exoformer.eval.suites import PAPER_TASKS

sys.path.insert(0, str(Path(__file__).parent))
from eval_fakes import CharTokenizer, RecordingLM, TinyCausalLM, write_task_dir  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the evaluation tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_paper_suite_runs_offline_through_simple_evaluate(tmp_path, no_network):
    write_task_dir(tmp_path / "tasks")
    hf_home = os.environ.get("HF_HOME")
    from exoformer.model import ExoTransformer, variant_config

    torch.manual_seed(0)
    model = ExoTransformer(variant_config("dynamic-e-exoformer", shape="tiny", vocab_size=100, seq_len=512))
    results = evaluate(model, CharTokenizer(), "paper", data_dir=tmp_path / "tasks", batch_size=8,
                       cache_dir=tmp_path / "hf")
    assert os.environ.get("HF_HOME") == hf_home  # the environment is restored
    assert any((tmp_path / "hf" / "datasets").iterdir())  # datasets cached where we said
    json.dumps(results, allow_nan=False)  # strict JSON, samples dropped
    assert "samples" not in results
    assert sorted(results["results"]) == sorted(PAPER_TASKS)
    assert results["n-shot"] == {task: 5 for task in PAPER_TASKS}
    assert results["config"]["fewshot_seed"] == DEFAULT_SEEDS["fewshot_random_seed"] == 1234
    for task, metrics in results["results"].items():
        names = {k.split(",")[0] for k in metrics if k.endswith(",none") and "stderr" not in k}
        assert names == ({"acc"} if task == "winogrande" else {"acc", "acc_norm"})
        assert results["n-samples"][task] == {"original": 6, "effective": 6}
    rows = long_rows(results, spec="tiny", seed=7)
    assert len(rows) == 11
    assert all(0.0 <= r["value"] <= 1.0 and r["n"] == 6 and r["seed"] == 7 and r["spec"] == "tiny" for r in rows)


def test_requests_follow_lm_evals_prompts_and_partial_scoring(tmp_path, no_network):
    write_task_dir(tmp_path / "tasks", n=4)
    lm = RecordingLM()
    results = evaluate(lm, None, "paper", data_dir=tmp_path / "tasks", num_fewshot=0, cache_dir=tmp_path / "hf")
    docs = {tuple(json.loads(line).items()) for line in (tmp_path / "tasks/winogrande/validation.jsonl").open()}
    for doc in map(dict, docs):
        before = doc["sentence"].split("_")[0]
        for option in (doc["option1"], doc["option2"]):  # one context per option, same continuation
            assert (before + option, " was full.") in lm.requests
    piqa = json.loads((tmp_path / "tasks/piqa/validation.jsonl").open().readline())
    assert (f"Question: {piqa['goal']}\nAnswer:", " " + piqa["sol1"]) in lm.requests
    hs = json.loads((tmp_path / "tasks/hellaswag/validation.jsonl").open().readline())
    word = hs["endings"][0].split()[4]
    # HellaSwag's own preprocess: "Label: ctx_a Ctx_b", and " [title]" becomes ". "
    assert (f"Cooking: {hs['ctx_a']} Then they", f" put it on the {word}. now.") in lm.requests
    # longest continuation wins: arc acc picks the longest choice text; 4 + 4 + 4 + 4 + 2 + 2 docs' worth
    assert len(lm.requests) == 4 * (4 + 4 + 4 + 4 + 2 + 2)
    assert results["n-shot"]["arc_easy"] == 0


def test_paper_suite_without_local_data_is_a_user_error(monkeypatch):
    monkeypatch.delenv("EXOFORMER_TASK_DIR", raising=False)
    with pytest.raises(UserError, match="prefetch"):
        evaluate(RecordingLM(), None, "paper")


def test_missing_task_file_stops_evaluate_with_its_path(tmp_path):
    write_task_dir(tmp_path / "tasks")
    missing = tmp_path / "tasks" / "openbookqa" / "test.jsonl"
    missing.unlink()
    with pytest.raises(UserError) as err:
        evaluate(RecordingLM(), None, "paper", data_dir=tmp_path / "tasks", cache_dir=tmp_path / "hf")
    assert str(missing) in str(err.value)


def test_smoke_suite_runs_offline(tmp_path, no_network):
    results = evaluate(TinyCausalLM(seq_len=1024), CharTokenizer(), "smoke", limit=8, batch_size=16,
                       cache_dir=tmp_path / "hf")
    assert sorted(results["results"]) == sorted("smoke_" + t for t in PAPER_TASKS)
    assert all(results["n-samples"][t]["effective"] == 8 for t in results["results"])
    assert {r["metric"] for r in long_rows(results, spec="s", seed=0)} == {"acc", "acc_norm"}


def test_long_rows_parse_metric_keys_and_missing_stderr():
    results = {"results": {"piqa": {"alias": "piqa", "name": "piqa", "sample_len": 3, "acc,none": 0.5,
                                    "acc_stderr,none": "N/A", "acc_norm,none": 0.25, "acc_norm_stderr,none": 0.1,
                                    "exact_match,strict": 1.0, "exact_match_stderr,strict": 0.0}},
               "n-samples": {"piqa": {"original": 10, "effective": 3}}}
    rows = long_rows(results, spec="a", seed=1)
    assert rows == [
        {"spec": "a", "seed": 1, "task": "piqa", "metric": "acc", "value": 0.5, "stderr": None, "n": 3},
        {"spec": "a", "seed": 1, "task": "piqa", "metric": "acc_norm", "value": 0.25, "stderr": 0.1, "n": 3},
        {"spec": "a", "seed": 1, "task": "piqa", "metric": "exact_match,strict", "value": 1.0, "stderr": 0.0,
         "n": 3},
    ]
    with pytest.raises(UserError, match="no evaluation results"):
        long_rows({"results": {}}, spec="a", seed=1)


def test_the_environment_report_points_at_provenance_and_starts_no_process(tmp_path, monkeypatch):
    """lm-eval's per-evaluation environment report (torch.utils.collect_env: pip, lscpu, ... as child processes)
    is replaced while `evaluate` runs by the lm-eval version and a pointer to provenance.json, and put back after."""
    import subprocess

    import lm_eval.evaluator

    from exoformer.eval.run import ENVIRONMENT_NOTE

    original = lm_eval.evaluator.add_env_info
    spawned = []
    real_popen = subprocess.Popen.__init__

    def watch(self, args, *rest, **kwargs):
        spawned.append(args)
        return real_popen(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", watch)
    results = evaluate(TinyCausalLM(seq_len=1024), CharTokenizer(), "smoke", limit=2, batch_size=16,
                       cache_dir=tmp_path / "hf")
    assert results["pretty_env_info"] == ENVIRONMENT_NOTE
    assert results["lm_eval_version"] == "0.4.13"
    assert lm_eval.evaluator.add_env_info is original
    assert not [args for args in spawned if "pip" in str(args) or "lscpu" in str(args)]
    assert results["config"]["fewshot_seed"] == DEFAULT_SEEDS["fewshot_random_seed"]  # the rest is lm-eval's
