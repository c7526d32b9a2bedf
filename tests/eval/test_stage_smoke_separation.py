"""The smoke suite separates trained from untrained: a smoke model trained through the stages scores
clearly above the chance average; the same model freshly initialised is within noise of chance.

One model per session: the smoke preset's recipe in full (SEPARATION_STEPS updates, its own warm-ups and
decay), evaluated on the first LIMIT documents of each smoke task. The smoke corpus states most facts rarely
(long-tailed salience, exoformer/data/smoke/facts.py), so a few dozen updates are not enough to separate.
"""

from __future__ import annotations

import json
import logging
import math
import statistics

import pytest
import torch

from exoformer.eval.stage import evaluate_stage, validate_stage
from exoformer.eval.suites import eval_split, task_configs
from exoformer.registry.registry import Registry
from exoformer.registry.tables import DEFAULT_CONVENTION, TASKS
from exoformer.stage import StageContext
from exoformer.train.loop import train

pytestmark = pytest.mark.slow

SEPARATION_STEPS = Registry().resolve("base-s42", preset="smoke").train.steps  # the smoke preset's own step count
LIMIT = 40
OVERRIDES = [f"train.checkpoint_every={SEPARATION_STEPS}", f"train.val_every={SEPARATION_STEPS // 2}",
             "train.final_val_tokens=8192", f"eval.limit={LIMIT}"]


def n_choices(task: str, doc: dict) -> int:
    """Answer options of one document in the datasets' own schemas (the smoke files mirror them)."""
    if task in ("arc_challenge", "arc_easy", "openbookqa"):
        return len(doc["choices"]["text"])
    if task == "hellaswag":
        return len(doc["endings"])
    return 2  # piqa: sol1/sol2; winogrande: option1/option2


def chance_average() -> float:
    """Mean over the six tasks of the expected accuracy of uniform guessing on the scored documents."""
    per_task = []
    for cfg in task_configs("smoke"):
        task = cfg["task"].removeprefix("smoke_")
        path = cfg["dataset_kwargs"]["data_files"][eval_split(cfg)]
        with open(path, encoding="utf-8") as f:
            docs = [json.loads(line) for line in f if line.strip()][:LIMIT]
        per_task.append(statistics.fmean(1 / n_choices(task, d) for d in docs))
    return statistics.fmean(per_task)


def average(run_dir) -> tuple[float, float]:
    """(six-task average under the default convention, its combined stderr) from eval/long.jsonl."""
    rows = [json.loads(line) for line in (run_dir / "eval" / "long.jsonl").read_text().splitlines()]
    picked = {r["task"].removeprefix("smoke_"): r for r in rows
              if r["metric"] == DEFAULT_CONVENTION[r["task"].removeprefix("smoke_")]}
    assert set(picked) == set(TASKS)
    values = [picked[t]["value"] for t in TASKS]
    return statistics.fmean(values), math.sqrt(sum(picked[t]["stderr"] ** 2 for t in TASKS)) / len(TASKS)


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory):
    """(trained run dir, fresh run dir): the same spec, trained SEPARATION_STEPS updates vs 0."""
    torch.set_num_threads(1)
    spec = Registry().resolve("base-s42", preset="smoke", overrides=OVERRIDES)
    root = tmp_path_factory.mktemp("separation")
    log = logging.getLogger("separation")
    trained = root / "trained"
    train(spec.model, spec.train, trained)
    fresh_spec = Registry().resolve("base-s42", preset="smoke", overrides=[*OVERRIDES, "train.steps=1",
                                                                          "train.checkpoint_every=1"])
    fresh = root / "fresh"
    # The fresh model: one step at a learning rate of 1e-12 (rates must be positive) leaves the initial weights.
    train(fresh_spec.model, fresh_spec.train.__class__(**{**fresh_spec.train.to_dict(), "muon_lr": 1e-12,
                                                          "adam_lr": 1e-12, "coef_lr": 1e-12}), fresh)
    for run_dir, s in ((trained, spec), (fresh, fresh_spec)):
        evaluate_stage(StageContext(run_dir=run_dir, spec=s, device="cpu", say=log.info))
    validate_stage(StageContext(run_dir=trained, spec=spec, device="cpu", say=log.info))
    return trained, fresh


def test_trained_smoke_model_is_clearly_above_chance(smoke_runs):
    trained, _ = smoke_runs
    avg, se = average(trained)
    chance = chance_average()
    print(f"trained smoke average {avg:.4f} (se {se:.4f}), chance {chance:.4f}")
    assert avg > chance + 0.15, f"trained average {avg:.3f} vs chance {chance:.3f}"
    assert avg > chance + 5 * se
    val = json.loads((trained / "eval" / "validation.json").read_text())
    assert val["val_loss"] < 3.0  # far below the uniform log(2048) = 7.6


def test_fresh_smoke_model_is_within_noise_of_chance(smoke_runs):
    _, fresh = smoke_runs
    avg, se = average(fresh)
    chance = chance_average()
    print(f"fresh smoke average {avg:.4f} (se {se:.4f}), chance {chance:.4f}")
    assert abs(avg - chance) < 4 * se + 0.02, f"fresh average {avg:.3f} vs chance {chance:.3f} (se {se:.3f})"
