"""The CPU cost model against what runs, and docs/cluster.md's cost figures against what `plan` prints.

results/bench_main_job.json holds stage-time measurements of benchmarks/bench_main_job.py (CPU seconds per stage
of smoke jobs at one torch thread, as the local backend runs them); each stage the cost model prices must be within
30% of each, and `plan` within 30% of the whole main job measured (`main_job`), so that `plan`'s CPU-minutes say
what a run costs. docs/cluster.md's GPU-hour figures are checked against `plan`, so a change of the cost model
or the registry that moves them fails here until that page says the new number. The README's one timing, the main
job's wall time, is checked against its measurement in tests/test_readme_prose.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from exoformer.budget.cost import CPU_STARTUP_S, cpu_stage_seconds, local_slots
from exoformer.checkpoint_import.checkpoint_run import eval_cost
from exoformer.registry.profiles import load_profile
from exoformer.registry.registry import Registry
from exoformer.runs.plan import plan, totals

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests" / "runs"))
from bench_main_job import spec_recipe  # noqa: E402  (what the benchmark records as a measurement's recipe)
from test_local_slots import local_wall_seconds  # noqa: E402

MEASURED = REPO / "results" / "bench_main_job.json"
TOLERANCE = 0.30
NOISE_S = 0.5
CPU_TABLE_S = 5.0
"""Once per `run TABLE` after its jobs: the table and its figures (bench_main_job.py's `finish`), which `plan` does
not price."""


@pytest.fixture(scope="module")
def measured() -> dict:
    return json.loads(MEASURED.read_text())


def rows(measured: dict) -> list[dict]:
    """Every measured job of every recorded benchmark run (one torch thread each)."""
    assert all(run["threads"] == 1 for run in measured["runs"])
    return [row for run in measured["runs"] for row in run["per_spec"]]


def test_the_measurements_are_of_the_current_smoke_recipe(measured):
    """A change of the smoke recipe must come with a new measurement (benchmarks/bench_main_job.py --out)."""
    reg = Registry()
    for row in rows(measured):
        assert row["recipe"] == spec_recipe(reg.resolve(row["spec"], preset="smoke")), row["spec"]


def test_cpu_cost_model_is_within_30_percent_of_the_measured_stages(measured):
    """Per stage and in total; a sub-second stage (analyse) within NOISE_S, the timer's noise at that size."""
    reg, cpu = Registry(), load_profile("cpu")
    assert {row["spec"] for row in rows(measured)} >= {"base-s42", "dynamic-e-exoformer-s42"}
    for row in rows(measured):
        model = cpu_stage_seconds(reg.resolve(row["spec"], preset="smoke"), cpu)
        for stage, estimate in model.items():
            seen = row[f"{stage}_s"]
            assert abs(estimate - seen) <= max(TOLERANCE * seen, NOISE_S), f"{row['spec']} {stage}: {estimate:.1f} " \
                f"vs {seen:.1f} s"
        total = sum(row[f"{stage}_s"] for stage in model)
        assert abs(sum(model.values()) - total) <= TOLERANCE * total


def test_plan_prices_the_measured_main_job_within_30_percent(measured, tmp_path):
    """The whole main job (every process of `run table1 --preset smoke`) against plan's CPU-minutes plus the table."""
    job = measured["main_job"]
    reg = Registry()
    assert job["recipe"] == spec_recipe(reg.resolve("base-s42", preset="smoke"))
    estimate = main_job_figures(reg, tmp_path)["cpu_minutes"] * 60 + CPU_STARTUP_S + CPU_TABLE_S
    assert abs(estimate - job["cpu_s"]) <= TOLERANCE * job["cpu_s"], (estimate, job["cpu_s"])


def test_a_branch_in_its_parents_job_is_priced_within_30_percent_of_its_measurement(measured):
    """bench_main_job.py --one-job: a ladder's stable run, then its decay branches, in one process, as a local job
    runs them. Each branch priced after its parent (no process start, the in-job training setup) is within 30% of
    its measured CPU time, and what it spent before its first stage is far below a process start."""
    reg, cpu = Registry(), load_profile("cpu")
    jobs = measured["in_parent_job"]["jobs"]
    assert len(jobs) >= 3 and all(job["threads"] == 1 for job in jobs)
    for job in jobs:
        first, *branches = job["runs"]
        parent = reg.resolve(first["spec"])
        assert len(branches) == 3 and first["recipe"] == spec_recipe(parent)
        for row in branches:
            spec = reg.resolve(row["spec"])
            assert row["recipe"] == spec_recipe(spec) and spec.train.branch_from == parent.name
            estimate = sum(cpu_stage_seconds(spec, cpu, after=parent).values())
            assert abs(estimate - row["total_cpu_s"]) <= TOLERANCE * row["total_cpu_s"], (row["spec"], estimate)
            assert row["setup_s"] < 0.1 * CPU_STARTUP_S


def test_checkpoint_evaluation_cost_is_the_measured_stages_after_training(measured):
    """A checkpoint run imports instead of training; the rest of the job is the same stages."""
    reg, cpu = Registry(), load_profile("cpu")
    for row in rows(measured):
        spec = reg.resolve(row["spec"], preset="smoke")
        seen = sum(row[f"{s}_s"] for s in ("startup", "validate", "evaluate", "analyse"))
        estimate = eval_cost(spec, cpu).cpu_minutes * 60
        assert abs(estimate - seen) <= TOLERANCE * seen


def main_job_figures(reg: Registry, runs_root) -> dict[str, float]:
    """The main job's figures, from `plan` and the cost model it prices with: CPU-minutes, the
    shares of training and evaluation, and the minutes on 2 cores with the jobs side by side as the local backend
    runs them there (exoformer/budget/cost.py local_slots; local_wall_seconds of tests/runs/test_local_slots.py)."""
    planned = plan(reg, "table1", preset="smoke", runs_root=runs_root)
    cpu = load_profile("cpu")
    stages = [cpu_stage_seconds(p.spec, cpu) for p in planned]
    total = sum(sum(s.values()) for s in stages)
    wall = local_wall_seconds([sum(s.values()) for s in stages], cores=2, serial_s=CPU_STARTUP_S + CPU_TABLE_S)
    return {"cpu_minutes": totals(planned)["cpu_minutes"], "train": sum(s["train"] for s in stages) / total,
            "evaluate": sum(s["evaluate"] for s in stages) / total, "wall_minutes": wall / 60.0,
            "last_together": local_slots(len(stages) % 2 + 2, 0, 2)}


def test_cluster_doc_cost_figures_are_what_plan_prints(tmp_path):
    reg = Registry()
    page = " ".join((REPO / "docs" / "cluster.md").read_text().split())
    paper = plan(reg, "table1", runs_root=tmp_path)
    assert f"Training Table 1 costs ~{totals(paper)['gpu_hours']:.0f} GPU-hours" in page
    h100 = load_profile("h100")
    per_row = [eval_cost(p.spec, h100).gpu_hours for p in paper]
    assert f"**{max(per_row):.2f} GPU-hours per row, {sum(per_row):.1f} for the nine rows" in page


def test_scored_documents_follow_the_limit_and_the_suite():
    """The documents a run scores per task: the forecast's binomial split reads them (docs/forecast.md)."""
    from exoformer.budget.cost import eval_requests, scored_documents
    from exoformer.eval.task_facts import TASK_FACTS

    registry = Registry()
    smoke = registry.resolve("base-s42", preset="smoke")
    ladder = registry.resolve("smoke-ladder-base-d64-b1", overrides=["eval.limit=30"])
    paper = registry.resolve("base-s42")
    assert scored_documents(registry.resolve("smoke-ladder-base-d64-b1")) == scored_documents(smoke)  # every document
    assert scored_documents(smoke) == {"arc_easy": (150, 4), "arc_challenge": (96, 4), "hellaswag": (150, 4),
                                       "openbookqa": (120, 4), "piqa": (150, 2), "winogrande": (150, 2)}
    assert {task: docs for task, (docs, _) in scored_documents(ladder).items()} == dict.fromkeys(TASK_FACTS, 30)
    assert scored_documents(paper) == {name: (f.documents, f.choices) for name, f in TASK_FACTS.items()}
    assert eval_requests(smoke)[0] == sum(d * c for d, c in scored_documents(smoke).values())


def test_a_run_without_evaluation_is_priced_without_it():
    """`eval.enabled: false` (the ladder's loss-only runs) costs no evaluate stage and nothing else changes."""
    registry, cpu = Registry(), load_profile("cpu")
    scored = cpu_stage_seconds(registry.resolve("base-s42", preset="smoke"), cpu)
    unscored = cpu_stage_seconds(registry.resolve("base-s42", preset="smoke", overrides=["eval.enabled=false"]), cpu)
    assert scored["evaluate"] > 1.0 and unscored["evaluate"] == 0.0
    assert {k: v for k, v in unscored.items() if k != "evaluate"} == {k: v for k, v in scored.items() if k != "evaluate"}
