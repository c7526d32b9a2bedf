"""Atomic file writes: a crash at any moment leaves either the old file or the new one, never a torn one.

Write to a temporary file in the same directory, fsync it, rename it over the target, fsync the directory.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

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
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
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


def remove_temp_files(directory: str | os.PathLike, *, recursive: bool = False,
                      older_than_s: float | None = None) -> list[Path]:
    """Delete the temporary files that writes cut short (SIGKILL, power loss) left in `directory` (and, with
    `recursive`, below it, never following symlinks). Only their owner calls this, while no write can be under
    way (it holds the run's job lock or the runs root's launch lock), or with `older_than_s`: then only files
    older than that are removed (a write under way takes milliseconds). Returns what was removed."""
    cutoff = None if older_than_s is None else time.time() - older_than_s
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                if recursive:
                    removed += remove_temp_files(entry.path, recursive=True, older_than_s=older_than_s)
            elif TEMP_NAME.match(entry.name) and stat.S_ISREG((info := entry.stat(follow_symlinks=False)).st_mode):
                if cutoff is not None and info.st_mtime > cutoff:
                    continue
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


# ------------------------------------------------------------------------------------------ reading only regular files

MAX_RECORD_BYTES = 64 << 20
"""Largest run file read whole (STATUS, identity, provenance, spec, stage records, result rows, samples, the index):
the largest the harness writes is a few MB (samples.json of a full evaluation)."""
MAX_METRICS_BYTES = 512 << 20
"""Largest metrics.jsonl read (a 76k-step run at one line per step is ~15 MB)."""


class NotRegularFile(OSError):
    """A path a reader was given that is a FIFO, device, socket, directory or symbolic link: it is never read
    (a FIFO would block the reader forever). An OSError, so the tolerant readers treat it as unreadable."""


def open_regular(path: str | os.PathLike, *, limit: int = MAX_RECORD_BYTES) -> IO[bytes]:
    """`path` opened for reading when it is a regular file of at most `limit` bytes, without following a final
    symbolic link and without blocking on a FIFO; NotRegularFile (an OSError) otherwise, FileNotFoundError when
    it is absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise NotRegularFile(errno.ELOOP, "is a symbolic link, not a regular file", str(path)) from None
        if err.errno in (errno.ENXIO, errno.EISDIR):  # a socket, a directory
            raise NotRegularFile(err.errno, "is not a regular file", str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a directory" if stat.S_ISDIR(info.st_mode) else \
                "a device or socket"
            raise NotRegularFile(errno.EINVAL, f"is {kind}, not a regular file", str(path))
        if info.st_size > limit:
            raise NotRegularFile(errno.EFBIG, f"is {info.st_size:,} bytes, larger than any file the harness writes "
                                 f"there ({limit:,})", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike, *, limit: int = MAX_RECORD_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (open_regular's refusals otherwise)."""
    with open_regular(path, limit=limit) as f:
        data = f.read(limit + 1)
    if len(data) > limit:  # grew while being read
        raise NotRegularFile(errno.EFBIG, f"is larger than {limit:,} bytes", str(path))
    return data


def read_regular_text(path: str | os.PathLike, *, limit: int = MAX_RECORD_BYTES) -> str:
    """read_regular, decoded as UTF-8 (UnicodeDecodeError when it is not)."""
    return read_regular(path, limit=limit).decode("utf-8")


# ------------------------------------------------------------------------------------------ writing only where meant

def not_a_real_directory(path: str | os.PathLike) -> str | None:
    """Why `path` cannot be written into as a directory the harness made: "is a symbolic link" or "is not a
    directory"; None when it is a real directory or does not exist yet (then the harness creates it)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"cannot be checked ({err.strerror or type(err).__name__})"
    if stat.S_ISLNK(info.st_mode):
        return f"is a symbolic link (to {os.readlink(path)})"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    return None


def check_real_directories(paths: Iterable[str | os.PathLike], *, fix: str) -> None:
    """A one-line UserError for the first of `paths` that is a symbolic link or not a directory: nothing is
    written through a link someone placed where the harness writes (checked before anything is written)."""
    for path in paths:
        problem = not_a_real_directory(path)
        if problem is not None:
            raise UserError(f"{problem}; the harness writes only into directories it created", where=str(path),
                            fix=fix)
