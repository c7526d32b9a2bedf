"""The run index: a derived cache of the runs per spec directory, read again when a run changes, rebuilt when
damaged, never the source of truth; asking for some specs reads only their directories."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))

from synthetic import make_run, uniform  # noqa: E402

from exoformer.runs import run_index  # noqa: E402
from exoformer.rundir import FAILED, RunDir, Status, index_file  # noqa: E402


def _snapshot(runs):
    return [(r.spec, r.preset, r.hash12, r.state, r.outputs, r.source, r.steps) for r in runs]


def test_a_second_read_comes_from_the_index_without_opening_spec_files(tmp_path, monkeypatch):
    make_run(tmp_path, "base-s42", preset="smoke", accuracies=uniform(0.3))
    make_run(tmp_path, "gated-s42", preset="smoke", accuracies=uniform(0.3))
    first = run_index.find_runs(tmp_path)
    assert index_file(tmp_path, "base-s42").is_file() and len(first) == 2

    def refuse(run):
        raise AssertionError(f"read {run} again")

    monkeypatch.setattr(run_index, "read_run_info", refuse)
    assert _snapshot(run_index.find_runs(tmp_path)) == _snapshot(first)


def test_a_changed_run_is_read_again(tmp_path):
    path = make_run(tmp_path, "base-s42", preset="smoke", accuracies=uniform(0.3))
    [before] = run_index.find_runs(tmp_path)
    assert before.state == "SUCCEEDED" and before.has_eval
    run = RunDir(path)
    run.write_status(Status(state=FAILED, reason="x"))
    run.eval_rows.unlink()
    run.validation.unlink()
    [after] = run_index.find_runs(tmp_path)
    assert after.state == FAILED and not after.has_eval
    run.path.rename(run.path.with_name(f"{run.path.name}.old-20260101"))  # moved aside by --force: not a run
    assert run_index.find_runs(tmp_path) == []


@pytest.mark.parametrize("damage", [b"\x00garbage", b"[]", b'{"version": 2, "runs": {"x": 1}}',
                                    b'{"version": 2, "runs": {"HASH": {"key": "KEY", "info": ["base-s42", "x"]}}}'])
def test_a_damaged_index_is_rebuilt_never_trusted(tmp_path, damage):
    path = make_run(tmp_path, "base-s42", preset="smoke", accuracies=uniform(0.3))
    fresh = _snapshot(run_index.find_runs(tmp_path))
    cache = index_file(tmp_path, "base-s42")
    key = json.dumps(run_index.entry_key(RunDir(path)))
    cache.write_bytes(damage.replace(b"HASH", path.name.encode()).replace(b'"KEY"', key.encode()))
    assert _snapshot(run_index.find_runs(tmp_path)) == fresh
    assert json.loads(cache.read_text())["runs"][path.name]["info"][0] == "base-s42"  # rewritten


def test_asking_for_some_specs_reads_only_their_directories(tmp_path, monkeypatch):
    for name in ("base-s42", "gated-s42", "resformer-s42"):
        make_run(tmp_path, name, preset="smoke", accuracies=uniform(0.3))
    read = []
    original = run_index.run_dirs_of_spec
    monkeypatch.setattr(run_index, "run_dirs_of_spec", lambda root, name: read.append(name) or original(root, name))
    found = run_index.find_runs(tmp_path, specs=["gated-s42", "no-such-spec"])
    assert [r.spec for r in found] == ["gated-s42"] and sorted(read) == ["gated-s42", "no-such-spec"]


def test_run_spec_files_are_read_with_a_safe_loader():
    """The index's fast spec reader is PyYAML's SafeLoader (or its libyaml twin): no Python object tags."""
    import yaml

    from exoformer.runs import run_index

    assert run_index.SAFE_LOADER in (yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    with pytest.raises(yaml.constructor.ConstructorError):
        yaml.load("name: !!python/object/apply:os.getcwd []", Loader=run_index.SAFE_LOADER)
