"""`status` names each run's preset and `--set` overrides (its identity record), in the table and in --json: two
variants of one spec would otherwise be two rows that differ only in their hash."""

from __future__ import annotations

import json
from pathlib import Path


from synthetic import make_run, uniform  # noqa: E402

from exoformer.cli import main  # noqa: E402
from exoformer.runs import status  # noqa: E402


def _two_variants(root: Path) -> tuple[Path, Path]:
    plain = make_run(root, "base-s42", preset="smoke", accuracies=uniform(0.4))
    variant = make_run(root, "base-s42", preset="smoke", accuracies=uniform(0.4),
                       overrides=("train.steps=30", "eval.limit=8"))
    return plain, variant


def test_json_rows_carry_the_preset_and_the_overrides_of_each_run(tmp_path, capsys):
    plain, variant = _two_variants(tmp_path)
    assert main(["status", "--json", "--runs-dir", str(tmp_path)]) == 0
    rows = {row["hash"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows[plain.name]["preset"] == "smoke" and rows[plain.name]["overrides"] == {}
    assert rows[variant.name]["preset"] == "smoke"
    assert rows[variant.name]["overrides"] == {"train.steps": 30, "eval.limit": 8}  # in command-line order


def test_the_table_shows_preset_and_set_columns(tmp_path, capsys):
    plain, variant = _two_variants(tmp_path)
    assert main(["status", "--runs-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split()
    assert header[:5] == ["SPEC", "HASH", "PRESET", "SET", "STATE"]
    by_hash = {line.split()[1]: line.split() for line in lines[1:-1]}
    assert by_hash[plain.name][2:5] == ["smoke", "-", "SUCCEEDED"]
    assert by_hash[variant.name][2:5] == ["smoke", "train.steps=30,eval.limit=8", "SUCCEEDED"]


def test_a_run_without_identity_yet_shows_dashes_not_a_guess(tmp_path):
    row = status.row_for(tmp_path / "base-s42" / "0123456789ab", None, "base-s42")
    assert row["preset"] is None and row["overrides"] == {}
    line = status.format_table([row]).splitlines()[1].split()
    assert line[:5] == ["base-s42", "0123456789ab", "-", "-", "NEW"]


def test_set_words_write_values_as_yaml_reads_them():
    assert status.set_words({"a.b": True, "c": None, "d": [1, 2], "e": 0.5}) == ["a.b=true", "c=null", "d=[1,2]",
                                                                                 "e=0.5"]


def test_a_targeted_run_not_launched_yet_shows_the_variant_the_command_names(tmp_path, capsys):
    assert main(["status", "base-s42", "--preset", "smoke", "--set", "train.steps=7", "--json", "--runs-dir",
                 str(tmp_path)]) == 0
    [row] = map(json.loads, capsys.readouterr().out.splitlines())
    assert (row["state"], row["preset"], row["overrides"]) == ("NEW", "smoke", {"train.steps": 7})
