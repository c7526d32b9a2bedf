"""The runs under a runs root, by spec, read through a plain cache, and the one rule that picks the run a spec's
results come from.

The index is a cache per spec directory (`rundir.index_file(root, name)`), never the source of truth: each entry
is a `RunInfo`, a mapping by field name: the run's identity as its identity file records it
(exoformer/run_identity.py, the one record of what a run is), the status state, which result files exist and
why a run reads DAMAGED (exoformer/runs/row_integrity.py), keyed by `entry_key` (the times and sizes of the
files it is read from). An entry whose key does not match, and an index file that cannot be read, is simply
rebuilt from the run directory; deleting the index loses nothing. Asking for some specs reads only their
directories, so a table costs what its runs cost, not what the root holds.

Where it lives (docs/architecture.md "Trust model"): in the reading user's cache directory, keyed by the runs
root's real path (`rundir.index_dir`), never inside the runs root: whoever can write a runs root could otherwise
rewrite a DAMAGED run's entry to SUCCEEDED. An index file is read only when this user owns it and its folder and
no one else can write either (`_private`); anything else is read from the run's files. A read-only or shared
runs root is cached the same way. A `.index/` folder inside the root (where the index lived before) is ignored.

A spec can have several run directories: its current hash, and older ones (runs made with `--set`
overrides, or before a registry edit changed its config). Tables, figures and claims all ask `pick_run`
which one to read, so they never disagree about it. Torch-free; reads run directories through RunDir only.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import json
import os
import shlex
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exoformer.errors import UserError
from exoformer.io import MAX_RECORD_BYTES, atomic_write_json, open_regular, read_regular_text, remove_temp_files
from exoformer.records import check, field_types
from exoformer.rerun import rerun_command
from exoformer.run_identity import CHECKPOINT, OURS, SOURCES, RunIdentity
from exoformer.runs import verify
from exoformer.rundir import DAMAGED, RunDir, Status, index_file, run_dirs_of_spec, spec_names_under
from exoformer.runs.row_integrity import reading_state

__all__ = ["CHECKPOINT", "OURS", "SOURCES", "RunInfo", "entry_of", "find_runs", "identity_of", "is_run", "one_view",
           "pick_run", "read_run_spec"]

INDEX_VERSION = 7
INDEX_LOCK = ".lock"
"""The flock file of an index folder: held shared by each process while it writes an index file there (the
kernel drops it when that process dies), taken alone by whoever removes the temporary files of dead writers."""


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
    """The RunInfo of one run directory read from its files: DAMAGED, with the reason and the fix, when its
    identity file cannot be read, when its status file cannot or is missing after stages were recorded
    (`run_state_problem`), and when a finished run's result rows fail the checks; each reason ends in the fix.
    Every reading verb (status, plan, table, compare, ...) shows that one verdict."""
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
    elif (problem := run_state_problem(run, status, identity)) is not None:
        state, damage = DAMAGED, problem
    else:
        state, damage = reading_state(run, state, identity.spec)
        if damage is not None:  # its fix: the command of exactly this variant
            why = damage.rpartition(" (fix: ")[0] or damage
            damage = f"{why} (fix: `{variant_command(identity, run, '--force')}`)"
    try:
        mtime = run.path.stat().st_mtime
    except OSError:
        mtime = 0.0
    return RunInfo(run=run, identity=identity, state=state, damage=damage, outputs=_outputs(run), mtime=mtime)


RESUMES = "resumes it"
"""The end of the fix of damage a plain `run` repairs (a status file that cannot be read); any other damage needs
--force (exoformer/runs/plan.py `decide` reads which)."""


def variant_command(identity: RunIdentity, run: RunDir, *flags: str) -> str:
    """`reproduce.py run SPEC --preset P [--set k=v ...] --runs-dir ROOT [flags]`: the command of exactly this
    run's variant, from its identity (its --set words written as `status` shows them)."""
    words = ["reproduce.py", "run", identity.spec, "--preset", identity.preset]
    for key, value in identity.overrides.items():
        words += ["--set", f"{key}={yaml_word(value)}"]
    return shlex.join([*words, "--runs-dir", str(run.path.parent.parent), *flags])


def yaml_word(value: Any) -> str:
    """One value as a --set word writes it (`true`, `null`, `[q,k]`), as YAML reads it back."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(yaml_word, value)) + "]"
    return str(value)


def run_state_problem(run: RunDir, status: Status | None, identity: RunIdentity) -> str | None:
    """Why a run with an identity is DAMAGED whatever its state says, with the fix naming its variant; None when
    it is not:
    - its status file is not a regular file (a FIFO, a link, a folder), or not a status record: a plain `run`
      resumes it (RESUMES);
    - it has no status file although stages were recorded: it ran, so it is no new run, and only --force reruns
      it (its results may be gone with the status file).
    The spec file is no reason (the resolved config, for people; the identity says what the run is)."""
    name = run.status_file.name
    if status is not None and status.state == DAMAGED:
        why = "is not a regular file" if not _regular(run.status_file) else "is not a status record"
        return (f"{name} {why} (fix: `{variant_command(identity, run)}` {RESUMES}, or add --force to start "
                "over)")
    if status is None:
        stages = sorted(p.stem for p in _listing(run.stages_dir) if p.suffix == ".json")
        if stages:
            return (f"{name} is missing but stage {', '.join(stages)} {'was' if len(stages) == 1 else 'were'} "
                    f"recorded; its numbers are not shown (fix: `{variant_command(identity, run, '--force')}`)")
    return None


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _listing(folder: Path) -> list[Path]:
    try:
        return [folder / entry.name for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False)]
    except OSError:
        return []


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
_KEY_FILES = (*_relative("spec_file", "status_file", "identity_file", "eval_rows", "validation", "analysis_rows"),
              *(str(RunDir(".").stage_file(stage)) for stage in ("evaluate", "validate")))


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


def _private(info: os.stat_result) -> bool:
    """Whether a file or folder could have been written by this user only: owned by them, writable by no one
    else (root, who can write anything anyway, reads its own cache)."""
    return info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _load_index(path: Path) -> dict[str, Any]:
    """The cached entries of one spec directory; {} when the file is missing, unreadable or not ours, or when it
    or its folder is not `_private` (then another user could have forged it)."""
    try:
        folder = os.lstat(path.parent)
        if not stat.S_ISDIR(folder.st_mode) or not _private(folder):
            return {}
        with open_regular(path) as f:  # no symbolic link, no FIFO
            if not _private(os.fstat(f.fileno())):
                return {}
            data = json.loads(f.read(MAX_RECORD_BYTES + 1))
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
    cached = {} if cache_path is None else _load_index(cache_path)
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
    if cache_path is not None and (changed or cache_path.parent not in _SWEPT):
        _store(cache_path, {"version": INDEX_VERSION, "runs": entries} if changed else None)
    return out


_SWEPT: set[Path] = set()
"""The index folders this process has swept (`_store`): a read that writes nothing sweeps once per process."""


def _store(path: Path, index: dict[str, Any] | None) -> None:
    """Write `index` (None: nothing) to index file `path` in its private folder, made 0700, the file 0600, after
    removing the temporary files of writers that died mid-write: when no process holds the folder's INDEX_LOCK,
    every temporary file there is a dead writer's, whatever its age. A cache that cannot be written (a full
    disk, a folder that is not this user's) is left as it is: the verbs read the runs without it."""
    folder = path.parent
    try:
        if index is None and not folder.is_dir():
            return
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            return  # a link or someone else's folder: never written through
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(folder, 0o700)
        fd = os.open(folder / INDEX_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except (OSError, UserError):
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass  # another process is writing: its temporary file is live, the next writer alone sweeps
        else:
            remove_temp_files(folder)
            _SWEPT.add(folder)
        if index is None:
            return
        with contextlib.suppress(OSError):  # held while writing; without it a sweeper may cost this one write
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        atomic_write_json(path, index)
        os.chmod(path, 0o600)
    except (OSError, UserError):
        pass
    finally:
        os.close(fd)


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
