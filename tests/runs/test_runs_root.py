"""A runs root that is a file, a dangling symbolic link or missing: every verb gives the same one error line and
exit 2 (`run`, `plan` and `evaluate` create a missing one; `list` and `show` accept the default root missing)."""

from __future__ import annotations

import pytest

from exoformer.cli import main
from exoformer.runs.rundirs import RUNS_ENV

READING = [["status"], ["table", "table1"], ["diff", "table1"], ["figure", "val-loss-table1"], ["claims"],
           ["report"], ["list"], ["show", "base-s42"]]
WRITING = [["run", "base-s42", "--preset", "smoke", "--dry-run"], ["plan", "base-s42", "--preset", "smoke"]]


def _bad_roots(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    return {"file": (afile, "is not a directory"), "dangling": (dangling, "is a symbolic link to nothing")}


@pytest.mark.parametrize("kind", ["file", "dangling"])
@pytest.mark.parametrize("how", ["option", "env"])
def test_a_file_or_a_dangling_link_is_one_error_line_for_every_verb(tmp_path, capsys, monkeypatch, kind, how):
    root, problem = _bad_roots(tmp_path)[kind]
    lines = set()
    for verb in READING + WRITING:
        if how == "env":
            monkeypatch.setenv(RUNS_ENV, str(root))
            argv = [*verb, "--out", str(tmp_path / "o")] if verb[0] in ("report", "figure") else verb
        else:
            argv = [*verb, "--runs-dir", str(root)] + (["--out", str(tmp_path / "o")]
                                                       if verb[0] in ("report", "figure") else [])
        assert main(argv) == 2, verb
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and problem in err, (verb, err)
        lines.add(err)
    assert len(lines) == 1, lines  # the same line whatever the verb


def test_a_missing_root_is_an_error_for_reading_verbs_and_fine_for_writing_ones(tmp_path, capsys):
    missing = tmp_path / "missing"
    lines = set()
    for verb in READING:
        argv = [*verb, "--runs-dir", str(missing)] + (["--out", str(tmp_path / "o")]
                                                      if verb[0] in ("report", "figure") else [])
        assert main(argv) == 2, verb
        err = capsys.readouterr().err
        assert "does not exist" in err and err.count("\n") == 1, (verb, err)
        lines.add(err)
    assert len(lines) == 1
    for verb in WRITING:
        assert main([*verb, "--runs-dir", str(missing)]) == 0, verb
    assert not missing.exists()  # planning creates nothing
