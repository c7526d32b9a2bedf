"""The run identity: made by `plan`, written once when a run directory is created, read with defaults for the
fields an older file lacks; a damaged file is an error naming it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from exoformer.errors import UserError
from exoformer.runs import rundirs as runs
from exoformer.runs.plan import plan
from exoformer.registry.registry import Registry
from exoformer.data import resolve_data
from exoformer.run_identity import RunIdentity, data_fingerprint
from exoformer.runs.run_index import find_runs
from exoformer.rundir import RunDir


def test_plan_makes_the_identity_and_prepare_writes_it_once(tmp_path):
    reg = Registry()
    [planned] = plan(reg, "gated-s42", preset="smoke", overrides=["train.steps=3"], runs_root=tmp_path)
    runs.prepare(planned.spec, planned.run_dir, identity=planned.identity)
    identity = RunDir(planned.run_dir).identity()
    smoke = reg.resolve("gated-s42", preset="smoke")
    assert identity == replace(planned.identity, data=identity.data) and identity.steps == 3
    assert (identity.spec, identity.preset, identity.seed, identity.hash12) == ("gated-s42", "smoke", 42,
                                                                                planned.spec.hash12)
    assert identity.overrides == {"train.steps": 3} and identity.source == "ours"
    assert identity.reference_hash12 == reg.resolve("gated-s42").hash12 and identity.preset_hash12 == smoke.hash12
    assert identity.differs == ("preset smoke (paper 450m)", f"train.steps=3 (smoke {smoke.train.steps})")
    assert identity.scoring["suite"] == "smoke" and identity.scoring["final_val_tokens"] == smoke.train.final_val_tokens
    runs.prepare(planned.spec, planned.run_dir, identity=replace(identity, differs=()))  # a resume: kept as it was
    assert RunDir(planned.run_dir).identity() == identity


def test_a_run_prepared_without_a_plan_still_records_an_identity(tmp_path):
    spec = Registry().resolve("gated-s42", preset="smoke", overrides=["train.steps=3"])
    run = RunDir(runs.prepare(spec, runs.run_dir_for(spec, tmp_path)))
    identity = run.identity()
    assert (identity.spec, identity.preset, identity.hash12, identity.steps) == ("gated-s42", "smoke", spec.hash12, 3)
    assert identity.reference_hash12 is None and identity.differs == ()  # compared with no registry
    [info] = find_runs(tmp_path)
    assert info.identity == identity and info.damage is None


def test_the_data_fingerprint_is_the_one_of_the_shards_the_job_records(tmp_path):
    reg = Registry()
    [planned] = plan(reg, "gated-s42", preset="smoke", overrides=["train.steps=3"], runs_root=tmp_path)
    runs.prepare(planned.spec, planned.run_dir, identity=planned.identity)
    run = RunDir(planned.run_dir)
    checksums = runs.data_checksums(resolve_data("smoke"))  # what the train stage records in provenance.json
    assert run.identity().data == data_fingerprint(checksums) and run.identity().data.startswith("sha256:")
    assert data_fingerprint({**checksums, min(checksums): "0" * 64}) != run.identity().data
    run.record_job_provenance({"data_checksums": checksums})
    [info] = find_runs(tmp_path)  # the reading verbs see the identity's fingerprint
    assert info.identity.data == data_fingerprint(checksums)
    assert runs.launch_data_fingerprint(str(tmp_path / "no-such-data")) is None


def test_identity_files_read_with_defaults_and_refuse_damage(tmp_path):
    identity = RunIdentity(spec="gated-s42", seed=42, preset="smoke", hash12="0123456789ab",
                           overrides={"train.steps": 3}, differs=("preset smoke (paper 450m)",))
    assert RunIdentity.from_dict({**identity.to_dict(), "a_field_of_later": 1}, where="x") == identity
    minimal = RunIdentity.from_dict({"spec": "s", "seed": 1, "preset": "smoke", "hash12": "0123456789ab"}, where="x")
    assert minimal.source == "ours" and minimal.differs == () and minimal.comparable
    run = RunDir(tmp_path)
    run.identity_file.write_text("{not json")
    with pytest.raises(UserError, match="identity.json"):
        run.identity()
    run.identity_file.write_text(json.dumps({**identity.to_dict(), "seed": "42"}))
    with pytest.raises(UserError, match="'seed'"):
        run.identity()


@pytest.mark.parametrize("override", ["train.micro_batch_seqs=2", "model.attention=sdpa", "train.compile=false"])
def test_a_setting_that_keeps_the_papers_recipe_keeps_the_run_comparable(tmp_path, override):
    """Micro-batch (the global batch stays train.batch_tokens), attention kernel and compile change how the
    paper's recipe is computed, not the recipe: a new run directory, but never a not-comparable cell."""
    reg = Registry()
    [planned] = plan(reg, "base-s42", overrides=[override], runs_root=tmp_path)
    assert planned.spec.hash12 != reg.resolve("base-s42").hash12  # the setting took effect
    assert planned.identity.differs == () and planned.identity.comparable
    [smoke] = plan(reg, "base-s42", preset="smoke", overrides=[override, "train.compile=true"], runs_root=tmp_path)
    assert smoke.identity.differs == ("preset smoke (paper 450m)",)  # nothing beyond the preset itself


def test_a_setting_that_changes_the_recipe_still_marks_the_run(tmp_path):
    """The control: the global batch (train.batch_tokens) is the paper's recipe, so changing it is named."""
    [planned] = plan(Registry(), "base-s42", overrides=["train.batch_tokens=131072"], runs_root=tmp_path)
    assert planned.identity.differs == ("train.batch_tokens=131072 (paper 262144)",)
