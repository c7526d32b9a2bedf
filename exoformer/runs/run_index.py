"""The runs under a runs root, by spec, read through a plain cache, and the one rule that picks the run a spec's
results come from.

The index is a cache per spec directory (`rundir.index_file(root, name)`), never the source of truth: each entry
is a `RunInfo`, a mapping by field name: the run's identity as its identity file records it
(exoformer/run_identity.py, the one record of what a run is), the status state, which result files exist and
why a run reads DAMAGED (exoformer/runs/row_integrity.py), keyed by `entry_key` (the modification times of the
files it is read from). An entry whose key does not match, and an index file that cannot be read, is simply
rebuilt from the run directory; deleting the index loses nothing, and a root that cannot be written still reads.
Asking for some specs reads only their directories, so a table costs what its runs cost, not what the root holds.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exoformer.errors import UserError
from exoformer.io import atomic_write_json, check_real_directories, read_regular, read_regular_text, remove_temp_files
from exoformer.records import check, field_types
from exoformer.rerun import rerun_command
from exoformer.run_identity import CHECKPOINT, OURS, SOURCES, RunIdentity
from exoformer.runs import verify
from exoformer.rundir import DAMAGED, RunDir, index_file, run_dirs_of_spec, spec_names_under
from exoformer.runs.row_integrity import reading_state

__all__ = ["CHECKPOINT", "OURS", "SOURCES", "RunInfo", "entry_of", "find_runs", "identity_of", "is_run", "one_view",
           "pick_run", "read_run_spec"]

INDEX_VERSION = 6
STALE_TEMP_S = 60.0
"""A temporary file of an index write older than this was left by a reader killed while writing (a write takes
milliseconds), so the next writer removes it."""


@dataclass(kw_only=True, slots=True, frozen=True)
class RunInfo:
    """One run a reader may pick: its identity and what its files say now. Cached in the index as a mapping by
    field name (`to_json`), the identity as RunIdentity.to_dict() writes it."""

    run: RunDir
    identity: RunIdentity | None
    """None when the identity file is missing or unreadable (the run then reads DAMAGED)."""
    state: str | None
    """Status state (PENDING, RUNNING, SUCCEEDED, FAILED, INTERRUPTED, DAMAGED); None without a status record."""
    damage: str | None = None
    """Why the run reads DAMAGED (exoformer/runs/row_integrity.py, or no identity); None otherwise."""
    outputs: tuple[str, ...] = ()
    """Which result files and stage records exist: names from OUTPUTS."""
    mtime: float = 0.0
    """The run directory's modification time (pick_run's tie-breaker among non-current runs)."""
    # Read from the identity when the entry is made (attributes, not properties: choosing runs reads them often).
    hash12: str = field(init=False)
    """The run directory's name (what pick_run compares with a spec's current hash)."""
    spec: str = field(init=False)
    """The spec the identity names (without one: the spec directory's name)."""
    seed: int = field(init=False)
    preset: str = field(init=False)
    """Without an identity: "" (then it is a candidate under every preset, so that readers see it DAMAGED)."""
    source: str = field(init=False)
    """"ours" (we trained it) or "checkpoint" (someone's trained checkpoint evaluated by us as a table row)."""
    as_row: str | None = field(init=False)
    table: str | None = field(init=False)
    suite: str = field(init=False)
    steps: int | None = field(init=False)
    """The spec's training steps (`status` shows progress against it)."""

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "hash12", self.run.path.name)
        known = self.identity or RunIdentity(spec=self.run.path.parent.name, seed=0, preset="", hash12=self.hash12)
        for name in _FROM_IDENTITY:
            put(self, name, getattr(known, name))

    @property
    def path(self) -> Path:
        return self.run.path

    @property
    def has_eval(self) -> bool:
        return any(name in self.outputs for name in ("eval_rows", "analysis_rows", "validation"))

    def has(self, output: str) -> bool:
        return output in self.outputs

    def of_preset(self, preset: str | None) -> bool:
        """Whether a reading of `preset` (None: any) sees this run (one without an identity: every reading)."""
        return preset is None or self.identity is None or self.preset == preset

    def to_json(self) -> dict[str, Any]:
        return {"identity": None if self.identity is None else self.identity.to_dict(), "state": self.state,
                "damage": self.damage, "outputs": list(self.outputs), "mtime": self.mtime}

    @classmethod
    def from_json(cls, run: RunDir, data: Any) -> RunInfo | None:
        """The RunInfo of a cached entry; None when it is not one this version wrote (then it is rebuilt)."""
        cached = ("state", "damage", "outputs", "mtime")  # what to_json writes besides the identity
        if not isinstance(data, dict) or set(data) != {"identity", *cached}:
            return None
        try:  # each field against its annotation; the identity as its file is read
            values = {name: check(data[name], field_types(cls)[name], where="the run index") for name in cached}
            identity = None if data["identity"] is None else RunIdentity.from_dict(data["identity"],
                                                                                   where="the run index")
        except UserError:
            return None
        values["outputs"] = tuple(o for o in values["outputs"] if o in OUTPUTS)
        return cls(run=run, identity=identity, **values)


_FROM_IDENTITY = ("spec", "seed", "preset", "source", "as_row", "table", "suite", "steps")
OUTPUTS = ("eval_rows", "analysis_rows", "validation", "stage:evaluate", "stage:validate")
"""The result files and stage records an index entry says exist (RunDir attribute names; `stage:` records)."""


SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader (what yaml.safe_load uses), in C where the installed PyYAML has libyaml: the same safe
constructors, faster on a run's spec file."""


def read_run_spec(run: RunDir) -> dict:
    """The run's spec file (its resolved config, shown by `compare`) as a mapping; a damaged one is a UserError
    naming it. Never what a run is: that is its identity."""
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


def is_run(run: RunDir) -> bool:
    """A run directory (what `prepare` made: a spec file or an identity file), not a folder still being made."""
    return run.spec_file.is_file() or os.path.lexists(run.identity_file)


def read_run_info(run: RunDir) -> RunInfo:
    """The RunInfo of one run directory read from its files. A run without a readable identity file reads
    DAMAGED, and so does a finished run whose result rows fail the checks."""
    status = run.read_status()
    state = None if status is None else status.state
    try:
        identity, why = run.identity(), "no such file"
    except UserError as err:
        identity, why = None, err.problem
    if identity is None:
        state, damage = DAMAGED, (f"{run.identity_file.name} missing or unreadable: {why} (fix: "
                                  f"`{rerun_command(run.read_provenance(), run.path.parent.name, run.path)}` to "
                                  "rerun it)")
    else:
        state, damage = reading_state(run, state, identity.spec)
    try:
        mtime = run.path.stat().st_mtime
    except OSError:
        mtime = 0.0
    return RunInfo(run=run, identity=identity, state=state, damage=damage, outputs=_outputs(run), mtime=mtime)


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
    """Every run directory of spec directory `root/name` (those `is_run` accepts), in path order, through the
    index (entries read again when their key changed; the index rewritten when anything did)."""
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
        if isinstance(old, dict) and old.get("key") == key:
            if old.get("info") is None:  # a directory still being made: not a run (yet)
                entries[rd.path.name] = old
                continue
            info = RunInfo.from_json(rd, old["info"])
            if info is not None:
                entries[rd.path.name] = old
                out.append(info)
                continue
        changed = True
        if not is_run(rd):
            entries[rd.path.name] = {"key": key, "info": None}
            continue
        info = read_run_info(rd)
        entries[rd.path.name] = {"key": key, "info": info.to_json()}
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
    one_view() from the view); None when it is not a run."""
    rd = run if isinstance(run, RunDir) else RunDir(run)
    for info in spec_runs(rd.path.parent.parent, rd.path.parent.name):
        if info.hash12 == rd.path.name:
            return info
    return read_run_info(rd) if is_run(rd) else None


def identity_of(run: RunInfo | RunDir | str | os.PathLike) -> RunIdentity:
    """The run's identity as its identity file records it; a run without one is a UserError (it is DAMAGED)."""
    info = run if isinstance(run, RunInfo) else entry_of(run)
    where = str(getattr(run, "path", run))
    if info is None:
        raise UserError("not a run directory", where=where, fix="name a run directory <runs root>/<spec>/<hash12>")
    if info.identity is None:
        raise UserError(f"the run is DAMAGED ({info.damage})", where=where, fix="re-run it with --force")
    return info.identity


def find_runs(runs_root: str | os.PathLike, *, preset: str | None = None,
              specs: Iterable[str] | None = None) -> list[RunInfo]:
    """Every run under `runs_root` (optionally of one preset, and only in the directories of `specs`), in path
    order. Checkpoint runs live in their row's first spec's directory, so `specs` finds them by that name."""
    root = Path(runs_root)
    if not root.is_dir():
        return []
    names = spec_names_under(root) if specs is None else sorted(set(specs))
    runs = [info for name in names if is_spec_dir_name(name) for info in spec_runs(root, name)]
    return [r for r in runs if r.of_preset(preset)]


def is_spec_dir_name(name: str) -> bool:
    """A name that can be a spec directory (not a hidden folder of the root such as the index, not a path)."""
    return bool(name) and not name.startswith(".") and "/" not in name and name not in (".", "..")


def pick_run(candidates: Sequence[RunInfo], *, current_hash12: str | None, exact: bool = False) -> RunInfo | None:
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
    return max(candidates, key=lambda run: run.mtime)
