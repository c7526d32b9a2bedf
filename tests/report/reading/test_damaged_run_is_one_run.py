"""One damaged run directory is one run: every reading verb still shows the other runs, and says of the damaged
one what `status` says, in the same word (DAMAGED), with a fix naming exactly its variant (issue 40, item 1, 3, 4).

- a `--set` variant whose STATUS and eval/ are gone after its stages were recorded (a half-copied directory):
  `status`, `table`, `diff`, `claims`, `plan` and `compare` read DAMAGED for it, and nothing else changes;
- an empty spec.yaml (a copy onto a full disk): the run reads as its identity says in every verb, `compare` too;
- a STATUS that is a FIFO: DAMAGED ("STATUS is not a regular file") in `status`, `table` and `plan` (which
  resumes it, as a damaged STATUS is resumed), never numbers in one verb and DAMAGED in another;
- `compare` through a symbolic link to a run directory reads that run, not a false DAMAGED.
Synthetic runs (tests/synthetic.py), no training.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from synthetic import make_run, uniform

from exoformer.cli import main

VARIANT = ("train.steps=30",)
VARIANT_WORDS = "--preset smoke --set train.steps=30"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _root(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "runs"
    base = make_run(root, "base-s42", preset="smoke", accuracies=uniform(0.4), ppl=15.0)
    gated = make_run(root, "gated-s42", preset="smoke", accuracies=uniform(0.45), ppl=14.0)
    return root, base, gated


def _status_rows(capsys, root: Path) -> dict[str, dict]:
    code, out, err = _run(capsys, "status", "--json", "--runs-dir", str(root))
    assert code == 0, err
    return {row["hash"]: row for row in map(json.loads, out.splitlines())}


def _line(table: str, label: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(f"| {label} |"))


@pytest.fixture
def half_copied(tmp_path):
    """Two finished runs and a `--set` variant of base-s42 whose STATUS and eval/ are gone (its stages recorded)."""
    root, base, gated = _root(tmp_path)
    variant = Path(make_run(root, "base-s42", preset="smoke", accuracies=uniform(0.6), overrides=VARIANT))
    (variant / "stages").mkdir(exist_ok=True)
    for stage in ("train", "evaluate", "validate"):
        (variant / "stages" / f"{stage}.json").write_text(json.dumps({"stage": stage, "result": {}}))
    shutil.rmtree(variant / "eval")
    (variant / "STATUS").unlink()
    return root, base, gated, variant


def test_a_half_copied_variant_is_damaged_in_status_with_the_command_of_its_variant(half_copied, capsys):
    root, base, gated, variant = half_copied
    rows = _status_rows(capsys, root)
    assert rows[base.name]["state"] == rows[gated.name]["state"] == "SUCCEEDED"
    shown = rows[variant.name]
    assert shown["state"] == "DAMAGED", shown  # it ran (its stages are recorded): never NEW
    assert f"reproduce.py run base-s42 {VARIANT_WORDS} --runs-dir {root} --force" in shown["reason"]


def test_a_half_copied_variant_stops_no_reading_verb_of_the_other_runs(half_copied, capsys):
    root, *_ = half_copied
    code, out, err = _run(capsys, "table", "table1", "--preset", "smoke", "--runs-dir", str(root))
    assert code == 0, err
    assert "40.00" in _line(out, "Base Transformer") and "45.00" in _line(out, "Gated Attention")
    assert "DAMAGED" not in out  # the plain table reads the plain runs: the variant is not its business
    code, out, err = _run(capsys, "diff", "table1", "--preset", "smoke", "--runs-dir", str(root))
    assert code != 2 and "error" not in err, err
    code, out, err = _run(capsys, "claims", "--preset", "smoke", "--runs-dir", str(root))
    assert code != 2 and "error" not in err, err
    code, out, err = _run(capsys, "compare", "base-s42", "gated-s42", "--preset", "smoke", "--runs-dir", str(root))
    assert code == 0 and "| avg6 (%) | 40.00 | 45.00 | +5.00 |" in out, err


def test_the_variant_read_says_damaged_in_every_verb_never_not_run(half_copied, capsys):
    root, _, _, variant = half_copied
    code, out, err = _run(capsys, "table", "table1", *VARIANT_WORDS.split(), "--runs-dir", str(root))
    assert code == 0, err
    row = _line(out, "Base Transformer")
    assert "DAMAGED" in row and "not run" not in row and "60.00" not in row
    assert f"DAMAGED base-s42 ({variant.name})" in out and f"{VARIANT_WORDS} --runs-dir {root} --force" in out
    code, out, err = _run(capsys, "plan", "base-s42", *VARIANT_WORDS.split(), "--runs-dir", str(root), "--json")
    [planned] = json.loads(out)["specs"]
    assert (planned["action"], planned["status"]) == ("skip", "DAMAGED") and "--force" in planned["reason"]
    code, out, err = _run(capsys, "compare", "base-s42", "base-s42+train.steps=30", "--preset", "smoke",
                          "--runs-dir", str(root))
    assert code == 2 and err.count("\n") == 1 and f"its run {variant.name} is DAMAGED" in err, err
    assert f"reproduce.py run base-s42 {VARIANT_WORDS} --runs-dir {root} --force" in err


def test_an_empty_spec_file_stops_no_verb_and_every_verb_reads_the_run_alike(tmp_path, capsys):
    root, base, gated = _root(tmp_path)
    (gated / "spec.yaml").write_text("")  # a copy onto a full disk
    rows = _status_rows(capsys, root)
    assert [rows[run.name]["state"] for run in (base, gated)] == ["SUCCEEDED", "SUCCEEDED"]
    code, out, err = _run(capsys, "table", "table1", "--preset", "smoke", "--runs-dir", str(root))
    assert code == 0 and "45.00" in _line(out, "Gated Attention"), err
    code, out, err = _run(capsys, "compare", "base-s42", "gated-s42", "--preset", "smoke", "--runs-dir", str(root))
    assert code == 0 and "| avg6 (%) | 40.00 | 45.00 | +5.00 |" in out, err
    assert "note: B: spec.yaml" in out and "its config is not compared" in out


def test_a_fifo_status_reads_damaged_everywhere_and_plan_resumes_it(tmp_path, capsys):
    root, base, gated = _root(tmp_path)
    (gated / "STATUS").unlink()
    os.mkfifo(gated / "STATUS")
    rows = _status_rows(capsys, root)
    assert rows[base.name]["state"] == "SUCCEEDED"
    assert rows[gated.name]["state"] == "DAMAGED" and "STATUS is not a regular file" in rows[gated.name]["reason"]
    assert f"reproduce.py run gated-s42 --preset smoke --runs-dir {root}" in rows[gated.name]["reason"]
    code, out, err = _run(capsys, "table", "table1", "--preset", "smoke", "--runs-dir", str(root))
    assert code == 0, err
    gated_row = _line(out, "Gated Attention")
    assert "45.00" not in gated_row and "not run" not in gated_row and "DAMAGED" in gated_row
    assert "40.00" in _line(out, "Base Transformer") and "STATUS is not a regular file" in out
    code, out, err = _run(capsys, "plan", "gated-s42", "--preset", "smoke", "--runs-dir", str(root), "--json")
    [planned] = json.loads(out)["specs"]
    assert planned["status"] == "DAMAGED" and planned["action"] == "resume"
    assert planned["reason"] == "DAMAGED: STATUS is not a regular file"
    code, out, err = _run(capsys, "plan", "gated-s42", "--preset", "smoke", "--runs-dir", str(root))
    assert "resume: DAMAGED: STATUS is not a regular file" in out


def test_compare_through_a_link_to_a_run_reads_that_run(tmp_path, capsys):
    root, base, gated = _root(tmp_path)
    link = tmp_path / "elsewhere" / "my-run"
    link.parent.mkdir()
    link.symlink_to(gated, target_is_directory=True)
    code, out, err = _run(capsys, "compare", "base-s42", str(link), "--preset", "smoke", "--runs-dir", str(root))
    assert code == 0 and "DAMAGED" not in out + err, err
    assert f"B: gated-s42@smoke  (run {gated};" in out and "| avg6 (%) | 40.00 | 45.00 | +5.00 |" in out
