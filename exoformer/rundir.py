"""The run directory `<runs root>/<spec name>/<hash12>/` and the runs root's own files (docs/architecture.md
"Runs"). This is the only module that spells their names; everything else asks a `RunDir` for a path.

Torch-free and free of harness imports, so the training loop, the stages, the harness and the report all
share it without a package cycle. Readers are tolerant: a damaged STATUS reads as DAMAGED with the fix, a
damaged metrics or result line is reported with file:line, and nothing here ever raises on a torn file
except where a result would otherwise be silently wrong (result rows).
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import hashlib
import json
import math
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from exoformer.errors import UserError
from exoformer.io import (
    MAX_METRICS_BYTES,
    atomic_write_json,
    atomic_write_text,
    check_real_directories,
    open_regular,
    read_regular,
    read_regular_text,
)
from exoformer.records import load
from exoformer.run_identity import RunIdentity

PENDING, RUNNING, SUCCEEDED, FAILED, INTERRUPTED = "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "INTERRUPTED"
DAMAGED = "DAMAGED"
"""Not written by anyone: what a STATUS file that cannot be read as ours reads as."""
STATES = (PENDING, RUNNING, SUCCEEDED, FAILED, INTERRUPTED)
ACTIVE_STATES = (PENDING, RUNNING)
"""States in which some job is (or should be) working on the run."""

# The runs root's own files: the launch lock, the manifest of claims and submitit's job folders.
LAUNCH_LOCK = ".launch.lock"
MANIFEST = "manifest.json"
JOBS_DIR = ".jobs"
RUN_INDEX_DIR = ".index"
"""Where the run index lived inside a runs root before it moved to the reading user's cache (`index_dir`): a
folder of that name in a runs root is never read or written by the reading verbs (anyone who can write the
root could forge it)."""
INDEX_CACHE = ("exoformer", "run-index")
"""The run index's folder under the user's cache directory ($XDG_CACHE_HOME, else ~/.cache)."""

VAL_CURVE_KEY = "val_loss_official"
"""metrics.jsonl key of the validation curve: the author's estimate_loss convention, the per-batch mean of
CE + 2 x z-loss (docs/official_code.md 4.4-4.5, hazard H3), the convention of the final `val_loss`/`val_ppl`."""
VAL_CE_KEY = "val_loss_ce"
"""metrics.jsonl key of the same validation points as pure cross-entropy."""
LEGACY_VAL_KEY = "val_loss"
"""The one validation key of metrics.jsonl lines written before VAL_CURVE_KEY: pure cross-entropy."""

_SUBDIRS = ("stages", "checkpoints", "eval", "analysis", "logs")
_JOB_LOCK = ".job.lock"
_STOP = ".stop-requested"


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def parse_time(text: str | None) -> _dt.datetime | None:
    try:
        return _dt.datetime.fromisoformat(text) if isinstance(text, str) and text else None
    except ValueError:
        return None


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _status_from_dict(data: dict[str, Any]) -> Status | None:
    """A Status when every known field has its type (null: the default); None when any does not (then the file
    is damaged). Unknown keys are ignored: a newer version may have written them."""
    try:
        status = load(Status, {k: v for k, v in data.items() if v is not None}, where="STATUS", what="status",
                      ignore_unknown=True)
    except UserError:
        return None
    return status if status.state in STATES else None


class RunDir:
    """Paths and tolerant readers of one run directory. Cheap to build; touches the disk only when asked."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __fspath__(self) -> str:
        return str(self.path)

    # ------------------------------------------------------------------------------------------ paths
    @property
    def spec_file(self) -> Path:
        return self.path / "spec.yaml"

    @property
    def identity_file(self) -> Path:
        """The run's identity, written once at launch (exoformer/run_identity.py)."""
        return self.path / "identity.json"

    @property
    def provenance_file(self) -> Path:
        return self.path / "provenance.json"

    @property
    def status_file(self) -> Path:
        return self.path / "STATUS"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def checkpoint(self, step: int) -> Path:
        """Checkpoint `step`'s file (exoformer/train/checkpoint.py writes it; this module stays torch-free)."""
        return self.checkpoints / checkpoint_name(step)

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def eval_dir(self) -> Path:
        return self.path / "eval"

    @property
    def eval_results(self) -> Path:
        """lm-eval's result dict, without per-sample logs."""
        return self.eval_dir / "results.json"

    @property
    def eval_rows(self) -> Path:
        """One long-format row per task and metric of the evaluate stage."""
        return self.eval_dir / "long.jsonl"

    @property
    def validation(self) -> Path:
        """The final validation record (ppl, loss and its long rows)."""
        return self.eval_dir / "validation.json"

    @property
    def analysis_dir(self) -> Path:
        return self.path / "analysis"

    @property
    def analysis_rows(self) -> Path:
        return self.analysis_dir / "long.jsonl"

    @property
    def probes(self) -> Path:
        return self.analysis_dir / "probes.json"

    @property
    def spikes(self) -> Path:
        return self.analysis_dir / "spikes.json"

    @property
    def coefficients(self) -> Path:
        """Static mixing coefficients per layer and path, for the λ heatmaps (written by the analyse stage)."""
        return self.analysis_dir / "coefficients.json"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def tensorboard(self) -> Path:
        """TensorBoard event files, when the job was asked for them (exoformer.train.tensorboard)."""
        return self.path / "tensorboard"

    @property
    def stages_dir(self) -> Path:
        return self.path / "stages"

    def stage_file(self, stage: str) -> Path:
        return self.stages_dir / f"{stage}.json"

    def display(self, path: Path) -> str:
        """A path of this run, relative to it (for messages and stage records)."""
        try:
            return str(Path(path).relative_to(self.path))
        except ValueError:
            return str(path)

    # ------------------------------------------------------------------------------------------ layout
    def create(self) -> None:
        self.check_real_layout()
        for sub in _SUBDIRS:
            (self.path / sub).mkdir(parents=True, exist_ok=True)

    def check_real_layout(self) -> None:
        """Refuse (one line, before anything is written or deleted) a spec directory, run directory or subfolder
        that is a symbolic link or not a directory: its path is predictable, so whoever can write a shared runs
        root could otherwise make the job write, and checkpoint retention delete, files elsewhere."""
        subs = [self.path / sub for sub in (*_SUBDIRS, "tensorboard")]
        check_real_directories([self.path.parent, self.path, *subs],
                               fix="move it away (nothing was written); the run directory is created afresh")

    def has_checkpoint(self) -> bool:
        """Whether any checkpoint file is there (verified or not: the training loop decides what it resumes)."""
        try:
            return any(self.checkpoints.iterdir())
        except OSError:
            return False

    # ------------------------------------------------------------------------------------------ STATUS
    def read_status(self) -> Status | None:
        """STATUS, None when there is none, or a DAMAGED status (with the fix in `reason`) when it is not ours."""
        path = self.status_file
        try:
            data = json.loads(read_regular(path).decode("utf-8"))
        except FileNotFoundError:
            return None
        except OSError as err:  # a directory, a FIFO, unreadable, ...
            return _damaged(path, f"cannot be read ({type(err).__name__})")
        except (UnicodeDecodeError, json.JSONDecodeError):
            return _damaged(path, "is not a JSON status record")
        status = _status_from_dict(data) if isinstance(data, dict) else None
        return status if status is not None else _damaged(path, "is not a valid status record")

    def write_status(self, status: Status) -> Status:
        status.updated = now()
        atomic_write_json(self.status_file, status.to_dict())
        return status

    def update_status(self, **changes: Any) -> Status:
        """Read-modify-write of STATUS (only the job that owns the run calls this while it runs)."""
        status = self.read_status()
        if status is None or status.state == DAMAGED:
            status = Status(state=PENDING)
        for key, value in changes.items():
            setattr(status, key, value)
        return self.write_status(status)

    # ------------------------------------------------------------------------------------------ stages
    def stage_done(self, stage: str) -> bool:
        return self.stage_file(stage).is_file()

    def record_stage(self, stage: str, result: dict[str, Any]) -> None:
        atomic_write_json(self.stage_file(stage), result)

    def missing_stage_records(self, stages: tuple[str, ...] | list[str]) -> list[str]:
        return [s for s in stages if not self.stage_done(s)]

    # ------------------------------------------------------------------------------------------ the job lock
    @contextmanager
    def job_lock(self) -> Iterator[None]:
        """Held by the one job that works on this run; the kernel releases it when that process dies.

        A second job on the same directory fails at once with a UserError, whatever STATUS or the manifest say.
        """
        self.check_real_layout()
        self.path.mkdir(parents=True, exist_ok=True)
        path, fix = self.path / _JOB_LOCK, "move it away (a lock file is a plain file the job creates), then run again"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as err:
            raise UserError(f"the job lock cannot be opened ({err.strerror or type(err).__name__})", where=str(path),
                            fix=fix) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UserError("the job lock is not a regular file", where=str(path), fix=fix)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UserError("another job is working on this run directory", where=str(self.path),
                                fix="wait for it (reproduce.py status), or stop it before running again") from None
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            yield
        finally:
            os.close(fd)

    def job_lock_held(self) -> bool:
        """Whether a live process holds the job lock (probes it without taking it for long)."""
        path = self.path / _JOB_LOCK
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO must not block `status`
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    # ------------------------------------------------------------------------------------------ stop requests
    def request_stop(self) -> None:
        """Ask the job to stop for good at its next checkpoint (Ctrl-C in the launcher), not to requeue."""
        atomic_write_text(self.path / _STOP, now() + "\n")

    def stop_requested(self) -> bool:
        return (self.path / _STOP).is_file()

    def clear_stop(self) -> None:
        (self.path / _STOP).unlink(missing_ok=True)

    # ------------------------------------------------------------------------------------------ logs
    def new_log_path(self, job_id: str | None) -> Path:
        """logs/attempt-<n>[-<job id>].log: one per attempt, numbered in order."""
        self.logs.mkdir(parents=True, exist_ok=True)
        n = 1 + sum(1 for _ in self.logs.glob("attempt-*.log"))
        suffix = f"-{job_id}".replace("/", "_") if job_id else ""
        return self.logs / f"attempt-{n:03d}{suffix}.log"

    def traceback_path(self, log_path: Path) -> Path:
        return self.logs / f"{Path(log_path).stem}.traceback.txt"

    # ------------------------------------------------------------------------------------------ identity
    def identity(self) -> RunIdentity | None:
        """The identity recorded at launch; None when the run has no identity file (it then reads DAMAGED). A
        damaged file is a UserError naming it (a wrong identity would silently change what a table compares)."""
        path = self.identity_file
        fix = "the run directory is damaged: re-run it with --force"
        try:
            data = json.loads(read_regular(path).decode("utf-8"))
        except FileNotFoundError:
            return None
        except OSError as err:
            raise UserError(f"the run identity cannot be read ({type(err).__name__})", where=str(path),
                            fix=fix) from None
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise UserError("the run identity is not JSON", where=str(path), fix=fix) from None
        return RunIdentity.from_dict(data, where=str(path))

    def write_identity(self, identity: RunIdentity) -> bool:
        """Write the identity unless the run already has one (it is written once, when the run is created);
        True when written."""
        if self.identity_file.exists():
            return False
        atomic_write_json(self.identity_file, identity.to_dict())
        return True

    # ------------------------------------------------------------------------------------------ provenance
    def read_provenance(self) -> dict[str, Any]:
        try:
            data = json.loads(read_regular_text(self.provenance_file))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def write_provenance(self, record: dict[str, Any]) -> None:
        atomic_write_json(self.provenance_file, record)

    def record_job_provenance(self, extra: dict[str, Any]) -> None:
        """Merge what only the job knows (host, device, CUDA, data checksums) into provenance.json."""
        record = self.read_provenance()
        job = record.get("job")
        record["job"] = {**(job if isinstance(job, dict) else {}), **extra}
        self.write_provenance(record)

    # ------------------------------------------------------------------------------------------ metrics
    def metrics(self, kind: str | None = None, *, problems: list[str] | None = None,
                strict: bool = False) -> Iterator[dict[str, Any]]:
        """Lines of metrics.jsonl (optionally of one `kind`), in file order (`numbered_metrics` with the line
        numbers)."""
        yield from (row for _, row in self.numbered_metrics(kind, problems=problems, strict=strict))

    def numbered_metrics(self, kind: str | None = None, *, problems: list[str] | None = None,
                         strict: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line number, line) of metrics.jsonl, optionally of one `kind`, in file order: the one reader of the file.

        Tolerant by default: a missing file has no lines, a damaged line is skipped and described as
        `file:line: why` in `problems` (when given), never a traceback. `strict` (a result computed from the
        lines): a missing file or a damaged line is a UserError naming file:line, except a torn last line (a
        crash while appending), which is skipped.
        """
        path = self.metrics_file
        try:
            data = read_regular(path, limit=MAX_METRICS_BYTES)
        except OSError as err:
            if problems is not None and not isinstance(err, FileNotFoundError):
                problems.append(f"{path}: cannot be read ({err.strerror or type(err).__name__})")
            if strict:
                raise UserError("no metrics.jsonl", where=str(path), fix="train the run first (reproduce.py run ...)")
            return
        lines = data.splitlines()
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                row = None
            if not isinstance(row, dict):
                if strict and number != len(lines):
                    raise UserError("not a JSON object line", where=f"{path}:{number}",
                                    fix="repair or delete the line")
                if problems is not None:
                    problems.append(f"{path}:{number}: not a JSON object line (skipped)")
                continue
            if kind is None or row.get("kind") == kind:
                yield number, row

    def last_train_line(self) -> dict[str, Any] | None:
        """The newest `kind: train` line of metrics.jsonl, reading only the file's tail."""
        try:
            with open_regular(self.metrics_file, limit=1 << 62) as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 65536))
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

    def val_curve(self, convention: str = "official", *, problems: list[str] | None = None
                  ) -> tuple[list[float], list[float]]:
        """(tokens, validation loss) of the validation lines of metrics.jsonl, in step order (one per step);
        damaged lines are described as `file:line: why` in `problems` when given.

        `official` (what figures and data-efficiency ratios read): VAL_CURVE_KEY, the author's estimate_loss
        convention. `ce`: VAL_CE_KEY, pure cross-entropy. A line written before these keys has only
        LEGACY_VAL_KEY (pure cross-entropy) and is read as it is under either convention.
        """
        key = {"official": VAL_CURVE_KEY, "ce": VAL_CE_KEY}[convention]
        by_step: dict[int, tuple[float, float]] = {}
        for row in self.metrics("val", problems=problems):
            step, tokens, loss = row.get("step"), row.get("tokens"), row.get(key, row.get(LEGACY_VAL_KEY))
            numbers = (step, tokens, loss)
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in numbers):
                by_step[int(step)] = (float(tokens), float(loss))
            elif problems is not None:
                problems.append(f"{self.metrics_file}: a validation line of step {step!r} has a value that is not a "
                                "finite number")
        ordered = [by_step[s] for s in sorted(by_step)]
        return [t for t, _ in ordered], [v for _, v in ordered]

    # ------------------------------------------------------------------------------------------ results
    def write_rows(self, path: Path, rows: list[dict[str, Any]]) -> Path:
        """Write a long-format result file (eval_rows, analysis_rows): one JSON object per line, each with task,
        metric and value, the shape `result_rows` reads. The one writer of those files."""
        for row in rows:
            if not isinstance(row, dict) or not {"task", "metric", "value"} <= set(row):
                raise ValueError(f"a result row needs task, metric and value, got {row!r}")
        return atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows))

    def result_rows(self, spec_name: str) -> list[dict[str, Any]]:
        """Every long-format result row of the run (evaluate, analyse, validate), as `result_files` reads them."""
        return [row for rows in self.result_files(spec_name).values() for row in rows]

    def result_files(self, spec_name: str) -> dict[str, list[dict[str, Any]]]:
        """The rows of each result file the run has, by RunDir attribute name ("eval_rows", "analysis_rows",
        "validation"): the one strict reader of those files. A damaged file is a UserError naming file:line,
        since skipping a row would silently change a table; a FIFO, link or directory there is refused, never
        skipped."""
        found: dict[str, list[dict[str, Any]]] = {}
        for name in ("eval_rows", "analysis_rows"):
            path = getattr(self, name)
            if os.path.lexists(path):
                found[name] = _read_rows(path, spec_name)
                if not found[name] and name == "eval_rows":
                    raise UserError("the run has no evaluation results (empty file)", where=str(path),
                                    fix=f"re-run its evaluation: {self._rerun(spec_name)}")
        if os.path.lexists(self.validation):
            try:
                record = json.loads(read_regular_text(self.validation))
                rows = record.get("rows", [])
                if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
                    raise ValueError
            except (OSError, UnicodeDecodeError, ValueError, AttributeError):
                raise UserError("not a validation record", where=str(self.validation),
                                fix=f"re-run its validation: {self._rerun(spec_name)}") from None
            found["validation"] = rows
        return found

    def _rerun(self, spec_name: str) -> str:
        from exoformer.rerun import rerun_command

        return rerun_command(self.read_provenance(), spec_name, self.path)

    def read_json(self, path: Path) -> Any:
        """A JSON file of this run, or None when it is absent; a damaged one is a UserError with the fix."""
        try:
            return json.loads(read_regular_text(path))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            raise UserError("not a readable JSON file", where=str(path),
                            fix="re-run the stage that wrote it (reproduce.py run TARGET --force)") from None


def _damaged(path: Path, why: str) -> Status:
    return Status(state=DAMAGED, reason=f"{path} {why}; "
                  "run the same command with --retry-failed to resume it, or --force to start over")


def _read_rows(path: Path, spec_name: str) -> list[dict[str, Any]]:
    rows = []
    try:
        lines = read_regular_text(path).splitlines()
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else "not a UTF-8 text file"
        raise UserError(why, where=str(path),
                        fix=f"re-run the stage that wrote it: reproduce.py run {spec_name} --force") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise UserError("not a JSON line", where=f"{path}:{number}",
                            fix="re-run the stage that wrote it (run TARGET --force)") from None
        if not isinstance(row, dict) or not {"task", "metric", "value"} <= set(row):
            raise UserError("a result row needs task, metric and value", where=f"{path}:{number}",
                            fix="re-run the stage that wrote it (run TARGET --force)")
        rows.append(row)
    return rows


def is_hash12(name: str) -> bool:
    return len(name) == 12 and all(c in "0123456789abcdef" for c in name)


def checkpoint_name(step: int) -> str:
    """The file name of checkpoint `step`: zero-padded, so that names sort as steps do."""
    return f"step_{step:08d}.pt"


def run_dirs_of_spec(root: str | os.PathLike, name: str, *, moved_aside: bool = False) -> list[RunDir]:
    """The `<root>/<name>/<hash12>/` directories (with or without a spec file yet), sorted by name; with
    `moved_aside`, those --force moved aside (`<hash12>.old-<time>`) after them."""
    base = os.path.join(root, name)
    try:
        found = [e.name for e in os.scandir(base) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    entries = sorted(n for n in found if is_hash12(n))
    if moved_aside:
        entries += sorted(n for n in found if is_hash12(n[:12]) and n[12:].startswith(".old-"))
    return [RunDir(os.path.join(base, entry)) for entry in entries]


def spec_names_under(root: str | os.PathLike) -> list[str]:
    """The spec directories of a runs root (its own hidden files and folders left out), sorted."""
    try:
        return sorted(e.name for e in os.scandir(root) if not e.name.startswith(".") and e.is_dir())
    except OSError:
        return []


def index_dir(root: str | os.PathLike) -> Path | None:
    """The run index's folder of runs root `root` (exoformer/runs/run_index.py): in the reading user's cache
    directory, `$XDG_CACHE_HOME` (when absolute, as the XDG spec asks) else `~/.cache`, then
    `exoformer/run-index/<sha256 of the root's real path>`, so only that user writes it, a read-only runs root
    is cached too, and every path to one root shares its index. None without a home directory (then the
    reading verbs read without a cache)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
        if not os.path.isabs(base):
            return None
    key = hashlib.sha256(os.fsencode(os.path.realpath(root))).hexdigest()
    return Path(base, *INDEX_CACHE, key)


def index_file(root: str | os.PathLike, name: str) -> Path | None:
    """The run index's cache file of spec directory `root/name` (in `index_dir(root)`); None without one."""
    folder = index_dir(root)
    return None if folder is None else folder / f"{name}.json"


def read_status(path: str | os.PathLike) -> Status | None:
    """Shortcut for `RunDir(path).read_status()`."""
    return RunDir(path).read_status()


def write_status(path: str | os.PathLike, status: Status) -> Status:
    return RunDir(path).write_status(status)
