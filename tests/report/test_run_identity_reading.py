"""The reading verbs take a run's comparability from its identity, not from the registry and the launch command
line; runs without an identity file derive the same identity."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from synthetic import make_run, registry, uniform  # noqa: E402

from exoformer.report.reading.collect import collect  # noqa: E402
from exoformer.report.reading.recipe import identity_of, run_differences  # noqa: E402
from exoformer.report.tables.build import build_table, render  # noqa: E402
from exoformer.rundir import RunDir  # noqa: E402

SHRUNK = ("model.n_layer=2", "train.steps=30", "eval.limit=20")


def test_comparability_comes_from_the_identity_not_the_launch_command(tmp_path):
    path = make_run(tmp_path, "gated-s42", accuracies=uniform(0.31), ppl=138.65, overrides=SHRUNK)
    RunDir(path).write_provenance({"command": ["reproduce.py", "run", "gated-s42"]})  # no --set on record
    built = build_table(registry(), "table1", collect(tmp_path, registry=registry()), runs_root=tmp_path)
    cell = built.cells[("gated", "val_ppl")]
    assert not cell.comparable and "train.steps=30 (paper 38147)" in cell.why
    assert "stale" not in render(built, "md")  # the identity says it is a variant someone asked for


def test_a_run_without_an_identity_file_derives_the_same_one(tmp_path):
    recorded = make_run(tmp_path / "a", "gated-s42", preset="smoke", ppl=40.0, overrides=("train.steps=31",))
    derived = make_run(tmp_path / "b", "gated-s42", preset="smoke", ppl=40.0, overrides=("train.steps=31",),
                       identity=False)
    ours, theirs = identity_of(registry(), RunDir(recorded)), identity_of(registry(), RunDir(derived))
    assert ours.recorded and not theirs.recorded and not RunDir(derived).identity_file.exists()
    assert replace(theirs, recorded=True, scoring=ours.scoring) == ours


def test_a_run_whose_reference_recipe_changed_says_so(tmp_path):
    path = make_run(tmp_path, "gated-s42", ppl=14.7)
    run = RunDir(path)
    assert run_differences(registry(), "gated-s42", run) == []
    old = replace(run.identity(), reference_hash12="000000000000")
    run.identity_file.unlink()
    run.write_identity(old)
    assert run_differences(registry(), "gated-s42", run) == [
        f"the paper's recipe of gated-s42 changed since the run (reference 000000000000, now "
        f"{registry().resolve('gated-s42').hash12})"]
