"""The reading verbs take a run's comparability from its identity, not from the registry and the launch command
line; a run without a readable identity file reads DAMAGED in every reading verb, the others still read."""

from __future__ import annotations

from dataclasses import replace


import pytest
from synthetic import make_run, read_table, registry, uniform

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.report.reading.recipe import identity_of, run_differences
from exoformer.report.tables.build import render
from exoformer.rundir import RunDir

SHRUNK = ("model.n_layer=2", "train.steps=30", "eval.limit=20")


def test_comparability_comes_from_the_identity_not_the_launch_command(tmp_path):
    path = make_run(tmp_path, "gated-s42", accuracies=uniform(0.31), ppl=138.65, overrides=SHRUNK)
    RunDir(path).write_provenance({"command": ["reproduce.py", "run", "gated-s42"]})  # no --set on record
    built = read_table(tmp_path, "table1")
    cell = built.cells[("gated", "val_ppl")]
    assert not cell.comparable and "train.steps=30 (paper 38147)" in cell.why
    assert "stale" not in render(built, "md")  # the identity says it is a variant someone asked for


@pytest.mark.parametrize("damage", [None, b"{not json", b'{"spec": "gated-s42"}'])
def test_a_run_without_a_readable_identity_reads_damaged_and_the_others_still_read(tmp_path, capsys, damage):
    make_run(tmp_path, "base-s42", ppl=15.0)
    lost = RunDir(make_run(tmp_path, "gated-s42", ppl=14.0))
    lost.identity_file.unlink()
    if damage is not None:
        lost.identity_file.write_bytes(damage)
    fix = f"(fix: `reproduce.py run gated-s42 --preset 450m --runs-dir {tmp_path} --force` to rerun it)"
    built = read_table(tmp_path, "table1")
    assert built.cells[("base", "val_ppl")].value == 15.0 and built.cells[("gated", "val_ppl")].value is None
    [note] = [n for n in built.notes if n.startswith("DAMAGED")]
    assert note.startswith(f"DAMAGED gated-s42 ({lost.path.name}): identity.json missing or unreadable: ")
    assert note.endswith(fix) and "\n" not in note
    with pytest.raises(UserError, match="DAMAGED"):
        identity_of(lost)
    main(["table", "table1", "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "| 15.25 / 14.79 |" not in out and "15.00 / 14.79" in out and fix in out
    main(["status", "--runs-dir", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    gated = next(line for line in lines if line.startswith("gated-s42"))
    assert " DAMAGED " in gated and gated.endswith(fix)
    assert " SUCCEEDED " in next(line for line in lines if line.startswith("base-s42"))


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
