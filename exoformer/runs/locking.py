"""The launch lock and the job manifest of a runs root: a spec is never launched twice.

`run` takes `<root>/.launch.lock` (flock: released by the kernel when the process dies, so a crash never
leaves a stale lock), decides per spec, records its claim in `<root>/manifest.json` (spec hash -> backend,
job id, submitit folder, launcher pid, host) and only then releases. A second `run` that starts at the same
moment waits for the lock, then sees the claim and, while the claim's job is alive, skips the spec.
The manifest is what maintainers of submitit suggest for re-attaching to jobs (docs/ecosystem.md B3, #1625).
It carries a format tag, so a foreign `manifest.json` in the runs root is refused, never overwritten.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from exoformer.errors import UserError
from exoformer.io import atomic_write_json, read_regular_text
from exoformer.rundir import LAUNCH_LOCK, MANIFEST

MANIFEST_FORMAT = "exoformer.manifest/1"


@dataclass(kw_only=True, slots=True)
class Claim:
    """Who launched a spec: for slurm a job id (array task `A_i`); for local the controller PID once it runs;
    for inline (and local jobs still waiting for a slot) the launcher's PID."""

    hash: str
    name: str
    run_dir: str
    backend: str
    host: str
    launcher_pid: int
    job_id: str | None = None
    folder: str | None = None
    submitted: float = 0.0
    launcher_identity: str | None = None
    """Boot id and start time of the launcher process: a recycled PID (after a reboot PIDs are small and reused)
    is never mistaken for the launcher."""
    eval_job_id: str | None = None
    """Slurm with eval_as_job: the job that validates, evaluates and analyses after training."""
    poll_s: float | None = None
    """How often to ask the scheduler about this job (the profile's poll_interval_s)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


LOCK_WAITS: ContextVar[bool] = ContextVar("exoformer_launch_lock_waits", default=True)
"""Whether a launch waits for the launch lock another process holds; False under `run --no-wait` (set for one
launch by exoformer.runs.orchestrate, read where exoformer.runs.launch takes the lock), which then fails at once."""


class LaunchLockHeld(UserError, TimeoutError):
    """Another process holds the launch lock (past the wait, or at once with `wait=False`): one line naming the
    lock and its holder. A TimeoutError too, as the lock's timeout always was; never a disk's problem."""


@contextmanager
def launch_lock(root: Path, *, timeout_s: float = 600.0, wait: bool = True) -> Iterator[None]:
    """Exclusive lock on the runs root; waits up to `timeout_s` (a launcher holds it for seconds at most), saying
    once on stderr who holds it, or with `wait=False` fails at once (LaunchLockHeld either way). The holder
    writes its pid and host into the lock file, so that a blocked launcher can name it."""
    path = root / LAUNCH_LOCK
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as err:
        raise UserError(f"cannot open the launch lock ({err.strerror or type(err).__name__})",
                        where=str(path),
                        fix="move it away if it is not a file, or choose a writable --runs-dir") from None
    try:
        started = time.monotonic()
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                holder = _lock_holder(fd)
                known = holder != UNKNOWN_HOLDER or waited > 0.5  # the holder writes its record just after locking
                if not wait and known:
                    raise LaunchLockHeld(f"the launch lock of {root} is held by {holder}: another `run` is "
                                         "launching into this runs root", where=str(path),
                                         fix="run the same command again once that one has launched its jobs, or "
                                             "leave out --no-wait to wait for it") from None
                if waited > timeout_s:
                    raise LaunchLockHeld(f"the launch lock of {root} has been held by {holder} for over "
                                         f"{timeout_s:.0f} s", where=str(path),
                                         fix="let that process finish launching (or stop it if it hangs), then run "
                                             "the same command again") from None
                if wait and known and not said:
                    print(f"waiting for the launch lock of {root}, held by {holder}", file=sys.stderr, flush=True)
                    said = True
                time.sleep(0.05)
        _record_holder(fd)
        yield
    finally:
        os.close(fd)  # closing releases the flock


UNKNOWN_HOLDER = "a process that recorded no pid (an older harness version?)"


def _record_holder(fd: int) -> None:
    """Write this process's pid and host into the lock file it holds (best effort: a full disk still locks)."""
    record = json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode() + b"\n"
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
    except OSError:
        pass


def _lock_holder(fd: int) -> str:
    """`pid P on HOST` as the holder of the lock recorded it; UNKNOWN_HOLDER where the file names none, or names
    a process of this host that has ended (the record of an earlier holder, under a holder that writes none)."""
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode())
        pid, host = data["pid"], data["host"]
    except (OSError, ValueError, TypeError, KeyError):
        return UNKNOWN_HOLDER
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(host, str) or not host \
            or not host.isprintable() or len(host) > 255:
        return UNKNOWN_HOLDER
    if host == socket.gethostname() and not pid_alive(pid):
        return UNKNOWN_HOLDER
    return f"pid {pid} on {host}"


def read_manifest(root: Path) -> dict[str, Claim]:
    """Claims by spec hash; {} when there is no manifest. A file that is not ours is a UserError (kept as is)."""
    path = Path(root) / MANIFEST
    try:
        data = json.loads(read_regular_text(path))  # a FIFO there must not block `run` or `status`
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        data = None
    claims = _claims_of(data)
    if claims is None:
        raise UserError("manifest.json in the runs root is not a manifest of this harness", where=str(path),
                        fix="move it away (it was left untouched) or choose another --runs-dir")
    return claims


def _claims_of(data: Any) -> dict[str, Claim] | None:
    """Claims of our manifest layout ({format, claims}, or the untagged layout of older harness versions)."""
    if isinstance(data, dict) and data.get("format") == MANIFEST_FORMAT:
        data = data.get("claims")
    elif not (isinstance(data, dict) and all(isinstance(c, dict) and c.get("hash") == h for h, c in data.items())):
        return None
    if not isinstance(data, dict):
        return None
    names = {f.name for f in fields(Claim)}
    out = {}
    for h, c in data.items():
        try:
            out[h] = Claim(**{k: v for k, v in c.items() if k in names})
        except TypeError:
            return None
    return out


def write_manifest(root: Path, manifest: dict[str, Claim]) -> None:
    atomic_write_json(Path(root) / MANIFEST, {"format": MANIFEST_FORMAT,
                                               "claims": {h: c.to_dict() for h, c in sorted(manifest.items())}})


def record_claims(root: Path, manifest: dict[str, Claim], claims: list[Claim]) -> None:
    """Merge claims into `manifest` and write it (the caller holds the launch lock)."""
    manifest.update({c.hash: c for c in claims})
    write_manifest(root, manifest)


def update_claims(root: Path, claims: list[Claim]) -> None:
    """Merge claims into the manifest (takes the lock; do not call while holding it)."""
    with launch_lock(root):
        record_claims(root, read_manifest(root), claims)


def new_claim(*, spec_hash: str, name: str, run_dir: Path, backend: str) -> Claim:
    return Claim(hash=spec_hash, name=name, run_dir=str(run_dir), backend=backend, host=socket.gethostname(),
                 launcher_pid=os.getpid(), submitted=time.time(), launcher_identity=process_identity(os.getpid()))


def process_identity(pid: int) -> str | None:
    """`<boot id>:<start time in clock ticks>` of a process (Linux /proc), None where it cannot be read: two
    processes that ever had the same PID on this machine never share it."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return None
    return f"{boot}:{start}"


def pid_alive(pid: int | None, *, expect: str | None = None, identity: str | None = None) -> bool:
    """Whether process `pid` runs on this machine (and, with `expect`, its command line contains it; with
    `identity`, it is the very process that identity was read from: both guard against a recycled PID)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if identity is not None and process_identity(pid) not in (identity, None):
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        pass
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: trust kill(0)
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":  # a zombie has finished
        return False
    return expect is None or expect in cmdline
