"""Inputs checked against recorded checksums before use: the cached smoke corpus and SHA256SUMS files."""

import numpy as np
import pytest

import exoformer.data as data
from exoformer.data.checksums import SUMS_FILE, read_sums, verify_files, write_sums
from exoformer.data.shards import HEADER_BYTES, find_shards, read_shard
from exoformer.data.smoke import corpus
from exoformer.data.smoke import tasks as smoke_tasks
from exoformer.errors import UserError

SMALL = corpus.SmokeCorpusConfig(train_tokens=40_000, val_tokens=8_000, shard_tokens=15_000, seed=3)


@pytest.fixture
def small_smoke(tmp_path, monkeypatch):
    """resolve_data('smoke') building the small corpus into an empty cache; returns the build calls."""
    monkeypatch.setenv("EXOFORMER_CACHE", str(tmp_path))
    calls = []
    real = corpus.write_corpus
    monkeypatch.setattr(corpus, "write_corpus", lambda out: calls.append(out) or real(out, SMALL))
    return calls


def test_cached_corpus_records_checksums_of_every_file(small_smoke):
    first = data.resolve_data("smoke")
    sums = read_sums(first / SUMS_FILE)
    assert sorted(sums) == sorted(p.name for p in first.iterdir() if p.name != SUMS_FILE)
    verify_files(first, [first / name for name in sums], sums_path=first / SUMS_FILE, fix="-")


def test_zeroed_cached_shard_is_detected_and_rebuilt_not_trained_on(small_smoke, tmp_path):
    first = data.resolve_data("smoke")
    shard = find_shards(first, "train")[1]
    good = shard.read_bytes()
    # Same size, valid header, every token zeroed: passes the header/length check, so only a checksum sees it.
    shard.write_bytes(good[:HEADER_BYTES] + bytes(len(good) - HEADER_BYTES))
    assert int(read_shard(shard).max()) == 0
    with pytest.warns(UserWarning, match=r"smoke_train_000002\.bin does not match its recorded checksum"):
        again = data.resolve_data("smoke")
    assert again == first and len(small_smoke) == 2  # rebuilt
    assert shard.read_bytes() == good  # deterministic generator: the same bytes as before the damage
    assert int(read_shard(shard).max()) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]  # no stale or building folder left
    data.resolve_data("smoke")
    assert len(small_smoke) == 2  # a good cache is reused, not rebuilt


def test_cache_without_recorded_checksums_is_rebuilt(small_smoke):
    first = data.resolve_data("smoke")
    (first / SUMS_FILE).unlink()
    with pytest.warns(UserWarning, match=f"has no {SUMS_FILE}"):
        assert data.resolve_data("smoke") == first
    assert len(small_smoke) == 2 and (first / SUMS_FILE).is_file()


def test_extra_or_missing_cached_file_is_rebuilt(small_smoke):
    first = data.resolve_data("smoke")
    (first / "vocab.json").unlink()
    with pytest.warns(UserWarning, match="differ from its"):
        data.resolve_data("smoke")
    assert (first / "vocab.json").is_file() and len(small_smoke) == 2


def test_malformed_sums_line_is_one_line_error_naming_file_and_line(tmp_path):
    sums = tmp_path / SUMS_FILE
    sums.write_text(f"{'a' * 64}  one.jsonl\n\nnot-a-digest two.jsonl\n")
    with pytest.raises(UserError) as err:
        read_sums(sums)
    assert f"{sums}:3" in str(err.value) and "\n" not in str(err.value)
    sums.write_bytes(f"{'a' * 64}  one.jsonl\n".encode() + b"\xff\xfe  two.jsonl\n")
    with pytest.raises(UserError, match=f"{sums}:2"):
        read_sums(sums)


def test_smoke_task_sums_with_a_malformed_line_name_file_and_line(tmp_path):
    import shutil

    copy = tmp_path / "smoke_data"
    shutil.copytree(smoke_tasks.SMOKE_DATA_DIR, copy)
    sums = copy / smoke_tasks.SUMS_FILE
    lines = sums.read_text().splitlines()
    lines[4] = lines[4].replace("  ", " ", 1)  # one space: not sha256sum's format
    sums.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError) as err:
        smoke_tasks.verify_smoke_data(copy)
    assert f"{sums}:5" in str(err.value) and "\n" not in str(err.value)


def test_write_and_verify_sums_round_trip_and_detect_a_change(tmp_path):
    a, b = tmp_path / "a.bin", tmp_path / "sub" / "b.bin"
    b.parent.mkdir()
    a.write_bytes(np.arange(10, dtype=np.uint16).tobytes())
    b.write_bytes(b"hello")
    write_sums(tmp_path, [a, b])
    assert sorted(read_sums(tmp_path / SUMS_FILE)) == ["a.bin", "sub/b.bin"]
    verify_files(tmp_path, [a, b], sums_path=tmp_path / SUMS_FILE, fix="-")
    b.write_bytes(b"hellp")
    with pytest.raises(UserError, match="checksum mismatch") as err:
        verify_files(tmp_path, [a, b], sums_path=tmp_path / SUMS_FILE, fix="-")
    assert str(b) in str(err.value)
