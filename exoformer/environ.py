"""Environment variables set for the length of a block and restored afterwards (evaluation's offline flags,
the thread count, quiet progress bars and the malloc settings that local jobs inherit), and the check of every
variable that names a directory (`env_directory`)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from exoformer.errors import UserError

QUIET_PROGRESS_ENV = {"TQDM_DISABLE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
"""tqdm's and datasets' own switches for their progress bars, both read when the library is imported, so they are
set in the environment a job process starts with: a run's log keeps our progress lines
(exoformer/train/progress.py), not lm-eval's and datasets' bars."""


def quiet_progress_env() -> dict[str, str]:
    """QUIET_PROGRESS_ENV, where the user has not set one of its variables already (theirs wins)."""
    return {key: os.environ.get(key, value) for key, value in QUIET_PROGRESS_ENV.items()}


GLIBC_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024), "MALLOC_TRIM_THRESHOLD_": str(4 * 1024 ** 3)}
"""glibc malloc settings for a job process, read once when it starts: a CPU training step allocates and frees the
same multi-megabyte tensors, which glibc's defaults would map afresh (and the kernel zero) every step. Serving
blocks up to 32 MiB from a heap that is never trimmed keeps those pages; the trim threshold alone would freeze the
mmap threshold at 128 KiB, so both are set together (benchmarks/bench_main_job.py measures the effect). Other C
libraries ignore these variables."""


def glibc_malloc_env() -> dict[str, str]:
    """GLIBC_MALLOC_ENV, unless the user set either variable (then theirs, both as they are: the pair only works
    together)."""
    if any(key in os.environ for key in GLIBC_MALLOC_ENV):
        return {}
    return dict(GLIBC_MALLOC_ENV)


@contextlib.contextmanager
def temporary_env(updates: Mapping[str, str]) -> Iterator[None]:
    """Set `updates` in os.environ; on exit put back the previous values (unset keys are removed again)."""
    saved = {key: os.environ.get(key) for key in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def env_directory(name: str, *, fix: str, must_exist: bool = True) -> Path | None:
    """The directory that environment variable `name` names; None when it is unset or empty (each caller keeps its
    own answer to an empty value). A value that names something other than a directory (a file, a FIFO, a socket,
    a device, a dangling link) or, with `must_exist`, nothing at all is refused in one line naming `$name`, what
    is there and `fix`, where the variable is read: never a later error that blames something else."""
    value = os.environ.get(name)
    if not value:
        return None
    path = Path(value)
    problem = directory_problem(path, must_exist=must_exist)
    if problem is not None:
        raise UserError(f"{value} {problem}", where=f"${name}", fix=fix)
    return path


def directory_problem(path: Path, *, must_exist: bool = True) -> str | None:
    """What keeps `path` from being used as a directory ("is a FIFO, not a directory", "does not exist", ...), or
    None. Never opens it: a FIFO must not block."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return "is a dangling symbolic link"
        return "does not exist" if must_exist else None
    except NotADirectoryError:
        return "is not a directory (a file is on its path)"
    except OSError as err:
        return f"cannot be looked at ({err.strerror or type(err).__name__})"
    if stat.S_ISDIR(info.st_mode):
        return None
    if stat.S_ISREG(info.st_mode):
        kind = f"a file of {info.st_size:,} bytes"
    else:
        kind = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
                stat.S_IFBLK: "a block device"}.get(stat.S_IFMT(info.st_mode), "not a regular file")
    return f"is {kind}, not a directory"
