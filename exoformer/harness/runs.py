"""The run directory `<runs root>/<spec name>/<hash12>/` (docs/architecture.md "Runs"); torch-free.

One place knows its layout: spec.yaml, provenance.json, STATUS (JSON), stages/<stage>.json, checkpoints/,
metrics.jsonl, eval/, analysis/, logs/. Every write goes through exoformer.io (atomic), so a crash at any
moment leaves the previous file or the new one, never a torn one.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exoformer.errors import UserError
from exoformer.harness.registry import REPO_ROOT
from exoformer.harness.spec import AnalysisConfig, EvalConfig, Placement, Spec
from exoformer.io import atomic_write_json, atomic_write_text
from exoformer.model.config import ModelConfig
from exoformer.train.config import TrainConfig

RUNS_ENV = "EXOFORMER_RUNS_DIR"
DEFAULT_RUNS_ROOT = REPO_ROOT / "results" / "runs"

PENDING, RUNNING, SUCCEEDED, FAILED = "PENDING", "RUNNING", "SUCCEEDED", "FAILED"
STATES = (PENDING, RUNNING, SUCCEEDED, FAILED)
ACTIVE_STATES = (PENDING, RUNNING)
"""States in which some job is (or should be) working on the run."""

SPEC_FILE, PROVENANCE_FILE, STATUS_FILE = "spec.yaml", "provenance.json", "STATUS"
SUBDIRS = ("stages", "checkpoints", "eval", "analysis", "logs")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def parse_time(text: str | None) -> _dt.datetime | None:
    try:
        return _dt.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def runs_root(cli_dir: str | None = None, spec: Spec | None = None) -> Path:
    """--runs-dir, else the spec's placement.runs_root, else $EXOFORMER_RUNS_DIR, else results/runs."""
    chosen = cli_dir or (spec.placement.runs_root if spec else None) or os.environ.get(RUNS_ENV)
    return Path(chosen).expanduser().absolute() if chosen else DEFAULT_RUNS_ROOT


def check_writable(root: Path) -> None:
    """Fail early, in one line, when the runs root cannot hold run directories (nothing is created elsewhere)."""
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"runs root {root} is not writable", where="--runs-dir",
                        fix=f"choose a writable directory (--runs-dir or ${RUNS_ENV})")


# --------------------------------------------------------------------------------------------- STATUS

@dataclass(kw_only=True, slots=True)
class Status:
    """The STATUS file: who is doing what to the run, and for a failure why and where its traceback is."""

    state: str
    stage: str | None = None
    reason: str | None = None
    log: str | None = None
    job_id: str | None = None
    backend: str | None = None
    updated: str = field(default_factory=now)
    started: str | None = None
    host: str | None = None
    pid: int | None = None
    skipped: list[str] = field(default_factory=list)
    """Stages not run because their package is not there yet (never faked; a later `run` resumes them)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Status:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known.setdefault("state", FAILED)
        return cls(**known)


def read_status(run_dir: Path) -> Status | None:
    """STATUS of a run, or None when there is none. A torn or foreign file reads as FAILED (never crashes)."""
    path = Path(run_dir) / STATUS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        word = (text.split() or [""])[0]  # a plain 'SUCCEEDED' file written by hand or an older harness
        return Status(state=word) if word in STATES else Status(state=FAILED, reason=f"unreadable {path}")
    if not isinstance(data, dict) or data.get("state") not in STATES:
        return Status(state=FAILED, reason=f"unreadable {path}")
    return Status.from_dict(data)


def write_status(run_dir: Path, status: Status) -> Status:
    status.updated = now()
    atomic_write_json(Path(run_dir) / STATUS_FILE, status.to_dict())
    return status


def update_status(run_dir: Path, **changes: Any) -> Status:
    """Read-modify-write of STATUS (only the job that owns the run calls this while it runs)."""
    status = read_status(run_dir) or Status(state=PENDING)
    for key, value in changes.items():
        setattr(status, key, value)
    return write_status(run_dir, status)


# --------------------------------------------------------------------------------------------- the directory

def run_dir_for(spec: Spec, root: Path) -> Path:
    return Path(root) / spec.name / spec.hash12


def spec_from_dict(data: dict[str, Any], *, where: str = SPEC_FILE) -> Spec:
    """Rebuild a Spec from the spec.yaml layout (Spec.to_dict)."""
    def tuples(d: dict) -> dict:
        return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}

    try:
        return Spec(name=data["name"], group=data["group"], variant=data["variant"], shape=data["shape"],
                    preset=data["preset"], seed=data["seed"],
                    model=ModelConfig.from_dict(tuples(data["model"]), where=f"{where}: model"),
                    train=TrainConfig.from_dict(data["train"], where=f"{where}: train"),
                    eval=EvalConfig(**data["eval"]), analysis=AnalysisConfig(**tuples(data["analysis"])),
                    placement=Placement(**(data.get("placement") or {})))
    except (KeyError, TypeError) as err:
        raise UserError(f"not a spec.yaml ({err})", where=where, fix="remove the directory or rerun with --force") \
            from None


def read_spec(run_dir: Path) -> Spec | None:
    path = Path(run_dir) / SPEC_FILE
    if not path.is_file():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return spec_from_dict(data, where=str(path)) if isinstance(data, dict) else None


def check_identity(spec: Spec, run_dir: Path) -> None:
    """A run directory must hold this spec's hash; anything else is a user error (nothing is deleted)."""
    path = Path(run_dir) / SPEC_FILE
    if not path.is_file():
        return
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        data = None
    held = data.get("hash") if isinstance(data, dict) else None
    if held != spec.hash:
        raise UserError(f"run directory holds another spec (hash {str(held)[:12]}, expected {spec.hash12})",
                        where=str(path), fix="move that directory away; nothing was changed")


def prepare(spec: Spec, run_dir: Path, *, command: list[str] | None = None) -> Path:
    """Create the run directory, write spec.yaml and provenance.json (before the first step, STYLE 11)."""
    check_identity(spec, run_dir)
    for sub in SUBDIRS:
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    if not (run_dir / SPEC_FILE).is_file():
        atomic_write_text(run_dir / SPEC_FILE, yaml.safe_dump(spec.to_dict(), sort_keys=False))
    record = read_provenance(run_dir)
    record.update(submit_provenance(command))
    atomic_write_json(run_dir / PROVENANCE_FILE, record)
    return run_dir


def read_provenance(run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((Path(run_dir) / PROVENANCE_FILE).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


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
    10B-token shards are fingerprinted in a second instead of minutes."""
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


def record_job_provenance(run_dir: Path, extra: dict[str, Any]) -> None:
    """Merge what only the job knows (host, device, CUDA, data checksums) into provenance.json."""
    record = read_provenance(run_dir)
    record.setdefault("job", {}).update(extra)
    atomic_write_json(Path(run_dir) / PROVENANCE_FILE, record)


# --------------------------------------------------------------------------------------------- stages, logs

def stage_path(run_dir: Path, stage: str) -> Path:
    return Path(run_dir) / "stages" / f"{stage}.json"


def stage_done(run_dir: Path, stage: str) -> bool:
    return stage_path(run_dir, stage).is_file()


def record_stage(run_dir: Path, stage: str, result: dict[str, Any]) -> None:
    atomic_write_json(stage_path(run_dir, stage), result)


def new_log_path(run_dir: Path, job_id: str | None) -> Path:
    """logs/attempt-<n>[-<job id>].log: one per attempt, numbered in order."""
    logs = Path(run_dir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    n = 1 + sum(1 for p in logs.glob("attempt-*.log"))
    suffix = f"-{job_id}".replace("/", "_") if job_id else ""
    return logs / f"attempt-{n:03d}{suffix}.log"


def last_train_line(run_dir: Path) -> dict[str, Any] | None:
    """The newest `kind: train` line of metrics.jsonl, reading only the file's tail."""
    path = Path(run_dir) / "metrics.jsonl"
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 65536))
            tail = f.read().decode("utf-8", errors="replace").splitlines()
    except OSError:  # missing, or not a file: `status` must still answer
        return None
    for line in reversed(tail):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("kind") == "train":
            return row
    return None


def iter_run_dirs(root: Path) -> list[Path]:
    """Every `<root>/<name>/<hash12>/` that has a spec.yaml, sorted (directories moved aside by --force, named
    `<hash12>.old-<time>`, are not runs)."""
    if not Path(root).is_dir():
        return []
    return sorted(p.parent for p in Path(root).glob(f"*/*/{SPEC_FILE}") if _is_hash12(p.parent.name))


def _is_hash12(name: str) -> bool:
    return len(name) == 12 and all(c in "0123456789abcdef" for c in name)
