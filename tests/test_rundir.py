"""RunDir reads every file tolerantly: a damaged STATUS is DAMAGED with the fix, a damaged metrics line is named
with file:line, a damaged result file is a one-line error; nothing raises a traceback."""

from __future__ import annotations

import json
import os

import pytest

from exoformer.errors import UserError
from exoformer.rundir import DAMAGED, RUNNING, SUCCEEDED, RunDir, Status


@pytest.mark.parametrize("content", [
    os.urandom(200) + b"\xff\xfe",               # random bytes, not UTF-8
    b'{"pid": "x"}',                             # no state, mistyped pid
    b'{"state": "RUNNING", "pid": "x"}',         # a state, but a field of the wrong type
    b'{"state": "DONE"}',                        # an unknown state
    b'["SUCCEEDED"]',                            # JSON, not an object
    b"SUCCEEDED\n",                              # a bare word written by hand on an unfinished run
    b'{"state": "SUCCEEDED", "updated": 5}',     # a mistyped timestamp
])
def test_damaged_status_reads_as_damaged_with_the_fix(tmp_path, content):
    rd = RunDir(tmp_path)
    rd.status_file.write_bytes(content)
    status = rd.read_status()
    assert status.state == DAMAGED and str(rd.status_file) in status.reason and "--retry-failed" in status.reason


def test_status_that_is_a_directory_reads_as_damaged(tmp_path):
    rd = RunDir(tmp_path)
    rd.status_file.mkdir()
    assert rd.read_status().state == DAMAGED


def test_status_round_trip_and_update_over_a_damaged_file(tmp_path):
    rd = RunDir(tmp_path)
    assert rd.read_status() is None
    rd.write_status(Status(state=RUNNING, pid=12, job_id="3_1"))
    assert (rd.read_status().state, rd.read_status().pid) == (RUNNING, 12)
    rd.status_file.write_bytes(b"\x00garbage")
    rd.update_status(state=SUCCEEDED)  # the owning job may always write a fresh record
    assert rd.read_status().state == SUCCEEDED


def test_damaged_metrics_lines_are_named_and_skipped(tmp_path):
    rd = RunDir(tmp_path)
    lines = [json.dumps({"kind": "val", "step": 1, "tokens": 10, "val_loss": 2.0}).encode(), b"\xff\xfe not utf8",
             b"[1, 2]", json.dumps({"kind": "val", "step": "x", "tokens": 20, "val_loss": 1.5}).encode(),
             json.dumps({"kind": "val", "step": 2, "tokens": 20, "val_loss": 1.0}).encode()]
    rd.metrics_file.write_bytes(b"\n".join(lines) + b"\n")
    problems: list[str] = []
    rows = list(rd.metrics("val", problems=problems))
    assert len(rows) == 3
    assert problems == [f"{rd.metrics_file}:2: not a JSON object line (skipped)",
                        f"{rd.metrics_file}:3: not a JSON object line (skipped)"]
    assert rd.val_curve() == ([10.0, 20.0], [2.0, 1.0])  # the mistyped step is left out, never a crash


def test_damaged_result_rows_are_one_line_errors(tmp_path):
    rd = RunDir(tmp_path)
    rd.eval_dir.mkdir()
    rd.eval_rows.write_text('{"task": "piqa", "metric": "acc", "value": 0.5}\nnot json\n')
    with pytest.raises(UserError, match=r"long\.jsonl:2"):
        rd.result_rows("gated-s42")
    rd.eval_rows.write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match="not a UTF-8 text file"):
        rd.result_rows("gated-s42")


def test_val_curve_reads_the_author_convention_and_cross_entropy_by_name_and_old_lines_still(tmp_path):
    from exoformer.rundir import LEGACY_VAL_KEY, VAL_CE_KEY, VAL_CURVE_KEY

    rd = RunDir(tmp_path)
    lines = [{"kind": "val", "step": 1, "tokens": 10, LEGACY_VAL_KEY: 3.0},  # before either key: pure CE
             {"kind": "val", "step": 2, "tokens": 20, LEGACY_VAL_KEY: 2.0, VAL_CURVE_KEY: 2.002},  # CE + official
             {"kind": "val", "step": 3, "tokens": 30, VAL_CURVE_KEY: 1.5015, VAL_CE_KEY: 1.5},  # today's lines
             {"kind": "train", "step": 3, "tokens": 30, "loss": 9.0}]
    rd.metrics_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert rd.val_curve() == ([10.0, 20.0, 30.0], [3.0, 2.002, 1.5015])
    assert rd.val_curve("official") == rd.val_curve()
    assert rd.val_curve("ce") == ([10.0, 20.0, 30.0], [3.0, 2.0, 1.5])


def test_run_dirs_of_spec_lists_hash_folders_and_on_request_those_moved_aside(tmp_path):
    from exoformer.rundir import run_dirs_of_spec

    spec = tmp_path / "base-s42"
    for name in ("bbbbbbbbbbbb", "aaaaaaaaaaaa", "aaaaaaaaaaaa.old-20261204T020000", "notes", "cccc"):
        (spec / name).mkdir(parents=True)
    (spec / "dddddddddddd").symlink_to(spec / "aaaaaaaaaaaa")
    names = [os.path.basename(rd.path) for rd in run_dirs_of_spec(tmp_path, "base-s42")]
    assert names == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    aside = [os.path.basename(rd.path) for rd in run_dirs_of_spec(tmp_path, "base-s42", moved_aside=True)]
    assert aside == ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "aaaaaaaaaaaa.old-20261204T020000"]
    assert run_dirs_of_spec(tmp_path, "missing") == []
