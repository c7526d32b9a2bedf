"""The registry's map of released checkpoints and `prefetch --checkpoints`, with the hub replaced by a fake."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.checkpoint_import import released_fetch
from exoformer.registry.registry import DEFAULT_REGISTRY, Registry

PAYLOAD = b"PK\x03\x04 a released checkpoint"


@pytest.fixture
def hub(monkeypatch):
    """A fake hub: every download writes PAYLOAD; the LFS checksum is PAYLOAD's unless `bad` is set."""
    calls = []
    state = {"bad": False}

    def download(repo, filename, local_dir):
        calls.append((repo, filename))
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        path = Path(local_dir) / filename
        path.write_bytes(PAYLOAD)
        return path

    def sha(repo, filename):
        return "0" * 64 if state["bad"] else hashlib.sha256(PAYLOAD).hexdigest()

    monkeypatch.setattr(released_fetch, "hub_download", download)
    monkeypatch.setattr(released_fetch, "hub_sha256", sha)
    return calls, state


def test_registry_knows_the_baseline_and_says_why_for_the_rest():
    reg = Registry()
    rows = [r.id for r in reg.tables["table1"].rows]
    assert sorted(row for _, row in reg.checkpoints) == sorted(rows)
    assert reg.checkpoints[("table1", "base")].repo == "Jonnester/Baseline"
    assert reg.checkpoints[("table1", "base")].file == "ckpt_step:38146.pt"
    assert all(e.why for e in reg.checkpoints.values() if e.repo is None)


def test_prefetch_fetches_verifies_and_skips_the_second_time(tmp_path, hub, capsys):
    calls, _ = hub
    assert main(["prefetch", "--checkpoints", "--out", str(tmp_path), "--map", "gated=someone/Gated"]) == 0
    out = capsys.readouterr().out
    assert sorted(calls) == [("Jonnester/Baseline", "ckpt_step:38146.pt"), ("someone/Gated", "ckpt_step:38146.pt")]
    path = tmp_path / "released-checkpoints" / "table1" / "base" / "ckpt_step:38146.pt"
    assert Path(f"{path}.sha256").read_text().split()[0] == hashlib.sha256(PAYLOAD).hexdigest()
    assert "table1 resformer: no repository" in out and "--map resformer=OWNER/NAME" in out
    assert f"reproduce.py evaluate '{path}' --as base" in out
    calls.clear()
    assert main(["prefetch", "--checkpoints", "--out", str(tmp_path), "--map", "gated=someone/Gated"]) == 0
    assert calls == [] and "present" in capsys.readouterr().out


def test_a_checksum_mismatch_is_one_line(tmp_path, hub, capsys):
    hub[1]["bad"] = True
    assert main(["prefetch", "--checkpoints", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "sha256 mismatch" in err and err.count("\n") == 1


@pytest.mark.parametrize("item,needle", [("gatd=a/b", "unknown row 'gatd'"), ("gated", "is not ROW=OWNER/NAME"),
                                         ("gated=not a repo", "is not a hub repository name")])
def test_bad_map(tmp_path, hub, capsys, item, needle):
    assert main(["prefetch", "--checkpoints", "--out", str(tmp_path), "--map", item]) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("body,needle", [
    ("  table1:\n    gated: {repo: null}\n", "repo is null without a why"),
    ("  table1:\n    nope: {repo: a/b}\n", "unknown row 'nope'"),
    ("  table9:\n    gated: {repo: a/b}\n", "unknown table 'table9'"),
    ("  table1:\n    gated: {repo: a/b, sha256: xyz}\n", "sha256 must be 64"),
    ("  table1:\n    gated: {repo: a/b, url: x}\n", "unknown key 'url'"),
])
def test_registry_section_errors(tmp_path, body, needle):
    reg_dir = tmp_path / "experiments"
    shutil.copytree(DEFAULT_REGISTRY, reg_dir)
    (reg_dir / "released.yaml").write_text("released:\n" + body)
    with pytest.raises(UserError, match=needle) as err:
        Registry(reg_dir)
    assert "released.yaml:" in str(err.value)
