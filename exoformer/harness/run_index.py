"""The runs under a runs root, by spec, and the one rule that picks the run a spec's results come from.

A spec can have several run directories: its current hash, and older ones (runs made with `--set`
overrides, or before a registry edit changed its config). Tables, figures and claims all ask `pick_run`
which one to read, so they never disagree about it. Torch-free; reads run directories through RunDir only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import yaml

from exoformer.errors import UserError
from exoformer.rundir import RunDir, iter_run_dirs

OURS, CHECKPOINT = "ours", "checkpoint"
SOURCES = (OURS, CHECKPOINT)
"""Where a run's weights come from; the paper's own numbers are the third source, "paper" (reported.yaml)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class RunInfo:
    """Identity and state of one run directory, as its spec file and status record say."""

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
    """Why a finished run reads DAMAGED (exoformer/harness/row_integrity.py); None otherwise."""

    @property
    def path(self) -> Path:
        return self.run.path

    @property
    def has_eval(self) -> bool:
        return any(p.is_file() for p in (self.run.eval_rows, self.run.analysis_rows, self.run.validation))


class HasRunDir(Protocol):
    """What pick_run needs of a candidate: its hash and its directory."""

    @property
    def hash12(self) -> str: ...

    @property
    def path(self) -> Path: ...


Candidate = TypeVar("Candidate", bound=HasRunDir)


def read_run_spec(run: RunDir) -> dict:
    """The run's spec file as a mapping; a damaged one is a UserError naming it."""
    spec_file = run.spec_file
    try:
        data = yaml.safe_load(spec_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise UserError(f"the run's spec file cannot be read ({err.__class__.__name__})", where=str(spec_file),
                        fix="the run directory is damaged: re-run it with --force") from None
    if not isinstance(data, dict) or "name" not in data:
        raise UserError("the run's spec file has no name", where=str(spec_file),
                        fix="the run directory is damaged: re-run it with --force")
    return data


def read_run_info(run: RunDir) -> RunInfo:
    """The RunInfo of one run directory; a damaged spec file is a UserError naming it."""
    data = read_run_spec(run)
    status = run.read_status()
    seed = data.get("seed", 0)
    source = str(data.get("source") or OURS)
    if source not in SOURCES:
        raise UserError(f"the run's spec file says source {source!r}", where=str(run.spec_file),
                        fix=f"source is one of {', '.join(SOURCES)} (absent = {OURS})")
    from exoformer.harness.row_integrity import reading_state

    state, damage = reading_state(run, None if status is None else status.state, str(data["name"]))
    return RunInfo(run=run, spec=str(data["name"]), seed=int(seed) if isinstance(seed, int) else 0,
                   preset=str(data.get("preset", "")), hash12=run.path.name,
                   suite=str((data.get("eval") or {}).get("suite", "")),
                   state=state, damage=damage, source=source,
                   as_row=None if data.get("as_row") is None else str(data["as_row"]),
                   table=None if data.get("table") is None else str(data["table"]))


def recorded_overrides(run: RunDir) -> list[str]:
    """The `--set KEY=VALUE` overrides of the command that created the run (its provenance), in order.

    They tell a deliberate variant of a spec (run with --set) from a stale run (the spec's definition
    changed since); a run without a recorded command has none.
    """
    command = run.read_provenance().get("command")
    if not isinstance(command, list):
        return []
    words = [str(w) for w in command]
    out = []
    for i, word in enumerate(words):
        if word == "--set" and i + 1 < len(words):
            out.append(words[i + 1])
        elif word.startswith("--set="):
            out.append(word[len("--set="):])
    return out


def find_runs(runs_root: str | os.PathLike, *, preset: str | None = None) -> list[RunInfo]:
    """Every run directory under `runs_root` (optionally of one preset), in path order."""
    runs = [read_run_info(run) for run in iter_run_dirs(runs_root)]
    return [r for r in runs if preset is None or r.preset == preset]


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
    return max(candidates, key=lambda run: Path(run.path).stat().st_mtime)


def runs_by_spec(runs: Sequence[RunInfo]) -> dict[tuple[str, str], list[RunInfo]]:
    """(spec name, preset) -> its runs, in the given order."""
    out: dict[tuple[str, str], list[RunInfo]] = {}
    for run in runs:
        out.setdefault((run.spec, run.preset), []).append(run)
    return out
