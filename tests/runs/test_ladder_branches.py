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
from exoformer.runs.backends.local import jobs_of
from exoformer.runs.launch import held_branches
from exoformer.runs.plan import checkpoint_file, plan, totals

LADDER = "smoke-ladder"
CPU_MINUTES_LIMIT = 25.0
"""`plan smoke-ladder` on the cpu profile: at most about 25 CPU-minutes (issue 42), 23.7 with each branch in its
parent's local job (docs/forecast.md "The CPU ladder")."""


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


def test_local_backend_runs_each_branch_in_its_parents_job_after_it(ladder):
    items = [SimpleNamespace(spec=p.spec) for p in ladder]
    jobs = jobs_of(items)
    assert len(jobs) == 27 and all(len(job) == 4 for job in jobs)
    for first, *then in jobs:
        assert not first.spec.train.is_branch
        assert [b.spec.train.branch_from for b in then] == [first.spec.name] * 3
        assert [b.spec.train.steps for b in then] == [80, 100, 120]
    parents_done = jobs_of([i for i in items if i.spec.train.is_branch])
    assert len(parents_done) == 81 and all(len(job) == 1 for job in parents_done)  # each branch a job of its own


def test_plan_prices_a_branch_in_its_parents_job_without_a_start_of_its_own(ladder, registry, tmp_path):
    from exoformer.budget.cost import CPU_STARTUP_S, CPU_TRAIN_SETUP_IN_JOB_S, CPU_TRAIN_SETUP_S, estimate
    from exoformer.registry.profiles import load_profile

    cpu, name = load_profile("cpu"), "smoke-ladder-base-d64-b2"
    with_parent = next(p for p in ladder if p.spec.name == name)
    alone = estimate(with_parent.spec, cpu).cpu_minutes
    saved = (CPU_STARTUP_S + CPU_TRAIN_SETUP_S - CPU_TRAIN_SETUP_IN_JOB_S) / 60.0
    assert with_parent.cost.cpu_minutes == pytest.approx(alone - saved)
    parent = registry.resolve(with_parent.spec.train.branch_from)
    path = checkpoint_file(runs.run_dir_for(parent, tmp_path), 80)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")  # the parent has trained past the branch's start: the branch launches alone
    (only,) = plan(registry, name, runs_root=tmp_path)
    assert only.cost.cpu_minutes == pytest.approx(alone)


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


TINY_BRANCHES = """
shapes:
  tiny-ladder-d16: {n_layer: 2, d_model: 16, n_head: 4, seq_len: 256, vocab_size: 2048}
groups:
  smoke-ladder:
    why: One row's stable run and two decay branches, for the test of a branch in its parent's job.
    defaults:
      preset: smoke
      train: {batch_tokens: 512, micro_batch_seqs: 2, val_every: 0, val_batches: 1, final_val_tokens: 2048,
              warmup_steps: 1, checkpoint_every: 1000}
      eval: {enabled: false}
      analysis: {enabled: false}
    sweeps:
      - name: "smoke-ladder-{variant}-d16-{budget}"
        shape: {smoke: tiny-ladder-d16}
        grid:
          variant: [base]
          budget:
            b1: {train.steps: 40, train.branch_from: "smoke-ladder-{variant}-d16-b3", train.branch_step: 32}
            b2: {train.steps: 50, train.branch_from: "smoke-ladder-{variant}-d16-b3", train.branch_step: 40}
            b3: {train.steps: 60, train.keep_every: 8}
"""


@pytest.mark.slow
def test_a_local_job_runs_the_branches_after_their_parent_as_they_run_alone_bitwise(tmp_path):
    """`run` on the local backend: one job runs the stable run, then its branches, in one process; each branch's
    final checkpoint and metrics equal, bit for bit, those of the same branch run later as a job of its own."""
    import json
    import shutil

    import torch

    from ladder_registry import subset_registry
    from same_state import assert_same_tensors
    from smoke_runs import cli

    from exoformer.runs import locking

    registry_dir, _ = subset_registry(tmp_path, ["base"], TINY_BRANCHES)
    registry, together, alone = Registry(registry_dir), tmp_path / "together", tmp_path / "alone"
    cli("run", "smoke-ladder-*", "--registry", str(registry_dir), "--backend", "local", runs_dir=together,
        check=True)
    names = [f"smoke-ladder-base-d16-b{n}" for n in (3, 1, 2)]
    dirs = {name: runs.run_dir_for(registry.resolve(name), together) for name in names}
    assert all(runs.read_status(d).state == runs.SUCCEEDED for d in dirs.values())
    claims = locking.read_manifest(together)
    assert len({claims[registry.resolve(name).hash].job_id for name in names}) == 1  # one job
    pids = {json.loads((d / "provenance.json").read_text())["job"]["pid"] for d in dirs.values()}
    assert len(pids) == 1  # one process

    parent = dirs[names[0]]
    shutil.copytree(parent, runs.run_dir_for(registry.resolve(names[0]), alone))
    cli("run", names[1], "--registry", str(registry_dir), "--backend", "local", runs_dir=alone, check=True)
    branch_alone = runs.run_dir_for(registry.resolve(names[1]), alone)
    assert json.loads((branch_alone / "provenance.json").read_text())["job"]["pid"] not in pids

    def final(run_dir):
        (path,) = sorted((run_dir / "checkpoints").glob("step_00000040*.pt"))
        return torch.load(path, weights_only=True)

    ours, theirs = final(dirs[names[1]]), final(branch_alone)
    for key in ("model", "muon", "adamw", "loader", "rng"):
        assert ours[key], key
        assert_same_tensors(ours[key], theirs[key], key)

    def lines(run_dir):
        return [{k: v for k, v in json.loads(line).items() if k not in ("ms_per_step", "tokens_per_s")}
                for line in (run_dir / "metrics.jsonl").read_text().splitlines()]

    assert lines(dirs[names[1]]) == lines(branch_alone)
