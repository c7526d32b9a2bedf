"""The runs under a runs root, by spec, read through a derived cache, and the one rule that picks the run a
spec's results come from.

The index is a cache per spec directory (`rundir.index_file(root, name)`), never the source of truth: each
entry is a `RunInfo`, a mapping by field name: the run's identity (exoformer/run_identity.py: as its identity
file records it, or for a run launched before identity files existed derived once by
exoformer.runs.rundirs.derive_identity), the status state, which result files exist, why a run reads DAMAGED
(exoformer/runs/row_integrity.py), keyed by `entry_key`. An entry whose key does not match, and an index file
that cannot be read, is not ours or is damaged, is simply rebuilt. A derived identity is compared with a
registry's definitions the first time a reader asks for it with that registry (`identity_of`), and cached so.
The index is rewritten atomically when anything changed, and a root that cannot be written still reads (without the
cache). Asking for some specs reads only their directories, so a table costs what its runs cost, not what
the root holds.

A spec can have several run directories: its current hash, and older ones (runs made with `--set`
overrides, or before a registry edit changed its config). Tables, figures and claims all ask `pick_run`
which one to read, so they never disagree about it. Torch-free; reads run directories through RunDir only, and
a run's spec file through `read_run_spec` only (its one reader on the reading side).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml

from exoformer.errors import UserError
from exoformer.io import atomic_write_json, check_real_directories, read_regular, read_regular_text, remove_temp_files
from exoformer.registry.registry import Registry
from exoformer.run_identity import CHECKPOINT, OURS, SOURCES, RunIdentity
from exoformer.runs import verify
from exoformer.rundir import RunDir, index_file, run_dirs_of_spec, spec_names_under
from exoformer.runs.row_integrity import reading_state
from exoformer.runs.rundirs import derive_identity

__all__ = ["CHECKPOINT", "OURS", "SOURCES", "RunInfo", "entry_of", "find_runs", "identity_of", "one_view",
           "pick_run", "runs_by_spec", "read_run_spec"]

INDEX_VERSION = 5
STALE_TEMP_S = 60.0
"""A temporary file of an index write older than this was left by a reader killed while writing (a write takes
milliseconds), so the next writer removes it."""


@dataclass(kw_only=True, slots=True, frozen=True)
class RunInfo:
    """One run as the reading verbs see it: its identity and what its files say now. Cached in the index as a
    mapping by field name (`to_json`), the identity as RunIdentity.to_dict() writes it."""

    run: RunDir
    identity: RunIdentity
    state: str | None
    """Status state (PENDING, RUNNING, SUCCEEDED, FAILED, INTERRUPTED, DAMAGED); None without a status record."""
    damage: str | None = None
    """Why a finished run reads DAMAGED (exoformer/runs/row_integrity.py); None otherwise."""
    outputs: tuple[str, ...] = ()
    """Which result files and stage records exist: names from OUTPUTS."""
    mtime: float = 0.0
    """The run directory's modification time (pick_run's tie-breaker among non-current runs)."""
    steps: int | None = None
    """The spec's training steps (`status` shows progress against it)."""
    compared_with: str | None = None
    """For a derived identity: the registry directory its comparison was made with (None: not yet made)."""
    # Read from the identity when the entry is made (attributes, not properties: choosing runs reads them often).
    hash12: str = field(init=False)
    """The run directory's name (what pick_run compares with a spec's current hash)."""
    spec: str = field(init=False)
    seed: int = field(init=False)
    preset: str = field(init=False)
    source: str = field(init=False)
    """"ours" (we trained it) or "checkpoint" (someone's trained checkpoint evaluated by us as a table row)."""
    as_row: str | None = field(init=False)
    table: str | None = field(init=False)
    suite: str = field(init=False)

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "hash12", self.run.path.name)
        for name in _FROM_IDENTITY:
            put(self, name, getattr(self.identity, name))

    @property
    def path(self) -> Path:
        return self.run.path

    @property
    def has_eval(self) -> bool:
        return any(name in self.outputs for name in ("eval_rows", "analysis_rows", "validation"))

    def has(self, output: str) -> bool:
        return output in self.outputs

    def to_json(self) -> dict[str, Any]:
        return {"identity": self.identity.to_dict(), "state": self.state, "damage": self.damage,
                "outputs": list(self.outputs), "mtime": self.mtime, "steps": self.steps,
                "compared_with": self.compared_with}

    @classmethod
    def from_json(cls, run: RunDir, data: Any) -> RunInfo | None:
        """The RunInfo of a cached entry; None when it is not one this version wrote (then it is rebuilt)."""
        if not isinstance(data, dict) or any(not isinstance(data.get(k), kinds) or isinstance(data.get(k), bool)
                                             for k, kinds in _JSON_KINDS.items()):
            return None
        try:
            identity = RunIdentity.from_dict(data.get("identity"), where="the run index")
        except UserError:
            return None
        return cls(run=run, identity=identity, state=data["state"], damage=data["damage"], mtime=data["mtime"],
                   outputs=tuple(o for o in data["outputs"] if o in OUTPUTS), steps=data["steps"],
                   compared_with=data["compared_with"])


_FROM_IDENTITY = ("spec", "seed", "preset", "source", "as_row", "table", "suite")

_JSON_KINDS = {"state": (str, type(None)), "damage": (str, type(None)), "outputs": (list,), "mtime": (float,),
               "steps": (int, type(None)), "compared_with": (str, type(None))}
"""The fields of a cached entry besides the identity, and the JSON types each may have."""


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
    """The RunInfo of one run directory read from its files; a damaged spec file is a UserError. A finished run
    whose result rows or identity file are damaged reads DAMAGED (its identity then derived from the spec)."""
    data = read_run_spec(run)
    if str(data.get("source") or OURS) not in SOURCES:
        raise UserError(f"the run's spec file says source {data['source']!r}", where=str(run.spec_file),
                        fix=f"source is one of {', '.join(SOURCES)} (absent = {OURS})")
    try:
        identity, problem = run.identity(), None
    except UserError as err:
        identity, problem = None, f"{err.where}: {err.problem}"
    status = run.read_status()
    state, damage = reading_state(run, None if status is None else status.state, data, problem)
    try:
        mtime = run.path.stat().st_mtime
    except OSError:
        mtime = 0.0
    return RunInfo(run=run, identity=identity or derive_identity(None, run, data), state=state, damage=damage,
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


def _relative(*names: str) -> tuple[str, ...]:
    """The paths of these RunDir attributes relative to the run directory (joined as text: no Path per run)."""
    return tuple(str(getattr(RunDir("."), name)) for name in names)


_KEY_FOLDERS = _relative("eval_dir", "analysis_dir", "stages_dir")


_KEY_FILES = _relative("spec_file", "status_file", "identity_file", "eval_rows", "validation", "analysis_rows")


def entry_key(run: RunDir) -> list[int] | None:
    """What an index entry is valid for: the run directory's inode and modification time, those of its result and
    stage-record folders, and the time and size of each file the entry is read from (a file edited in place
    changes neither folder's time); None when the directory is gone."""
    top_path = str(run.path)
    try:
        top = os.stat(top_path)
    except OSError:
        return None
    stamps = [top.st_ino, top.st_mtime_ns, *(_mtime_ns(os.path.join(top_path, f)) for f in _KEY_FOLDERS)]
    for path in [*(os.path.join(top_path, name) for name in _KEY_FILES), *verify.key_paths(run)]:
        stamps.extend(verify.file_stamp(path))
    return stamps


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
            info = RunInfo.from_json(rd, old["info"])
            if info is not None:
                entries[rd.path.name] = old
                out.append(info)
                continue
        changed = True
        if not rd.spec_file.is_file():
            entries[rd.path.name] = {"key": key, "info": None, "seal": verify.seal(key, None)}
            continue
        info = read_run_info(rd)
        entries[rd.path.name] = {"key": key, "info": info.to_json(), "seal": verify.seal(key, info.to_json())}
        out.append(info)
    if changed:
        remove_temp_files(cache_path.parent, older_than_s=STALE_TEMP_S)  # a reader killed mid-write of the index
        try:
            atomic_write_json(cache_path, {"version": INDEX_VERSION, "runs": entries})
        except OSError:  # a read-only runs root still reads, without the cache
            pass
    return out


def entry_of(run: RunDir | str | os.PathLike) -> RunInfo | None:
    """The index entry of one run directory `<root>/<name>/<hash12>` (read through the index, or inside
    one_view() from the view); None when it is not a run (no spec file)."""
    rd = run if isinstance(run, RunDir) else RunDir(run)
    for info in spec_runs(rd.path.parent.parent, rd.path.parent.name):
        if info.hash12 == rd.path.name:
            return info
    return read_run_info(rd) if rd.spec_file.is_file() else None


def identity_of(registry: Registry, run: RunInfo | RunDir | str | os.PathLike) -> RunIdentity:
    """The run's identity: recorded at launch, else derived when the index read the run and compared with
    `registry` the first time one asks with it; that comparison is cached in the index too."""
    info = run if isinstance(run, RunInfo) else entry_of(run)
    if info is None:
        raise UserError("not a run directory (no spec file)", where=str(getattr(run, "path", run)),
                        fix="name a run directory <runs root>/<spec>/<hash12>")
    key = str(registry.directory)
    if info.identity.recorded or info.compared_with == key:
        return info.identity
    compared = replace(info, identity=derive_identity(registry, info.run, read_run_spec(info.run)), compared_with=key)
    _remember(compared)
    return compared.identity


def _remember(info: RunInfo) -> None:
    """Put an entry made after its spec directory was read (a derived identity compared) in the view and in
    the index file, when the run did not change meanwhile."""
    root, name = info.path.parent.parent, info.path.parent.name
    view = _VIEW.get()
    if view is not None and (str(root), name) in view:
        view[(str(root), name)] = [info if old.path == info.path else old for old in view[(str(root), name)]]
    cache_path = index_file(root, name)
    cached = _load_index(cache_path)
    entry = cached.get(info.path.name)
    if isinstance(entry, dict) and entry.get("key") == entry_key(info.run):
        entry["info"] = info.to_json()
        entry["seal"] = verify.seal(entry["key"], entry["info"])
        with contextlib.suppress(OSError):
            atomic_write_json(cache_path, {"version": INDEX_VERSION, "runs": cached})


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
