"""Shard format: header validation with one-line errors, round trip, header words never read as tokens."""

import numpy as np
import pytest

from exoformer.data.shards import (
    HEADER_BYTES,
    MAGIC,
    find_shards,
    read_shard,
    write_shard,
)
from exoformer.errors import UserError


def _raw_shard(path, *, magic=MAGIC, version=1, count=4, tokens=(1, 2, 3, 4)):
    header = np.zeros(256, dtype="<i4")
    header[:3] = (magic, version, count)
    path.write_bytes(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())
    return path


def _one_line_error(path, match):
    with pytest.raises(UserError, match=match) as info:
        read_shard(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def test_round_trip_returns_exactly_the_tokens(tmp_path):
    tokens = np.array([50256, 0, 7, 65535, 1234, 50256, 9], dtype=np.int64)
    path = write_shard(tmp_path / "x_train_000001.bin", tokens)
    assert path.stat().st_size == HEADER_BYTES + 2 * tokens.size
    read = read_shard(path)
    assert read.dtype == np.uint16 and read.shape == tokens.shape
    np.testing.assert_array_equal(read, tokens)


def test_header_words_are_never_returned(tmp_path):
    # The header as uint16 words holds 20240520 -> (55432, 308) and the count; none of them may appear.
    path = write_shard(tmp_path / "s.bin", np.full(3, 5))
    assert read_shard(path).tolist() == [5, 5, 5]


def test_rejects_bad_magic(tmp_path):
    message = _one_line_error(_raw_shard(tmp_path / "a.bin", magic=12345), "bad magic 12345")
    assert "expected 20240520" in message and "not a modded-nanogpt token shard" in message


def test_rejects_wrong_version(tmp_path):
    _one_line_error(_raw_shard(tmp_path / "a.bin", version=7), "version 7 .expected 1")


def test_rejects_truncated_file(tmp_path):
    _one_line_error(_raw_shard(tmp_path / "a.bin", count=10), "truncated shard")


def test_rejects_padded_file(tmp_path):
    _one_line_error(_raw_shard(tmp_path / "a.bin", count=2), "padded shard")


def test_rejects_file_shorter_than_header(tmp_path):
    path = tmp_path / "tiny.bin"
    path.write_bytes(b"\x00" * 100)
    _one_line_error(path, "shorter than the 1024-byte header")


def test_write_refuses_ids_outside_uint16(tmp_path):
    with pytest.raises(UserError, match="65535"):
        write_shard(tmp_path / "a.bin", [1, 65536])
    with pytest.raises(UserError):
        write_shard(tmp_path / "b.bin", [-1])
    assert not list(tmp_path.iterdir())


def test_find_shards_sorted_and_errors(tmp_path):
    for name in ["d_train_000002.bin", "d_train_000001.bin", "d_val_000000.bin"]:
        write_shard(tmp_path / name, [1])
    assert [p.name for p in find_shards(tmp_path, "train")] == ["d_train_000001.bin", "d_train_000002.bin"]
    with pytest.raises(UserError, match="prefetch"):
        find_shards(tmp_path / "missing", "train")
    with pytest.raises(UserError, match="no '\\*_test_\\*.bin'"):
        find_shards(tmp_path, "test")
