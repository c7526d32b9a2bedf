"""The runs under a runs root, by spec, read through a derived cache, and the one rule that picks the run a
spec's results come from.

The index is a cache per spec directory (`rundir.index_file(root, name)`), never the source of truth: each
entry holds what the reading verbs need to choose runs (the spec file's name, seed, preset, source and row,
the status state, which result files exist, why a run reads DAMAGED), keyed by the inode and modification
time of the run directory, the modification times of its result and stage-record folders, and the time and
size of each file the entry is read from (so an edit in place is seen too). An entry whose key does not
match, and an index file that cannot be read, is not ours or is damaged, is simply rebuilt. The index is
rewritten atomically when anything changed, and a root that cannot be written still reads (without the
cache). Asking for some specs reads only their directories, so a table costs what its runs cost, not what
the root holds.

A spec can have several run directories: its current hash, and older ones (runs made with `--set`
overrides, or before a registry edit changed its config). Tables, figures and claims all ask `pick_run`
which one to read, so they never disagree about it. Torch-free; reads run directories through RunDir only.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml

from exoformer.errors import UserError
from exoformer.io import atomic_write_json, check_real_directories, read_regular, read_regular_text, remove_temp_files
from exoformer.runs import verify
from exoformer.run_identity import CHECKPOINT, OURS, SOURCES
from exoformer.rundir import RunDir, index_file, run_dirs_of_spec, spec_names_under

__all__ = ["CHECKPOINT", "OURS", "SOURCES", "RunInfo", "find_runs", "one_view", "pick_run", "runs_by_spec",
           "read_run_spec"]

INDEX_VERSION = 3
STALE_TEMP_S = 60.0
"""A temporary file of an index write older than this was left by a reader killed while writing (a write takes
milliseconds), so the next writer removes it."""


@dataclass(kw_only=True, slots=True, frozen=True)
class RunInfo:
    """What the reading verbs choose runs by, as a run directory's spec file and status record say (the run's
    identity is read from its own file, for the runs chosen: report/recipe.py)."""

    run: RunDir
    spec: str
    seed: int
    preset: str
    hash12: str
    suite: str
    state: str | None
    """Status state (PENDING, RUNNING, SUCCEEDED, FAILED, INTERRUPTED, DAMAGED); None without a status record."""
    source: str = OURS
    """"ours" (we trained it) or "checkpoint" (someone's trained checkpoint evaluated by us as a table row)."""
    as_row: str | None = None
    """For a checkpoint run: the table row it stands for (spec file key `as_row`)."""
    table: str | None = None
    """For a checkpoint run: the table that row belongs to (spec file key `table`)."""
    damage: str | None = None
    """Why a finished run reads DAMAGED (exoformer/runs/row_integrity.py); None otherwise."""
    outputs: tuple[str, ...] = ()
    """Which result files and stage records exist: names from OUTPUTS."""
    mtime: float = 0.0
    """The run directory's modification time (pick_run's tie-breaker among non-current runs)."""
    steps: int | None = None
    """The spec's training steps (`status` shows progress against it)."""

    @property
    def path(self) -> Path:
        return self.run.path

    @property
    def has_eval(self) -> bool:
        return any(name in self.outputs for name in ("eval_rows", "analysis_rows", "validation"))

    def has(self, output: str) -> bool:
        return output in self.outputs


OUTPUTS = ("eval_rows", "analysis_rows", "validation", "stage:evaluate", "stage:validate")
"""The result files and stage records an index entry says exist (RunDir attribute names; `stage:` records)."""


class HasRunDir(Protocol):
    """What pick_run needs of a candidate: its hash and its directory."""

    @property
    def hash12(self) -> str: ...

    @property
    def path(self) -> Path: ...


Candidate = TypeVar("Candidate", bound=HasRunDir)


SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader (what yaml.safe_load uses), in C where the installed PyYAML has libyaml: the same safe
constructors, about 6x faster on a run's spec file, which the index reads once per run directory."""


def read_run_spec(run: RunDir) -> dict:
    """The run's spec file as a mapping; a damaged one is a UserError naming it."""
    spec_file = run.spec_file
    try:
        data = yaml.load(read_regular_text(spec_file), Loader=SAFE_LOADER)  # noqa: S506 - a safe loader
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise UserError(f"the run's spec file cannot be read ({err.__class__.__name__})", where=str(spec_file),
                        fix="the run directory is damaged: re-run it with --force") from None
    if not isinstance(data, dict) or "name" not in data:
        raise UserError("the run's spec file has no name", where=str(spec_file),
                        fix="the run directory is damaged: re-run it with --force")
    return data


def _outputs(run: RunDir) -> tuple[str, ...]:
    found = [name for name in OUTPUTS[:3] if getattr(run, name).is_file()]
    found += [f"stage:{stage}" for stage in ("evaluate", "validate") if run.stage_done(stage)]
    return tuple(found)


def read_run_info(run: RunDir) -> RunInfo:
    """The RunInfo of one run directory read from its files; a damaged spec file is a UserError."""
    data = read_run_spec(run)
    status = run.read_status()
    seed = data.get("seed", 0)
    source = str(data.get("source") or OURS)
    if source not in SOURCES:
        raise UserError(f"the run's spec file says source {source!r}", where=str(run.spec_file),
                        fix=f"source is one of {', '.join(SOURCES)} (absent = {OURS})")
    from exoformer.runs.row_integrity import reading_state

    state, damage = reading_state(run, None if status is None else status.state, str(data["name"]))
    try:
        mtime = run.path.stat().st_mtime
    except OSError:
        mtime = 0.0
    return RunInfo(run=run, spec=str(data["name"]), seed=int(seed) if isinstance(seed, int) else 0,
                   preset=str(data.get("preset", "")), hash12=run.path.name,
                   suite=str((data.get("eval") or {}).get("suite", "")),
                   state=state, damage=damage, source=source,
                   as_row=None if data.get("as_row") is None else str(data["as_row"]),
                   table=None if data.get("table") is None else str(data["table"]),
                   outputs=_outputs(run), mtime=mtime, steps=_steps(data))


def _steps(data: dict) -> int | None:
    steps = (data.get("train") or {}).get("steps") if isinstance(data.get("train"), dict) else None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else None


# ------------------------------------------------------------------------------------------ the cache

def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


_KEY_FOLDERS = tuple(os.path.basename(getattr(RunDir("."), name)) for name in ("eval_dir", "analysis_dir"))


_KEY_FILES = ("spec_file", "status_file", "identity_file", "eval_rows", "validation", "analysis_rows")


def entry_key(run: RunDir) -> list[int] | None:
    """What an index entry is valid for: the run directory's inode and modification time, those of its result and
    stage-record folders, and the time and size of each file the entry is read from (a file edited in place
    changes neither folder's time); None when the directory is gone."""
    top_path = str(run.path)
    try:
        top = os.stat(top_path)
    except OSError:
        return None
    stamps = [top.st_ino, top.st_mtime_ns, *(_mtime_ns(os.path.join(top_path, f)) for f in _KEY_FOLDERS),
              _mtime_ns(str(run.stages_dir))]
    for path in [*(str(getattr(run, name)) for name in _KEY_FILES), *verify.key_paths(run)]:
        stamps.extend(verify.file_stamp(path))
    return stamps


_FIELDS = ("spec", "seed", "preset", "suite", "state", "source", "as_row", "table", "outputs", "mtime", "steps",
           "damage")
"""The RunInfo fields an index entry holds, in the order of its `info` list."""


def _info_to_json(info: RunInfo) -> list[Any]:
    return [list(info.outputs) if name == "outputs" else getattr(info, name) for name in _FIELDS]


def _info_from_json(run: RunDir, data: Any) -> RunInfo | None:
    """The RunInfo of a cached entry; None when the entry is not one this version wrote (then it is rebuilt)."""
    try:
        spec, seed, preset, suite, state, source, as_row, table, outputs, mtime, steps, damage = data
        checks = (isinstance(spec, str), isinstance(seed, int), isinstance(preset, str), isinstance(suite, str),
                  state is None or isinstance(state, str), source in SOURCES, as_row is None or isinstance(as_row, str),
                  table is None or isinstance(table, str), isinstance(outputs, list), isinstance(mtime, float),
                  steps is None or isinstance(steps, int), damage is None or isinstance(damage, str))
    except (TypeError, ValueError):
        return None
    if not all(checks):
        return None
    return RunInfo(run=run, spec=spec, seed=seed, preset=preset, hash12=run.path.name, suite=suite, state=state,
                   source=source, as_row=as_row, table=table, outputs=tuple(o for o in outputs if o in OUTPUTS),
                   mtime=mtime, steps=steps, damage=damage)


def _load_index(path: Path) -> dict[str, Any]:
    """The cached entries of one spec directory; {} when the file is missing, unreadable or not ours."""
    try:
        data = json.loads(read_regular(path))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != INDEX_VERSION or not isinstance(data.get("runs"), dict):
        return {}
    return data["runs"]


_VIEW: contextvars.ContextVar[dict | None] = contextvars.ContextVar("run_index_view", default=None)


@contextlib.contextmanager
def one_view() -> Iterator[None]:
    """Within, each spec directory is read once: a reading verb that builds several tables and figures sees one
    consistent view of the runs root and pays for each directory once (`status --watch` opens one per refresh)."""
    token = _VIEW.set({})
    try:
        yield
    finally:
        _VIEW.reset(token)


def spec_runs(root: Path, name: str) -> list[RunInfo]:
    """Every run directory of spec directory `root/name` (those holding a spec file), in path order, through
    the index (entries read again when their key changed; the index rewritten when anything did)."""
    view = _VIEW.get()
    if view is not None and (str(root), name) in view:
        return list(view[(str(root), name)])
    found = _spec_runs(root, name)
    if view is not None:
        view[(str(root), name)] = found
    return list(found)


def _spec_runs(root: Path, name: str) -> list[RunInfo]:
    dirs = run_dirs_of_spec(root, name)
    cache_path = index_file(root, name)
    check_real_directories([cache_path.parent], fix="move it away; the index is a cache the reading verbs rebuild")
    cached = _load_index(cache_path)
    entries: dict[str, Any] = {}
    out: list[RunInfo] = []
    changed = set(cached) != {rd.path.name for rd in dirs}
    for rd in dirs:
        key = entry_key(rd)
        if key is None:
            changed = True
            continue
        old = cached.get(rd.path.name)
        if isinstance(old, dict) and old.get("key") == key and verify.sealed(old):
            if old.get("info") is None:  # a directory without a spec file: not a run (yet)
                entries[rd.path.name] = old
                continue
            info = _info_from_json(rd, old["info"])
            if info is not None:
                entries[rd.path.name] = old
                out.append(info)
                continue
        changed = True
        if not rd.spec_file.is_file():
            entries[rd.path.name] = {"key": key, "info": None, "seal": verify.seal(key, None)}
            continue
        info = read_run_info(rd)
        entries[rd.path.name] = {"key": key, "info": _info_to_json(info), "seal": verify.seal(key, _info_to_json(info))}
        out.append(info)
    if changed:
        remove_temp_files(cache_path.parent, older_than_s=STALE_TEMP_S)  # a reader killed mid-write of the index
        try:
            atomic_write_json(cache_path, {"version": INDEX_VERSION, "runs": entries})
        except OSError:  # a read-only runs root still reads, without the cache
            pass
    return out


def find_runs(runs_root: str | os.PathLike, *, preset: str | None = None,
              specs: Iterable[str] | None = None) -> list[RunInfo]:
    """Every run under `runs_root` (optionally of one preset, and only in the directories of `specs`), in path
    order. Checkpoint runs live in their row's first spec's directory, so `specs` finds them by that name."""
    root = Path(runs_root)
    if not root.is_dir():
        return []
    names = spec_names_under(root) if specs is None else sorted(set(specs))
    runs = [info for name in names if is_spec_dir_name(name) for info in spec_runs(root, name)]
    return [r for r in runs if preset is None or r.preset == preset]


def is_spec_dir_name(name: str) -> bool:
    """A name that can be a spec directory (not a hidden folder of the root such as the index, not a path)."""
    return bool(name) and not name.startswith(".") and "/" not in name and name not in (".", "..")


def pick_run(candidates: Sequence[Candidate], *, current_hash12: str | None, exact: bool = False) -> Candidate | None:
    """The run a spec's results are read from, among `candidates` (runs of that spec and preset).

    The run of the spec's current hash when it is a candidate; else (unless `exact`: a reading verb given
    `--set` asks for that one variant only) the newest by directory mtime (the most recently written
    results; the first in order on a tie); None without candidates.
    """
    for run in candidates:
        if run.hash12 == current_hash12:
            return run
    if not candidates or exact:
        return None
    return max(candidates, key=_mtime_of)


def _mtime_of(run: HasRunDir) -> float:
    mtime = getattr(run, "mtime", None)
    return mtime if isinstance(mtime, float) and mtime else Path(run.path).stat().st_mtime


def runs_by_spec(runs: Sequence[RunInfo]) -> dict[tuple[str, str], list[RunInfo]]:
    """(spec name, preset) -> its runs, in the given order."""
    out: dict[tuple[str, str], list[RunInfo]] = {}
    for run in runs:
        out.setdefault((run.spec, run.preset), []).append(run)
    return out
