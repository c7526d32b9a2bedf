"""The run index as a reader may trust it (docs/architecture.md "Trust model"): it lives in the reading user's cache
directory, keyed by the runs root's real path, never inside the root, so whoever can write a runs root cannot
forge a DAMAGED run's entry to SUCCEEDED; an index file another user could have written is not read; an entry
whose key does not match the run's files is read again from them; a temporary file of a writer that died is
removed by the next read that writes, whatever its age."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

import pytest

from synthetic import make_run, selection, uniform

from exoformer.rundir import RUN_INDEX_DIR, RunDir, index_dir, index_file
from exoformer.runs import run_index

SPEC = "base-s42"


def _damaged(root: Path) -> tuple[RunDir, dict]:
    """A finished run whose result rows were edited after its evaluate stage recorded them (DAMAGED), and the
    index entry's fields as a reader cached them while it was intact (SUCCEEDED)."""
    run = RunDir(make_run(root, SPEC, preset="smoke", accuracies=uniform(0.3)))
    rows = [json.loads(line) for line in run.eval_rows.read_text().splitlines()]
    run.record_stage("evaluate", {"stage": "evaluate", "result": {
        "metrics": {f"{r['task']}/{r['metric']}": r["value"] for r in rows}}})
    run_index.find_runs(root)
    intact = json.loads(index_file(root, SPEC).read_text())["runs"][run.path.name]["info"]
    assert intact["state"] == "SUCCEEDED"
    run.write_rows(run.eval_rows, [{**r, "value": 0.9} for r in rows])  # a +60 point "gain"
    return run, intact


def _forge(path: Path, run: RunDir, info: dict) -> None:
    """Write an index file whose entry matches the run's files now and says what `info` says: what anyone who
    can write the folder can write (any digest stored beside it too: one without a secret key is recomputed)."""
    key = run_index.entry_key(run)
    entry = {"key": key, "info": info}
    seal = getattr(run_index.verify, "seal", None)  # the unkeyed seal of earlier versions
    if seal is not None:
        entry["seal"] = seal(key, info)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": run_index.INDEX_VERSION, "runs": {run.path.name: entry}}))


def _reads_damaged(root: Path) -> None:
    """find_runs and the table's read path (Selection.pick) both say DAMAGED and show no number."""
    [info] = run_index.find_runs(root)
    assert info.state == "DAMAGED" and "0.9" in info.damage, info.damage
    picked = selection(root, preset="smoke").pick(SPEC)
    assert picked.note.startswith(f"DAMAGED {SPEC}") and picked.rows.empty, picked.note


def test_a_forged_index_inside_the_runs_root_is_never_read(tmp_path):
    run, intact = _damaged(tmp_path)
    _forge(tmp_path / RUN_INDEX_DIR / f"{SPEC}.json", run, intact)  # where the index lived: any root writer can
    _reads_damaged(tmp_path)
    _reads_damaged(tmp_path)  # and again from the index this reader wrote
    assert json.loads((tmp_path / RUN_INDEX_DIR / f"{SPEC}.json").read_text())["runs"][run.path.name]["info"][
        "state"] == "SUCCEEDED"  # the old folder is left alone, neither read nor rewritten


def test_the_index_lives_in_the_users_cache_keyed_by_the_roots_real_path(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    root = tmp_path / "runs"
    make_run(root, SPEC, preset="smoke", accuracies=uniform(0.3))
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    first = run_index.find_runs(root)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing written into the root
    digest = hashlib.sha256(os.fsencode(os.path.realpath(root))).hexdigest()
    assert index_file(root, SPEC) == cache / "exoformer" / "run-index" / digest / f"{SPEC}.json"
    assert index_file(root, SPEC).is_file()
    assert (index_dir(root).stat().st_mode & 0o777, index_file(root, SPEC).stat().st_mode & 0o777) == (0o700, 0o600)
    (tmp_path / "link").symlink_to(root)  # another path to the same root reads the same index

    def refuse(run):
        raise AssertionError(f"read {run} again")

    monkeypatch.setattr(run_index, "read_run_info", refuse)
    assert [(r.hash12, r.state) for r in run_index.find_runs(tmp_path / "link")] == \
        [(r.hash12, r.state) for r in first]


def test_without_xdg_cache_home_the_index_is_under_the_home_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for value in (None, "relative/cache"):  # the XDG spec: a relative value is ignored
        if value is None:
            monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        else:
            monkeypatch.setenv("XDG_CACHE_HOME", value)
        assert index_dir(tmp_path).parent == tmp_path / "home" / ".cache" / "exoformer" / "run-index"


def test_the_readers_own_index_is_read_as_it_says(tmp_path):
    """The control of the forgeries here: the same entry in the reader's own private index is read as written
    (only the reading user can write there, so it is what a read of theirs wrote)."""
    run, intact = _damaged(tmp_path)
    _forge(index_file(tmp_path, SPEC), run, intact)
    assert [info.state for info in run_index.find_runs(tmp_path)] == ["SUCCEEDED"]


@pytest.mark.parametrize("loose", ["file", "folder", "owner"])
def test_an_index_file_another_user_could_have_written_is_not_read(tmp_path, loose):
    run, intact = _damaged(tmp_path)
    path = index_file(tmp_path, SPEC)
    _forge(path, run, intact)
    if loose == "file":
        path.chmod(0o666)
    elif loose == "folder":
        path.parent.chmod(0o777)
    else:
        if os.geteuid() != 0:
            pytest.skip("only root can give a file to another user")
        os.chown(path, 4242, 4242)
    _reads_damaged(tmp_path)


def test_an_entry_whose_key_does_not_match_the_runs_files_is_read_again(tmp_path):
    """A root writer who edits a run's rows in place and sets their time back still changes the key (the inode
    change time): the entry cached while the run was intact is not shown."""
    run, _ = _damaged(tmp_path)
    rows = run.eval_rows.read_text()
    stamp = run.eval_rows.stat()
    run.eval_rows.write_text(rows.replace("0.9", "0.3"))  # back to what the stage recorded
    [intact] = run_index.find_runs(tmp_path)
    assert intact.state == "SUCCEEDED"
    run.eval_rows.write_text(rows)
    os.utime(run.eval_rows, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    _reads_damaged(tmp_path)


def test_a_stage_record_edited_in_place_is_read_again(tmp_path):
    run, _ = _damaged(tmp_path)
    record = run.stage_file("evaluate")
    text = record.read_text()
    record.write_text(text.replace("0.3", "0.9"))  # the record agrees with the edited rows
    [agreeing] = run_index.find_runs(tmp_path)
    assert agreeing.state == "SUCCEEDED"
    record.write_text(text)  # the same size: only the times change
    _reads_damaged(tmp_path)


def _temp(folder: Path, tag: str) -> Path:
    temp = folder / f".{SPEC}.json.{tag}.tmp"  # exoformer.io.atomic_write_bytes's name for it
    temp.write_text("{")
    return temp


def _touch(run: RunDir) -> None:
    run.status_file.write_text(run.status_file.read_text())  # something changed: the index is written again


def test_a_fresh_temp_file_of_a_dead_writer_does_not_survive_the_next_read(tmp_path):
    run = RunDir(make_run(tmp_path, SPEC, preset="smoke", accuracies=uniform(0.3)))
    run_index.find_runs(tmp_path)
    folder = index_file(tmp_path, SPEC).parent
    dead = _temp(folder, "abcd1234")  # a writer killed a moment ago (younger than any age rule)
    _touch(run)
    [info] = run_index.find_runs(tmp_path)
    assert info.state == "SUCCEEDED" and not dead.exists()
    assert json.loads(index_file(tmp_path, SPEC).read_text())["runs"][run.path.name]["info"]["state"] == "SUCCEEDED"


def test_a_read_that_writes_nothing_sweeps_once_per_process(tmp_path, monkeypatch):
    make_run(tmp_path, SPEC, preset="smoke", accuracies=uniform(0.3))
    run_index.find_runs(tmp_path)
    dead = _temp(index_file(tmp_path, SPEC).parent, "abcd1234")
    run_index.find_runs(tmp_path)  # this process swept the folder when it wrote it
    assert dead.exists()
    monkeypatch.setattr(run_index, "_SWEPT", set())  # a new process
    run_index.find_runs(tmp_path)
    assert not dead.exists()


def test_the_temp_file_of_a_live_writer_is_left_alone(tmp_path):
    run = RunDir(make_run(tmp_path, SPEC, preset="smoke", accuracies=uniform(0.3)))
    run_index.find_runs(tmp_path)
    folder = index_file(tmp_path, SPEC).parent
    with open(folder / run_index.INDEX_LOCK, "a") as writer:  # another process writing right now
        fcntl.flock(writer, fcntl.LOCK_SH)
        live = _temp(folder, "efgh5678")
        _touch(run)
        run_index.find_runs(tmp_path)
        assert live.exists()
    _touch(run)  # that writer died without renaming its file: the kernel dropped its lock
    run_index.find_runs(tmp_path)
    assert not live.exists()
