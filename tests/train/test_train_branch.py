"""WSD decay branches (issue 42 item 6): a branch from its parent's checkpoint equals an uninterrupted run."""

import json
from pathlib import Path

import pytest
from same_state import assert_same_tensors
from train_tiny import tiny_model, tiny_train

from exoformer.errors import UserError
from exoformer.train.checkpoint import checkpoint_files, load_checkpoint
from exoformer.train.config import TrainConfig
from exoformer.train.loop import train
from exoformer.train.schedule import branch_problem

PARENT_STEPS, BRANCH_STEPS, START = 30, 20, 16
"""The branch decays over int(0.2 * 20) = 4 steps, from 16; the parent keeps every 8th checkpoint."""


def _parent(data: Path, **overrides) -> TrainConfig:
    return tiny_train(data, **({"steps": PARENT_STEPS, "keep_every": 8} | overrides))


def _branch(data: Path, **overrides) -> TrainConfig:
    return tiny_train(data, steps=BRANCH_STEPS, branch_from="parent", branch_step=START, **overrides)


def _lines_after(run: Path, step: int) -> list[dict]:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if k not in ("ms_per_step", "tokens_per_s")}
            for line in lines if line.get("step", 0) > step]


@pytest.fixture(scope="module")
def parent_root(tiny_data, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    assert train(tiny_model(), _parent(tiny_data), root / "parent" / "aaaaaaaaaaaa").step == PARENT_STEPS
    return root


def test_parent_keeps_its_branch_points_past_retention(parent_root):
    folder = parent_root / "parent" / "aaaaaaaaaaaa" / "checkpoints"
    steps = sorted(load_checkpoint(p)["step"] for p in checkpoint_files(folder))
    assert steps == [8, 16, 24, 25, 30]  # keep_every 8 pinned; checkpoint_every 5 keeps the newest 2 (25, 30)


def test_branch_equals_an_uninterrupted_run_bitwise(tiny_data, parent_root, tmp_path):
    """The central equivalence: parent's state at 16 + the branch's own decay == a plain 20-step run, in fp32."""
    reference = tmp_path / "plain"
    train(tiny_model(), tiny_train(tiny_data, steps=BRANCH_STEPS), reference)
    branch = parent_root / "branch" / "bbbb"
    result = train(tiny_model(), _branch(tiny_data), branch)
    assert result.step == BRANCH_STEPS and not result.interrupted
    ours = load_checkpoint(branch / "checkpoints" / "step_00000020.pt")
    theirs = load_checkpoint(reference / "checkpoints" / "step_00000020.pt")
    for key in ("model", "muon", "adamw", "loader", "rng", "tokens", "final_train_loss", "schedule"):
        assert_same_tensors(ours[key], theirs[key], key)
    assert ours["train_config"]["branch_from"] == "parent" and "branch_from" not in theirs["train_config"]
    assert _lines_after(branch, START) == _lines_after(reference, START)
    assert not any(line["step"] <= START for line in _lines_after(branch, 0))  # it trained only its decay
    again = train(tiny_model(), _branch(tiny_data), branch)  # resumes from its own checkpoints: nothing to do
    assert again.step == BRANCH_STEPS


def test_missing_parent_is_refused_in_one_line(tiny_data, tmp_path):
    with pytest.raises(UserError) as err:
        train(tiny_model(), _branch(tiny_data), tmp_path / "branch" / "bbbb")
    assert err.value.problem == f"parent parent has no checkpoint at step {START} yet: run it first"
    assert "\n" not in str(err.value)


def test_a_parent_of_another_recipe_is_refused(tiny_data, parent_root, tmp_path):
    with pytest.raises(UserError, match=r"no usable checkpoint.*train\.adam_lr"):
        train(tiny_model(), _branch(tiny_data, adam_lr=0.002), tmp_path / "x" / "runs" / "b" / "h",
              runs_root=parent_root)
    with pytest.raises(UserError, match="another model"):
        train(tiny_model(d_model=16), _branch(tiny_data), tmp_path / "y" / "b" / "h", runs_root=parent_root)


@pytest.mark.parametrize(("steps", "start", "both", "why"), [
    (20, 16, {}, None),
    (20, 18, {"keep_every": 2}, "schedules differ at step 17"),  # its own decay began (at 16) before its start
    (20, 16, {"muon_momentum_steps": 6}, "schedules differ at step 15"),  # its momentum cool-down did
    (40, 32, {}, "fewer than the branch's start"),
    (20, 12, {}, "keeps no checkpoint at step 12"),
])
def test_branch_problem_names_what_breaks_exactness(tiny_data, steps, start, both, why):
    branch = tiny_train(tiny_data, steps=steps, branch_from="parent", branch_step=start, **both)
    problem = branch_problem(_parent(tiny_data, **both), branch)
    assert problem is None if why is None else why in problem, problem
    other = branch_problem(_parent(tiny_data, seed=7), _branch(tiny_data))
    assert other.startswith("its recipe differs from the parent's in more than steps: train.seed"), other


def test_branch_fields_are_validated_and_unset_ones_leave_the_hash_alone(tiny_data):
    with pytest.raises(UserError, match="needs both"):
        tiny_train(tiny_data, branch_from="parent")
    with pytest.raises(UserError, match=r"must lie in \(0, steps=12\)"):
        tiny_train(tiny_data, branch_from="parent", branch_step=12)
    with pytest.raises(UserError, match="positive or null"):
        tiny_train(tiny_data, keep_every=0)
    assert not {"keep_every", "branch_from", "branch_step"} & set(TrainConfig().to_dict())
    assert TrainConfig.from_dict(_branch(Path("d")).to_dict()) == _branch(Path("d"))
