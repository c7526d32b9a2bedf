"""Outputs never touch inputs: where `report`, `table --out` and `figure --out` may write, and which run files a
report may copy.

An output directory that is, contains or lies inside a runs root or a registry would let a writer replace a
file it reads (a report copying each run's logs onto themselves cuts them to their tail), so it is refused
before anything is read. A run file is copied only when it is a regular file whose resolved path stays inside
its run directory: a symlink among a run's files to a file elsewhere (/etc/shadow) is never followed.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from exoformer.errors import UserError


def _resolved(path: str | os.PathLike) -> Path:
    return Path(os.path.realpath(Path(path).expanduser().absolute()))


def _inside(path: Path, other: Path) -> bool:
    return path == other or other in path.parents


def check_apart(out_dir: str | os.PathLike, *, runs_roots: Iterable[str | os.PathLike] = (),
                registries: Iterable[str | os.PathLike] = (), option: str = "--out") -> Path:
    """`out_dir` when it neither is, contains nor lies inside any of the runs roots and registries given, nor the
    default ones (results/runs, $EXOFORMER_RUNS_DIR, experiments/; symlinks resolved); a one-line UserError
    naming the input otherwise. Nothing is created or read."""
    from exoformer.registry.registry import DEFAULT_REGISTRY
    from exoformer.runs.rundirs import DEFAULT_RUNS_ROOT, RUNS_ENV

    out = _resolved(out_dir)
    roots = [*runs_roots, DEFAULT_RUNS_ROOT, *([os.environ[RUNS_ENV]] if os.environ.get(RUNS_ENV) else [])]
    for kind, paths in (("runs root", roots), ("registry", [*registries, DEFAULT_REGISTRY])):
        for given in paths:
            held = _resolved(given)
            if _inside(out, held) or _inside(held, out):
                relation = "is" if out == held else ("lies inside" if _inside(out, held) else "contains")
                raise UserError(f"the output directory {out} {relation} the {kind} {held}; writing there would "
                                "overwrite the files it reads", where=option,
                                fix="name an output directory outside the runs root and the registry, e.g. --out "
                                    "report")
    return Path(out_dir)


def is_run_file(path: str | os.PathLike, run_dir: str | os.PathLike) -> bool:
    """Whether `path` may be copied out of `run_dir`: a regular file (after resolving symlinks) that stays inside
    the run directory. FIFOs, devices, sockets and links that leave the directory are not."""
    resolved, home = _resolved(path), _resolved(run_dir)
    if home not in resolved.parents:
        return False
    try:
        return stat.S_ISREG(os.stat(resolved).st_mode)
    except OSError:
        return False


def read_run_file(path: str | os.PathLike, run_dir: str | os.PathLike, *, tail_bytes: int) -> tuple[bytes, int]:
    """(the last `tail_bytes` bytes of a run file, its size), opened without following a final symlink and
    without blocking; raises OSError when it is not a regular file inside the run directory."""
    if not is_run_file(path, run_dir):
        raise OSError(f"{path} is not a regular file inside {run_dir}")
    fd = os.open(_resolved(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        size = os.fstat(handle.fileno()).st_size
        handle.seek(max(0, size - tail_bytes))
        return handle.read(), size


_STORAGE_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
                   errno.EROFS: "the file system is read-only"}


@contextmanager
def output_errors(out_dir: str | os.PathLike, *, option: str = "--out") -> Iterator[None]:
    """Within, an OSError writing into `out_dir` (a full disk, a quota, a read-only folder, a pseudo-file system
    such as /proc or /sys) is one UserError line naming the file and the fix, never a traceback. Writes are
    atomic (exoformer.io), so a file already there is left whole."""
    try:
        yield
    except OSError as err:
        from exoformer.io import TEMP_NAME

        target = os.fspath(err.filename) if isinstance(err.filename, (str, os.PathLike)) else None
        held, out = (None, _resolved(out_dir)) if target is None else (_resolved(target), _resolved(out_dir))
        if (held is None or not (_inside(held, out) or _inside(out, held))) and err.errno not in _STORAGE_ERRNOS:
            raise
        if target is not None and TEMP_NAME.match(Path(target).name):  # name the folder, not the temporary file
            target = str(Path(target).parent)
        why = _STORAGE_ERRNOS.get(err.errno) or err.strerror or type(err).__name__
        raise UserError(f"cannot write the output: {why} (nothing there was changed)", where=target or str(out_dir),
                        fix=f"free space on that disk, or name a writable directory with {option} DIR") from None
