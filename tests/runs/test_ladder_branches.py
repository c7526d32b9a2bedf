"""WSD decay branches in the plan (issue 42 item 6): parents first, one-line refusals, the cost of a branch."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from exoformer.budget.cost import flops_per_token, run_flops, training_flops
from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.registry.ladders import branch_parent
from exoformer.registry.registry import Registry
from exoformer.runs import rundirs as runs
from exoformer.runs.backends.local import next_ready
from exoformer.runs.launch import held_branches
from exoformer.runs.plan import checkpoint_file, plan, totals

LADDER = "smoke-ladder"
CPU_MINUTES_LIMIT = 31.0
"""`plan smoke-ladder` on the cpu profile: 30.9 CPU-minutes (docs/forecast.md "The CPU ladder" says why not 25)."""


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry()


@pytest.fixture(scope="module")
def ladder(registry, tmp_path_factory):
    return plan(registry, LADDER, runs_root=tmp_path_factory.mktemp("runs"))


def test_the_ladder_has_three_sizes_by_four_budgets_per_row_within_its_cost(ladder):
    rows: dict[str, set] = {}
    for p in ladder:
        rows.setdefault(p.spec.variant, set()).add((p.spec.model.d_model, p.spec.train.steps))
    assert len(rows) == 9 and all(len({d for d, _ in pts}) >= 3 and len({s for _, s in pts}) >= 4 and len(pts) == 12
                                  for pts in rows.values())
    total = totals(ladder)
    print(f"\nplan smoke-ladder: {total['specs']} runs, {total['flops']:.3g} FLOPs, {total['cpu_minutes']:.1f} CPU-min")
    assert total["to_run"] == 108 and total["cpu_minutes"] <= CPU_MINUTES_LIMIT


def test_the_ladder_scores_the_ends_of_its_budgets_and_enough_runs_for_the_accuracy_curve(ladder):
    """The tasks are scored at the shortest and the longest budget only; the other runs feed the law alone."""
    from exoformer.report.forecast.accuracy import MIN_ACCURACY_POINTS

    scored = [p.spec for p in ladder if p.spec.eval.enabled]
    assert {s.train.steps for s in scored} == {80, 140} and len(scored) == 54 >= 4 * MIN_ACCURACY_POINTS
    assert all(p.cost.cpu_minutes < next(q.cost.cpu_minutes for q in ladder if q.spec.name == p.spec.name[:-1] + "1")
               for p in ladder if p.spec.name.endswith("-b2"))  # an unscored branch costs less than a scored one


def test_every_branch_comes_after_its_parent_and_starts_where_its_decay_begins(ladder, registry):
    order = {p.spec.name: i for i, p in enumerate(ladder)}
    branches = [p.spec for p in ladder if p.spec.train.is_branch]
    assert len(branches) == 81
    for spec in branches:
        assert order[spec.train.branch_from] < order[spec.name], spec.name
        t = spec.train
        assert t.branch_step == t.steps - int(t.decay_fraction * t.steps)
        assert branch_parent(registry, spec).name == t.branch_from


def test_a_branch_costs_its_own_steps_and_counts_all_of_them_as_training(ladder):
    p = next(p for p in ladder if p.spec.name == "smoke-ladder-base-d64-b2")
    t, per_token = p.spec.train, flops_per_token(p.spec.model, p.spec.train.seq_len)
    assert p.cost.flops == run_flops(p.spec) == per_token * (t.steps - t.branch_step) * t.batch_tokens
    assert training_flops(p.spec) == per_token * t.steps * t.batch_tokens  # what the forecast's compute axis reads
    parent = next(q for q in ladder if q.spec.name == t.branch_from)
    assert p.cost.cpu_minutes < parent.cost.cpu_minutes


def test_a_branch_without_its_parent_is_refused_in_one_line(registry, tmp_path, capsys):
    name, parent = "smoke-ladder-base-d48-b1", "smoke-ladder-base-d48-b4"
    with pytest.raises(UserError) as err:
        plan(registry, name, runs_root=tmp_path)
    assert err.value.problem == f"parent {parent} has no checkpoint at step 64 yet: run it first"
    assert main(["run", name, "--runs-dir", str(tmp_path)]) == 2
    printed = capsys.readouterr().err.strip()
    assert len(printed.splitlines()) == 1 and "run it first" in printed
    path = checkpoint_file(runs.run_dir_for(registry.resolve(parent), tmp_path), 64)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")  # the plan only looks for the file; the training loop verifies it
    assert [p.action for p in plan(registry, name, runs_root=tmp_path)] == ["run"]


def test_a_set_that_breaks_the_branch_is_refused_naming_it(registry, tmp_path):
    broken = r"cannot start from smoke-ladder-base-d48-b4 at step 64: the schedules differ"
    with pytest.raises(UserError, match=broken):
        plan(registry, "smoke-ladder-base-d48-*", runs_root=tmp_path, overrides=["train.decay_fraction=0.3"])


def test_branch_identity_names_parent_and_start_and_enters_the_hash(registry):
    spec = registry.resolve("smoke-ladder-base-d48-b1")
    identity = runs.identity_for(registry, spec)
    assert (identity.branch_from, identity.branch_step) == ("smoke-ladder-base-d48-b4", 64)
    other = registry.resolve("smoke-ladder-base-d48-b1", overrides=["train.branch_step=32"])
    assert other.hash != spec.hash
    assert runs.identity_for(registry, registry.resolve("smoke-ladder-base-d48-b4")).branch_from is None


def test_local_backend_starts_a_branch_only_after_its_parent_ended(ladder):
    def item(name):
        return SimpleNamespace(spec=next(p.spec for p in ladder if p.spec.name == name))

    parent, branch, other = item("smoke-ladder-base-d48-b4"), item("smoke-ladder-base-d48-b1"), \
        item("smoke-ladder-gated-d48-b4")
    assert next_ready([branch, parent], []) is parent
    assert next_ready([branch, other], [parent]) is other
    assert next_ready([branch], [parent]) is None
    assert next_ready([branch], [other]) is branch


def test_a_backend_that_cannot_wait_holds_branches_back_with_the_reason(ladder):
    slurm_like, local_like = SimpleNamespace(), SimpleNamespace(orders_branches=True)
    held = held_branches(ladder, slurm_like)
    assert len(held) == 81 and all(why.endswith("run again after the stable runs finish") for why in held.values())
    assert held_branches(ladder, local_like) == {}
    parents_done = [p for p in ladder if p.spec.train.is_branch]
    assert held_branches(parents_done, slurm_like) == {}


def test_the_registry_refuses_an_unknown_parent(tmp_path):
    import shutil

    from exoformer.registry.registry import DEFAULT_REGISTRY

    directory = tmp_path / "registry"
    shutil.copytree(DEFAULT_REGISTRY, directory)
    ladder = directory / "ladder.yaml"
    ladder.write_text(ladder.read_text().replace("-{size}-b4", "-{size}-b5"))
    with pytest.raises(UserError, match="branches from 'smoke-ladder-base-d48-b5', which is not another spec"):
        Registry(directory)
    ladder.write_text(ladder.read_text().replace("-{size}-b5", "-{sise}-b4"))
    with pytest.raises(UserError, match=r"uses \{sise\}, which is not a grid axis"):
        Registry(directory)


def test_the_plan_names_its_checkpoints_as_the_training_loop_does():
    from exoformer.train.checkpoint import checkpoint_name

    assert checkpoint_file(Path("r"), 96).name == checkpoint_name(96)


def test_validate_refuses_a_branch_that_starts_after_its_decay(tmp_path):
    import shutil

    from exoformer.registry.registry import DEFAULT_REGISTRY
    from exoformer.registry.validate import validate

    directory = tmp_path / "registry"
    shutil.copytree(DEFAULT_REGISTRY, directory)
    ladder = directory / "ladder.yaml"
    ladder.write_text(ladder.read_text().replace("train.branch_step: 80,", "train.branch_step: 96,"))
    with pytest.raises(UserError, match=r"cannot start from smoke-ladder-base-d48-b4 at step 96: the schedules differ "
                                        r"at step 81"):
        validate(Registry(directory))
