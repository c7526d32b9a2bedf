"""Requests per task and tokens per request, measured on the requests lm-eval builds (offline task files)."""

from __future__ import annotations

import sys
from pathlib import Path

from exoformer.eval.request_stats import request_stats
from exoformer.eval.task_facts import TASK_FACTS

sys.path.insert(0, str(Path(__file__).parent))
from eval_fakes import CharTokenizer, write_task_dir  # noqa: E402


def test_requests_are_documents_times_choices_and_tokens_are_counted(tmp_path):
    write_task_dir(tmp_path / "tasks", n=4)
    stats = request_stats("paper", tmp_path / "tasks", tokenizer=CharTokenizer(), num_fewshot=0,
                          cache_dir=tmp_path / "hf")
    choices = {"arc_challenge": 4, "arc_easy": 4, "hellaswag": 4, "openbookqa": 4, "piqa": 2, "winogrande": 2}
    assert {t: s["requests"] for t, s in stats.items()} == {t: 4 * c for t, c in choices.items()}
    assert {t: f.choices for t, f in TASK_FACTS.items()} == choices  # the table agrees with the requests built
    assert stats["piqa"]["assumed_tokens_per_request"] == TASK_FACTS["piqa"].tokens_per_request
    assert stats["hellaswag"]["assumed_requests"] == TASK_FACTS["hellaswag"].requests == 10042 * 4
    for s in stats.values():  # one character per token: a 0-shot request is a few dozen characters
        assert 5 < s["tokens_per_request"] <= s["max_tokens"] < 400
        assert s["tokens"] == s["tokens_per_request"] * s["requests"]
    shots = request_stats("paper", tmp_path / "tasks", tokenizer=CharTokenizer(), num_fewshot=2,
                          cache_dir=tmp_path / "hf")
    assert all(shots[t]["tokens_per_request"] > 2 * stats[t]["tokens_per_request"] for t in stats)
