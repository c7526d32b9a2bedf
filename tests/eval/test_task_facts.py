"""One table of evaluation-task facts: lm-eval's configs agree with it, and every consumer reads it (a consumer
with its own copy of a count, a metric or a special case fails here)."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from exoformer.eval import suites
from exoformer.eval.task_facts import PAPER_TASKS, SHOTS, TASK_FACTS, mean_chance
from exoformer.registry.registry import Registry

ROOT = Path(__file__).resolve().parents[2] / "exoformer"
FACTS_FILE = ROOT / "eval" / "task_facts.py"
SMOKE_GENERATOR = ROOT / "data" / "smoke"
"""Generates the smoke tasks' own documents (their sizes are its own, not the paper tasks')."""


def test_lm_evals_configs_agree_with_the_facts():
    for task, facts in TASK_FACTS.items():
        cfg = suites.builtin_config(task)
        assert suites.named_splits(cfg) == list(facts.splits)
        assert suites.eval_split(cfg) == facts.scored_split
        assert tuple(m["metric"] for m in cfg["metric_list"]) == facts.metrics
        assert facts.convention in facts.metrics


def test_a_config_that_differs_from_the_facts_is_refused(monkeypatch):
    monkeypatch.setitem(TASK_FACTS, "piqa", replace(TASK_FACTS["piqa"], metrics=("acc",)))
    with pytest.raises(RuntimeError, match="differs from exoformer/eval/task_facts.py"):
        suites.builtin_config("piqa")


def test_the_facts_themselves():
    assert PAPER_TASKS == ("arc_challenge", "arc_easy", "hellaswag", "openbookqa", "piqa", "winogrande")
    assert {t: f.chance for t, f in TASK_FACTS.items()} == {"arc_challenge": 0.25, "arc_easy": 0.25,
                                                            "hellaswag": 0.25, "openbookqa": 0.25, "piqa": 0.5,
                                                            "winogrande": 0.5}
    assert mean_chance() == pytest.approx(1 / 3)
    assert [t for t, f in TASK_FACTS.items() if not f.normalised] == ["winogrande"]
    assert "partial scoring" in TASK_FACTS["winogrande"].special and SHOTS == 5


def test_checkpoint_eval_cost_reads_the_facts(monkeypatch):
    from exoformer.checkpoint_import.checkpoint_run import eval_cost
    from exoformer.registry.profiles import load_profile

    registry = Registry()
    spec = registry.resolve("base-s42")
    profile = load_profile("a100")
    before = eval_cost(spec, profile).flops
    facts = TASK_FACTS["hellaswag"]
    monkeypatch.setitem(TASK_FACTS, "hellaswag", replace(facts, documents=2 * facts.documents))
    grown = eval_cost(spec, profile).flops - before
    per_token = before / (sum(f.requests * f.tokens_per_request for f in TASK_FACTS.values()) - facts.requests *
                          facts.tokens_per_request + spec.train.final_val_tokens
                          + spec.analysis.n_sequences * (spec.analysis.seq_len or spec.model.seq_len))
    assert grown == pytest.approx(per_token * facts.requests * facts.tokens_per_request, rel=1e-6)


def test_the_report_asks_the_facts_which_task_has_acc_only(monkeypatch):
    from exoformer.report.tables.build import _swapped, swapped_convention

    table = Registry().tables["table1"]
    assert _swapped(table, "winogrande") is None and _swapped(table, "piqa") == {"piqa": "acc"}
    monkeypatch.setitem(TASK_FACTS, "piqa", replace(TASK_FACTS["piqa"], metrics=("acc",)))
    assert _swapped(table, "piqa") is None
    assert swapped_convention(table.convention)["piqa"] == table.convention["piqa"]


def _code_strings(path: Path) -> list[str]:
    """String constants in a module's code (docstrings left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def _code_numbers(path: Path) -> set[int]:
    return {node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and type(node.value) is int}


def test_no_module_keeps_its_own_copy_of_a_task_fact():
    counts = {f.documents for f in TASK_FACTS.values()} | {f.requests for f in TASK_FACTS.values()}
    counts -= {500, 2000}  # OpenBookQA's round numbers are round numbers elsewhere too
    configs = {f.config for f in TASK_FACTS.values()}
    copies = []
    for path in ROOT.rglob("*.py"):
        if path == FACTS_FILE or path.is_relative_to(SMOKE_GENERATOR):
            continue
        named = [s for s in _code_strings(path) if s in TASK_FACTS or s in configs]
        numbers = _code_numbers(path) & counts
        if named or numbers:
            copies.append(f"{path.relative_to(ROOT)}: {sorted(set(named))} {sorted(numbers)}")
    assert not copies, "task facts outside exoformer/eval/task_facts.py:\n" + "\n".join(copies)
