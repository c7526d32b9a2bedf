"""Faults of the machine rather than of the job: a full disk, a quota, a read-only or vanished directory.

A job that stops on one of them has not failed: its checkpoints are intact, so the run is INTERRUPTED and a
plain `run` resumes it once the cause is fixed (exoformer.runs.pipeline). Only an error raised by the job's
own work is FAILED.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager

from exoformer.errors import UserError

MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})
"""OS errors that say the storage is at fault, not the run."""


class ResumableFault(UserError):
    """A UserError whose fix is to repair the machine and run the same command again (the run resumes)."""


class RunDirectoryGone(ResumableFault):
    """The run directory was removed or replaced under a live job: the job stops and writes nothing more."""


def is_machine_fault(error: BaseException) -> bool:
    """Whether `error` (or what caused it) is a fault of the machine that a rerun resumes from."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, ResumableFault) or (isinstance(error, OSError) and error.errno in MACHINE_ERRNOS):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


_GUARDED: dict[str, tuple[int, int]] = {}
"""Run directories of the jobs of this process -> (device, inode) when the job took its lock."""


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


@contextmanager
def guard_run_dir(path: str | os.PathLike) -> Iterator[None]:
    """While a job works on `path`, writers can ask `check_run_dir` whether it is still the same directory."""
    key = os.path.abspath(path)
    _GUARDED[key] = _identity(key) or (-1, -1)
    try:
        yield
    finally:
        _GUARDED.pop(key, None)


def check_run_dir(path: str | os.PathLike) -> None:
    """Raise RunDirectoryGone when `path` is a guarded run directory that was removed or replaced since its job
    started (a write would otherwise recreate a partial directory); no-op for unguarded paths."""
    key = os.path.abspath(path)
    held = _GUARDED.get(key)
    if held is not None and _identity(key) != held:
        raise RunDirectoryGone("the run directory was removed or replaced while its job ran; the job stopped and "
                               "wrote nothing more", where=key, fix="run the same command again to start it over")


def check_write_target(path: str | os.PathLike) -> None:
    """Before a file is written: when it lies in a guarded run directory, that directory must still be the job's
    (so an atomic write never recreates a removed run directory's parents)."""
    if not _GUARDED:
        return
    target = os.path.abspath(path)
    for key in list(_GUARDED):
        if target.startswith(key + os.sep):
            check_run_dir(key)
