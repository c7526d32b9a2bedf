"""modded-nanogpt token shards: a 256 x int32 header, then uint16 token ids.

Header words (little-endian int32): [0] magic 20240520, [1] version 1, [2] token count, [3:256] zeros.
The author's loader memory-maps the whole file as uint16 and so trains on the 512 header words as if they
were tokens (docs/official_code.md section 7, hazard H1, which is why their vocab is 57,601). `read_shard`
validates the header and returns only the tokens after it; nothing here ever yields a header word.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from exoformer.errors import UserError
from exoformer.io import atomic_write_bytes

MAGIC = 20240520
VERSION = 1
HEADER_WORDS = 256
HEADER_BYTES = HEADER_WORDS * 4
TOKEN_DTYPE = np.dtype("<u2")
MAX_TOKEN_ID = 65535  # uint16

NOT_A_SHARD = "not a modded-nanogpt token shard"
REFETCH_SHARD = "re-download or regenerate the shard"


def read_header(path: str | os.PathLike) -> int:
    """Validate a shard's header and its length against it; return the token count."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise UserError("token shard not found", where=str(path), fix="check the data directory") from None
    if size < HEADER_BYTES:
        raise UserError(
            f"file is {size} bytes, shorter than the {HEADER_BYTES}-byte header: {NOT_A_SHARD} (or a truncated one)",
            where=str(path), fix=REFETCH_SHARD,
        )
    header = np.fromfile(path, dtype="<i4", count=HEADER_WORDS)
    magic, version, count = int(header[0]), int(header[1]), int(header[2])
    if magic != MAGIC:
        raise UserError(f"bad magic {magic} (expected {MAGIC}): {NOT_A_SHARD}", where=str(path), fix=REFETCH_SHARD)
    if version != VERSION:
        raise UserError(f"unsupported shard version {version} (expected {VERSION})", where=str(path), fix=REFETCH_SHARD)
    if count < 0:
        raise UserError(f"negative token count {count} in the header: corrupt shard", where=str(path),
                        fix=REFETCH_SHARD)
    expected = HEADER_BYTES + 2 * count
    if size != expected:
        kind = "truncated" if size < expected else "padded"
        raise UserError(
            f"{kind} shard: file is {size} bytes but its header promises {count} tokens "
            f"({expected} bytes = {HEADER_BYTES} + 2 x {count})",
            where=str(path),
            fix=REFETCH_SHARD,
        )
    return count


def read_shard(path: str | os.PathLike) -> np.memmap:
    """Memory-map exactly the tokens of a validated shard (read-only uint16, header words excluded)."""
    count = read_header(path)
    if count == 0:  # np.memmap cannot map zero bytes
        return np.zeros(0, dtype=TOKEN_DTYPE)  # type: ignore[return-value]
    return np.memmap(path, dtype=TOKEN_DTYPE, mode="r", offset=HEADER_BYTES, shape=(count,))


def encode_shard(tokens: Iterable[int] | np.ndarray) -> bytes:
    """The bytes of a shard holding `tokens`; refuses ids outside uint16 rather than wrapping them."""
    array = np.asarray(tokens if isinstance(tokens, np.ndarray) else list(tokens))
    if array.ndim != 1:
        raise UserError(f"tokens must be a 1-D sequence, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise UserError(f"tokens must be integers, got dtype {array.dtype}")
    if array.size and (int(array.min()) < 0 or int(array.max()) > MAX_TOKEN_ID):
        raise UserError(
            f"token ids must lie in [0, {MAX_TOKEN_ID}] to fit uint16 shards, got [{int(array.min())}, "
            f"{int(array.max())}]",
            fix="use a vocabulary of at most 65,536 ids",
        )
    header = np.zeros(HEADER_WORDS, dtype="<i4")
    header[0], header[1], header[2] = MAGIC, VERSION, array.size
    return header.tobytes() + array.astype(TOKEN_DTYPE).tobytes()


def write_shard(path: str | os.PathLike, tokens: Iterable[int] | np.ndarray) -> Path:
    """Write a shard atomically (temp file, fsync, rename): a crash never leaves a torn shard."""
    return atomic_write_bytes(path, encode_shard(tokens))


def find_shards(directory: str | os.PathLike, split: str) -> list[Path]:
    """The `*_{split}_*.bin` shards of a directory, sorted by name (the order the author's loader uses)."""
    directory = Path(directory)
    fix = "run `python reproduce.py prefetch` or use data: smoke"
    if not directory.is_dir():
        raise UserError("data directory not found", where=str(directory), fix=fix)
    shards = sorted(directory.glob(f"*_{split}_*.bin"))
    if not shards:
        raise UserError(f"no '*_{split}_*.bin' token shards in this directory", where=str(directory), fix=fix)
    return shards
