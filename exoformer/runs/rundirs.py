"""Run directories of specs: where a spec's run lives, creating it with spec.yaml and provenance, and reading a
spec back (torch-free at import). The layout itself belongs to exoformer.rundir; every write is atomic.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import socket
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from exoformer.errors import UserError
from exoformer.registry.registry import REPO_ROOT, Registry
from exoformer.registry.spec import Spec, parse_override
from exoformer.io import atomic_write_text
from exoformer.run_identity import CHECKPOINT, OURS, RunIdentity, data_fingerprint, recipe_differences, scoring_of
from exoformer.rundir import (  # noqa: F401 - the run states, re-exported for the harness's callers
    ACTIVE_STATES,
    DAMAGED,
    FAILED,
    INTERRUPTED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    RunDir,
    Status,
    now,
    parse_time,
    read_status,
    write_status,
)
from exoformer.yaml_lines import load_yaml_with_lines

RUNS_ENV = "EXOFORMER_RUNS_DIR"
DEFAULT_RUNS_ROOT = REPO_ROOT / "results" / "runs"


def runs_root(cli_dir: str | None = None) -> Path:
    """--runs-dir, else $EXOFORMER_RUNS_DIR, else results/runs (README "Where things live"). A registry file
    or `--set` never chooses it: results go where the command line says."""
    if cli_dir is not None and not str(cli_dir).strip():
        raise UserError("the option is empty", where="--runs-dir", fix="name a directory, or leave the option out")
    chosen = cli_dir or os.environ.get(RUNS_ENV)
    return Path(chosen).expanduser().absolute() if chosen else DEFAULT_RUNS_ROOT


def check_runs_root(root: Path, *, where: str = "--runs-dir", missing_ok: bool = False) -> None:
    """The one error line of a runs root that cannot hold runs: a file, a dangling symbolic link, or (unless
    `missing_ok`: `run` creates it) a missing directory. Every verb calls this, so all say the same."""
    root = Path(root)
    if root.is_dir():
        return
    fix = f"name the directory that holds the run directories (--runs-dir DIR or ${RUNS_ENV})"
    if root.is_symlink() and not root.exists():
        raise UserError(f"runs root {root} is a symbolic link to nothing ({os.readlink(root)})", where=where,
                        fix=fix)
    if root.exists():
        raise UserError(f"runs root {root} is not a directory", where=where, fix=fix)
    if not missing_ok:
        raise UserError(f"runs root {root} does not exist", where=where,
                        fix=fix + ", or run something first (reproduce.py run TARGET --preset smoke)")


def check_writable(root: Path) -> None:
    """Fail early, in one line, when the runs root cannot hold run directories (nothing is created elsewhere)."""
    check_runs_root(root, where=f"--runs-dir or ${RUNS_ENV}", missing_ok=True)
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"runs root {root} is not writable", where="--runs-dir",
                        fix=f"choose a writable directory (--runs-dir or ${RUNS_ENV})")


# --------------------------------------------------------------------------------------------- the directory

def run_dir_for(spec: Spec, root: Path) -> Path:
    return Path(root) / spec.name / spec.hash12


def spec_hash_of(run_dir: Path) -> str | None:
    """The full hash recorded in a run's spec file (None when absent or unreadable): never raises."""
    path = RunDir(run_dir).spec_file
    try:
        data = load_yaml_with_lines(path)
    except (OSError, UserError):
        return None
    held = data.get("hash") if isinstance(data, dict) else None
    return held if isinstance(held, str) else None


def check_identity(spec: Spec, run_dir: Path) -> None:
    """A run directory must hold this spec's hash, in files the harness wrote: an identity file or spec file that
    is a symbolic link, a FIFO or a folder (planted in a run directory not run yet, it would make the finished
    run DAMAGED after all its training) is refused in one line, as is another spec's hash (nothing is deleted)."""
    rd = RunDir(run_dir)
    for path in (rd.identity_file, rd.spec_file):
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode):
            what = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
            raise UserError(f"the run's {path.name} is {what}", where=str(path),
                            fix="move it (or the run directory) away; nothing was written")
    path = rd.spec_file
    if not path.is_file():
        return
    held = spec_hash_of(run_dir)
    if held is None and _identity_hash12(rd) == spec.hash12:
        return  # this spec's run (its identity says so), its spec file unreadable (an empty copy): it goes on
    if held != spec.hash:
        raise UserError(f"run directory holds another spec (hash {str(held)[:12]}, expected {spec.hash12})",
                        where=str(path), fix="move that directory away; nothing was changed")


def _identity_hash12(rd: RunDir) -> str | None:
    try:
        identity = rd.identity()
    except UserError:
        return None
    return None if identity is None else identity.hash12


def identity_for(registry: Registry | None, spec: Spec, overrides: list[str] | tuple[str, ...] = ()) -> RunIdentity:
    """The run identity of `spec` as resolved with `overrides` (`profile.*` ones never touch a spec): the one
    place an identity is made at launch (exoformer/run_identity.py says what each field means). Without a
    registry (a run prepared outside `plan`) nothing is compared with the paper's recipe."""
    data = spec.to_dict()
    sets = {key: value for key, value in map(parse_override, overrides) if not key.startswith("profile.")}
    checkpoint = data.get("source") == CHECKPOINT
    comparison: dict[str, Any] = {}
    if registry is not None:
        reference = registry.resolve(spec.name)
        under = reference if spec.preset == reference.preset else registry.resolve(spec.name, preset=spec.preset)
        comparison = {"reference_hash12": reference.hash12, "preset_hash12": under.hash12,
                      "differs": tuple(recipe_differences(data, reference.to_dict(), under.to_dict(),
                                                          checkpoint=checkpoint))}
    return RunIdentity(spec=spec.name, seed=spec.seed, preset=spec.preset, hash12=spec.hash12, overrides=sets,
                       source=CHECKPOINT if checkpoint else OURS, as_row=data.get("as_row") if checkpoint else None,
                       table=data.get("table") if checkpoint else None, scoring=scoring_of(data),
                       steps=spec.train.steps, branch_from=spec.train.branch_from,
                       branch_step=spec.train.branch_step, **comparison)


def prepare(spec: Spec, run_dir: Path, *, command: list[str] | None = None,
            identity: RunIdentity | None = None) -> Path:
    """Create the run directory, write its spec file, its identity (once) and provenance (before the first
    step). Without `identity` (a run prepared outside `plan`) its registry-free one (identity_for)."""
    check_identity(spec, run_dir)
    rd = RunDir(run_dir)
    rd.create()
    if not rd.spec_file.is_file():
        atomic_write_text(rd.spec_file, yaml.safe_dump(spec.to_dict(), sort_keys=False))
    identity = identity or identity_for(None, spec)
    if identity.hash12 != spec.hash12:
        raise ValueError(f"identity of {identity.hash12} given for spec {spec.hash12}")
    if not rd.identity_file.exists():  # written once: a resumed run keeps its own
        if identity.source == OURS and spec.train.data:
            identity = replace(identity, data=launch_data_fingerprint(spec.train.data))
        rd.write_identity(identity)
    record = rd.read_provenance()
    record.update(submit_provenance(command))
    rd.write_provenance(record)
    return Path(run_dir)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_identity() -> dict[str, Any]:
    """Commit and dirty flag of the code that runs (None outside a git checkout)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"git_sha": sha, "git_dirty": None if dirty is None else bool(dirty)}


def submit_provenance(command: list[str] | None) -> dict[str, Any]:
    """What the submitting side knows: code identity, package versions, host, command line."""
    return {**git_identity(), "python": platform.python_version(),
            "versions": {p: _version(p) for p in ("torch", "lm_eval", "submitit", "numpy", "exoformer")},
            "submit_host": socket.gethostname(), "submitted": now(),
            "command": list(command) if command is not None else list(sys.argv)}


def file_checksum(path: Path, *, full_limit: int = 256 << 20) -> str:
    """sha256 of a file; above `full_limit` bytes of the size, first and last 8 MiB ('sampled:' prefix), so that
    paper-scale shards are fingerprinted without reading them whole."""
    if not path.is_file():  # a FIFO or device named *.bin would block or never end
        raise UserError("is not a regular file", where=str(path), fix="move it out of the data directory")
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as f:
        if size <= full_limit:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
            return digest.hexdigest()
        digest.update(str(size).encode())
        digest.update(f.read(8 << 20))
        f.seek(max(0, size - (8 << 20)))
        digest.update(f.read(8 << 20))
    return "sampled:" + digest.hexdigest()


def data_checksums(data_dir: Path) -> dict[str, str]:
    return {p.name: file_checksum(p) for p in sorted(Path(data_dir).glob("*.bin"))}


def launch_data_fingerprint(data: str) -> str | None:
    """The identity's `data` for a spec's `train.data`, as the launching machine holds it; None when it is not
    there (the job resolves it, or fails, on its own machine). Once per data directory and process."""
    from exoformer.data import resolve_data

    try:
        directory = Path(resolve_data(data))
    except UserError:
        return None
    stats = [(p.name, p.stat()) for p in sorted(directory.glob("*.bin"))]
    return _fingerprint_of(str(directory), tuple((name, st.st_size, st.st_mtime_ns) for name, st in stats))


@functools.lru_cache(maxsize=16)
def _fingerprint_of(directory: str, stamps: tuple) -> str | None:
    """The fingerprint of a data directory whose shards have these (name, size, mtime) `stamps`."""
    return data_fingerprint(data_checksums(Path(directory)))
