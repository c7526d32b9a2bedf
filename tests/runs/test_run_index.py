"""The run index: a plain cache of the runs per spec directory (identity, state, outputs), read again when a run
changes, rebuilt when damaged or deleted, never the source of truth; asking for some specs reads only their
directories; a run without its identity file reads DAMAGED."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


from synthetic import make_run, selection, uniform  # noqa: E402

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


ENTRY = b'{"version": VERSION, "runs": {"HASH": {"key": "KEY", "info": INFO}}}'
"""An index file of this version with one entry whose key matches the run; INFO is what it caches."""


@pytest.mark.parametrize("damage", [b"\x00garbage", b"[]", b'{"version": VERSION, "runs": {"x": 1}}',
                                    ENTRY.replace(b"INFO", b'["base-s42", "x"]'),
                                    ENTRY.replace(b"INFO", b'{"identity": {"spec": "base-s42", "seed": "x"}}'),
                                    b"FRESH:seed=42.5", b"FRESH:state=1", b"FRESH:outputs=null"])
def test_a_damaged_index_is_rebuilt_never_trusted(tmp_path, damage):
    path = make_run(tmp_path, "base-s42", preset="smoke", accuracies=uniform(0.3))
    fresh = _snapshot(run_index.find_runs(tmp_path))
    cache = index_file(tmp_path, "base-s42")
    if damage.startswith(b"FRESH:"):  # the entry as written, one field of it changed to a value of another type
        field, _, value = damage.decode().removeprefix("FRESH:").partition("=")
        info = json.loads(cache.read_text())["runs"][path.name]["info"]
        (info["identity"] if field in info["identity"] else info)[field] = json.loads(value)
        damage = ENTRY.replace(b"INFO", json.dumps(info).encode())
    key = json.dumps(run_index.entry_key(RunDir(path)))
    cache.write_bytes(damage.replace(b"HASH", path.name.encode()).replace(b'"KEY"', key.encode())
                      .replace(b"VERSION", str(run_index.INDEX_VERSION).encode()))
    assert _snapshot(run_index.find_runs(tmp_path)) == fresh
    assert json.loads(cache.read_text())["runs"][path.name]["info"]["identity"]["spec"] == "base-s42"  # rewritten


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


def test_an_entry_is_its_identity_by_field_name(tmp_path):
    path = make_run(tmp_path, "gated-s42", preset="smoke", accuracies=uniform(0.3), overrides=("train.steps=31",))
    [info] = run_index.find_runs(tmp_path)
    assert info.identity == RunDir(path).identity() and info.identity.steps == 31
    cached = json.loads(index_file(tmp_path, "gated-s42").read_text())["runs"][path.name]["info"]
    assert cached["identity"] == info.identity.to_dict() and cached["state"] == "SUCCEEDED"


def test_a_run_without_an_identity_reads_damaged_and_is_read_again_once_it_has_one(tmp_path):
    path = make_run(tmp_path, "gated-s42", preset="smoke", accuracies=uniform(0.3), identity=False)
    [info] = run_index.find_runs(tmp_path)
    assert info.identity is None and info.state == "DAMAGED" and info.spec == "gated-s42"
    assert info.damage.startswith("identity.json missing or unreadable: no such file (fix: `reproduce.py run "
                                  "gated-s42 --preset smoke --runs-dir ") and info.damage.endswith("to rerun it)")
    assert [r.damage for r in run_index.find_runs(tmp_path, preset="450m")] == [info.damage]  # seen in every reading
    cached = json.loads(index_file(tmp_path, "gated-s42").read_text())["runs"][path.name]["info"]
    assert cached["identity"] is None and cached["damage"] == info.damage
    source = make_run(tmp_path / "other", "gated-s42", preset="smoke", accuracies=uniform(0.3))
    RunDir(path).identity_file.write_bytes(RunDir(source).identity_file.read_bytes())
    [again] = run_index.find_runs(tmp_path)  # its entry is stale: the identity file's key changed
    assert again.state == "SUCCEEDED" and again.preset == "smoke" and again.identity == RunDir(source).identity()


def test_a_damaged_identity_file_makes_a_run_damaged(tmp_path):
    path = make_run(tmp_path, "gated-s42", preset="smoke", accuracies=uniform(0.3))
    RunDir(path).identity_file.write_text("{not json")
    [info] = run_index.find_runs(tmp_path)
    assert info.state == "DAMAGED" and "identity.json" in info.damage and "not JSON" in info.damage
    assert info.spec == "gated-s42" and info.identity is None


def test_an_identity_edited_in_place_is_read_again(tmp_path):
    path = make_run(tmp_path, "gated-s42", preset="smoke", accuracies=uniform(0.3))
    [before] = run_index.find_runs(tmp_path)
    data = json.loads(RunDir(path).identity_file.read_text())
    RunDir(path).identity_file.write_text(json.dumps({**data, "differs": ["eval.limit=3"]}))
    [after] = run_index.find_runs(tmp_path)
    assert before.identity.differs != after.identity.differs == ("eval.limit=3",)


def test_the_index_rebuilt_after_deletion_gives_the_same_selection(tmp_path):
    import shutil

    make_run(tmp_path, "base-s42", preset="smoke", accuracies=uniform(0.3))
    make_run(tmp_path, "gated-s42", preset="smoke", accuracies=uniform(0.4))
    stale = make_run(tmp_path, "gated-s42", preset="smoke", accuracies=uniform(0.5), overrides=("train.steps=31",))
    make_run(tmp_path, "resformer-s42", preset="smoke", accuracies=uniform(0.4), identity=False)

    def picks():
        read = selection(tmp_path, preset="smoke")
        return [(p.run.hash12, p.run.state, p.note, p.rows.to_json())
                for p in map(read.pick, ("base-s42", "gated-s42", "resformer-s42"))]

    before = picks()
    assert before[1][0] != Path(stale).name and before[2][2].startswith("DAMAGED resformer-s42")
    shutil.rmtree(index_file(tmp_path, "base-s42").parent)
    assert picks() == before and index_file(tmp_path, "base-s42").is_file()


def test_what_a_run_is_comes_from_its_identity_never_from_its_spec_file(tmp_path):
    path = make_run(tmp_path, "base-s42", preset="smoke", accuracies=uniform(0.3), overrides=("train.steps=31",))
    RunDir(path).spec_file.write_text("{not yaml")  # the resolved config: for people and for resuming only
    [info] = run_index.find_runs(tmp_path)
    assert (info.state, info.damage, info.preset, info.steps) == ("SUCCEEDED", None, "smoke", 31)
    assert info.identity.overrides == {"train.steps": 31}
    picked = selection(tmp_path, preset="smoke", overrides=("train.steps=31",)).pick("base-s42")
    assert picked.run.hash12 == path.name and not picked.rows.empty and not picked.note
