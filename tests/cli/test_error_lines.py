"""Bad input through the command line: each is one stderr line `error: WHERE: MESSAGE (fix: FIX)` and exit 2.

WHERE names the place once (it holds no ": " of its own, and the message does not repeat it); the fix sits in
`(fix: ...)` at the end, never run into the message (exoformer/errors.py renders the line).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from exoformer.cli import main
from exoformer.registry.registry import REPO_ROOT

LINE = re.compile(r"^error: (?P<where>(?:(?!: ).)+): (?P<message>.+?) \(fix: (?P<fix>.+)\)$")


def _repeats_its_place(match: re.Match) -> bool:
    """The message starts with a word of its WHERE ("--jobs: --jobs must be ...")."""
    return match["message"].split()[0].rstrip(":") in match["where"].split()


def _cases(tmp: Path) -> dict[str, list[str]]:
    a_file = tmp / "a-file"
    a_file.write_text("x\n")
    runs = tmp / "runs"
    runs.mkdir()
    broken = tmp / "experiments"
    shutil.copytree(REPO_ROOT / "experiments", broken)
    (broken / "main.yaml").write_text((broken / "main.yaml").read_text() + "\n  bad: [\n")
    return {
        "unknown spec": ["show", "e-exoformr-s42"],
        "a NaN through --set": ["show", "e-exoformer-s42", "--set", "train.muon_lr=.nan"],
        "an unknown --set key": ["show", "e-exoformer-s42", "--set", "train.nope=1"],
        "--set without =": ["show", "e-exoformer-s42", "--set", "train.muon_lr"],
        "a value of the wrong type": ["plan", "e-exoformer-s42", "--set", "train.seq_len=abc"],
        "a value out of range": ["show", "e-exoformer-s42", "--set", "eval.limit=-3"],
        "an impossible model": ["show", "e-exoformer-s42", "--set", "model.n_head=7"],
        "an unknown preset": ["show", "e-exoformer-s42", "--preset", "tiny"],
        "a profile that is a path": ["plan", "e-exoformer-s42", "--profile", "../x"],
        "an unknown profile": ["plan", "e-exoformer-s42", "--profile", "nosuch"],
        "an unknown table": ["table", "tabel1", "--runs-dir", str(runs)],
        "a runs root that is a file": ["diff", "table1", "--runs-dir", str(a_file)],
        "an unknown figure": ["figure", "val-loss-tabel1", "--runs-dir", str(runs)],
        "a figure without runs": ["figure", "val-loss-table1", "--runs-dir", str(runs), "--preset", "smoke"],
        "a report into a file": ["report", "--runs-dir", str(runs), "--out", str(a_file)],
        "a missing registry": ["validate", "--registry", str(tmp / "nope")],
        "reported.yaml that is a directory": ["validate", "--reported", str(tmp)],
        "an unknown option": ["list", "--bogus"],
        "an unknown target": ["run", "nosuchthing", "--runs-dir", str(runs)],
        "zero jobs": ["run", "e-exoformer-s42", "--jobs", "0", "--runs-dir", str(runs)],
        "an unknown table row": ["evaluate", str(a_file), "--as", "table1:nosuchrow", "--runs-dir", str(runs)],
        "an empty runs root": ["table", "table1", "--runs-dir", ""],
        "zero threads": ["run", "e-exoformer-s42", "--threads", "0", "--runs-dir", str(runs)],
        "an MFU above 1": ["plan", "e-exoformer-s42", "--set", "profile.gpu.mfu=2"],
        "a registry file that is not YAML": ["validate", "--registry", str(broken)],
    }


def test_every_bad_input_is_one_error_line_with_its_fix_apart(tmp_path, capsys):
    cases = _cases(tmp_path)
    assert len(cases) >= 15
    wrong = []
    for what, argv in cases.items():
        code = main(argv)
        captured = capsys.readouterr()
        lines = captured.err.splitlines()
        match = LINE.match(lines[0]) if len(lines) == 1 else None
        if code != 2 or match is None:
            wrong.append(f"{what}: exit {code}, stderr {captured.err!r}")
        elif _repeats_its_place(match):
            wrong.append(f"{what}: the message repeats its place: {lines[0]!r}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("line", [
    "error: --jobs: --jobs must be >= 1, got 0 (fix: use --jobs 2)",
    "error: --set train.muon_lr: train.muon_lr: must be a finite number, got nan (fix: write a finite number)",
    "error: --runs-dir: runs root /x is a file, not a directory name the directory that holds the run directories",
])
def test_the_check_refuses_lines_of_the_old_shape(line):
    """The line check itself: a repeated place, a place with two parts, or a fix run into the message."""
    match = LINE.match(line)
    assert match is None or _repeats_its_place(match)
