"""Atomic file writes: a crash at any moment leaves either the old file or the new one, never a torn one.

Write to a temporary file in the same directory, fsync it, rename it over the target, fsync the directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

from exoformer.errors import UserError
from exoformer.faults import check_write_target

TEMP_NAME = re.compile(r"\A\..+\.[A-Za-z0-9_]{8}\.tmp\Z")
"""Names of the temporary files of atomic writes (`.<target>.<8 random>.tmp`, tempfile.mkstemp's pattern)."""


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    check_write_target(path)  # a job's run directory removed under it is never recreated by a write
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; results should read like any other file
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(err, (IsADirectoryError, NotADirectoryError)) or (isinstance(err, OSError) and path.is_dir()):
            raise UserError("is a directory, so the file cannot be written there", where=str(path),
                            fix="move that directory away (nothing was changed)") from None
        raise
    fsync_dir(path.parent)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=False) + "\n")


def remove_temp_files(directory: str | os.PathLike, *, recursive: bool = False) -> list[Path]:
    """Delete the temporary files that writes cut short (SIGKILL, power loss) left in `directory` (and, with
    `recursive`, below it, never following symlinks). Only their owner calls this, while no write can be under
    way (it holds the run's job lock or the runs root's launch lock). Returns what was removed."""
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                if recursive:
                    removed += remove_temp_files(entry.path, recursive=True)
            elif TEMP_NAME.match(entry.name) and stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once at import: os.umask is process-wide, so never toggle it mid-run


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make a rename durable; a no-op where directories cannot be opened (some filesystems)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def sha256_of(stream) -> str:
    """sha256 hex digest of what is left to read in a binary stream, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    while block := stream.read(1 << 22):
        digest.update(block)
    return digest.hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """sha256 hex digest of a file."""
    with open(path, "rb") as f:
        return sha256_of(f)
