"""Which run each operand of `compare` names: `SPEC`, `SPEC@PRESET`, `SPEC+key=value,...` (a `--set` variant, after
an optional @PRESET) or a run directory path.

A named spec is read as every reading verb reads it (exoformer/report/reading/selection.py `read`: the preset rule of README
"Which runs the reading verbs read", then the one pick per spec and preset, exact for a `--set` variant); a run
directory is that run, handed to a Selection of its own so its rows, identity, notes and curve come from the same
reader. An operand that names no finished run is one UserError line naming it and what to run. Torch-free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from exoformer.errors import UserError, did_you_mean
from exoformer.registry.registry import Registry
from exoformer.report.reading.recipe import identity_of
from exoformer.report.reading.selection import Picked, Selection, read, row_spec
from exoformer.run_identity import RunIdentity
from exoformer.rundir import ACTIVE_STATES, RunDir
from exoformer.runs.run_index import RunInfo, entry_of, find_runs, read_run_spec
from exoformer.runs.status import set_words

MAX_OPERANDS = 8
"""More runs than this side by side no longer fit a terminal line or tell apart in one plot."""
SYNTAX = "SPEC, SPEC@PRESET, SPEC+key=value,... or a run directory path"


@dataclass(kw_only=True, slots=True, frozen=True)
class Operand:
    """One operand as written: a spec (with its preset and --set words) or a run directory."""

    text: str
    spec: str | None = None
    preset: str | None = None
    overrides: tuple[str, ...] = ()
    path: Path | None = None


SPEC_FILE_NAME = RunDir(".").spec_file.name
"""What a run directory must hold, as rundir.py names it."""

@dataclass(kw_only=True, slots=True)
class Compared:
    """One operand's run: the pick every reader reads, its identity and its resolved spec file."""

    letter: str
    label: str
    """spec@preset[+key=value,...] as the run's identity records it."""
    picked: Picked
    identity: RunIdentity
    config: dict
    """The run's spec file as a mapping (read_run_spec); empty when it cannot be read (`config_problem`)."""
    preset_note: str | None = None
    """The reading verbs' preset line (selection.choose_preset), when the preset read is not the one asked for."""
    config_problem: str | None = None
    """Why the spec file cannot be read (a copy cut short leaves it empty): the run's numbers are compared, its
    config is not (the identity says what the run is; `status` and `table` read it the same)."""

    @property
    def selection(self) -> Selection:
        return self.picked.selection


def parse_operand(text: str) -> Operand:
    """An operand's parts (syntax only: the registry checks the names when the run is read)."""
    where = f"operand {text}"
    if not text.strip():
        raise UserError("the operand is empty", where="compare", fix=f"name a run: {SYNTAX}")
    if os.sep in text or text in (".", "..") or text.startswith("~"):
        return Operand(text=text, path=Path(text).expanduser())
    head, plus, sets = text.partition("+")
    name, at, preset = head.partition("@")
    if not name or (at and not preset):
        raise UserError("names no spec" if not name else "has an empty preset after '@'", where=where,
                        fix=f"write {SYNTAX}")
    words: list[str] = []
    for piece in sets.split(",") if plus else []:
        if "=" in piece or not words:  # a comma inside a list value ([1,2]) belongs to the word before it
            words.append(piece)
        else:
            words[-1] += "," + piece
    for word in words:
        if "=" not in word or not word.partition("=")[0].strip():
            raise UserError(f"{word!r} is not key=value", where=where, fix="write SPEC+key=value,key=value, e.g. "
                            "base-s42+train.steps=60")
    return Operand(text=text, spec=name, preset=preset or None, overrides=tuple(words))


def check_count(operands: list[str]) -> None:
    if len(operands) < 2 or len(operands) > MAX_OPERANDS:
        raise UserError(f"needs 2 to {MAX_OPERANDS} runs, got {len(operands)}", where="compare",
                        fix=f"name each run: {SYNTAX}")


def read_operands(registry: Registry, runs_root: Path, texts: list[str], *, preset: str | None = None,
                  runs_dir_flag: str = "") -> list[Compared]:
    """The run of each operand, in order; `preset` is the reading verbs' --preset (an operand's @PRESET wins).
    `runs_dir_flag` (" --runs-dir DIR" or empty) is repeated in the command an error line suggests."""
    check_count(texts)
    out = []
    for k, text in enumerate(texts):
        operand = parse_operand(text)
        if operand.path is not None:
            picked, note = _pick_path(registry, operand), None
        else:
            picked, note = _pick_spec(registry, runs_root, operand, preset, runs_dir_flag)
        if picked.run.damage:  # the word `status` and `table` say of it, and the fix naming its variant
            raise damaged_error(picked.run, where=f"operand {text}")
        identity = identity_of(picked.run)
        label = f"{identity.spec}@{identity.preset}" + (f"+{','.join(set_words(identity.overrides))}"
                                                        if identity.overrides else "")
        try:
            config, problem = read_run_spec(RunDir(picked.path)), None
        except UserError as err:
            config, problem = {}, f"{RunDir(picked.path).display(Path(err.where or ''))}: {err.problem}"
        out.append(Compared(letter=chr(ord("A") + k), label=label, picked=picked, identity=identity,
                            config=config, preset_note=note, config_problem=problem))
    hashes: dict[str, set[str]] = {}
    for c in out:
        hashes.setdefault(c.label, set()).add(c.picked.run.hash12)
    for c in out:  # two runs of one variant of other hashes (a stale one named by its path): the hash tells them apart
        if len(hashes[c.label]) > 1:
            c.label += f"#{c.picked.run.hash12}"
    return out


def _pick_spec(registry: Registry, runs_root: Path, operand: Operand, preset: str | None,
               runs_dir_flag: str) -> tuple[Picked, str | None]:
    where = f"operand {operand.text}"
    name = operand.spec or ""
    if name not in registry.specs:
        raise UserError(f"unknown spec {name!r}", where=where, fix=did_you_mean(name, registry.specs))
    asked = operand.preset or preset
    if asked is not None and asked not in registry.presets:
        raise UserError(f"unknown preset {asked!r}", where=where, fix=did_you_mean(asked, registry.presets))
    try:
        selection = read(registry, runs_root, [name], preset=asked, overrides=operand.overrides, what=where)
        picked = selection.pick(name)
        spec = selection.spec(name)
    except UserError as err:
        if not str(err.where or "").startswith(("--set", "--preset")):
            raise
        raise UserError(err.problem, where=where, fix=err.fix) from None  # this operand's word: the line names it
    if picked is not None:  # a DAMAGED one too: read_operands says so in one line
        return picked, selection.note
    sets = "".join(f" --set {word}" for word in operand.overrides)
    command = f"reproduce.py run {name} --preset {spec.preset}{sets}{runs_dir_flag}"
    started = selection.pick(name, results=False)
    state = started.run.state if started is not None else None
    variant = f" with --set {','.join(operand.overrides)}" if operand.overrides else ""
    problem = f"no finished run of {name} under preset {spec.preset}{variant} in {runs_root}"
    others = sorted({run.preset for run in find_runs(runs_root, specs={name}) if run.has_eval and run.identity}
                    - {spec.preset})
    if others:
        problem += f" (runs exist under preset {', '.join(others)}: write {name}@{others[0]})"
    if state in ACTIVE_STATES:
        raise UserError(f"{problem} (run {started.run.hash12} is {state})", where=where,
                        fix=f"wait for it: reproduce.py status {name} --preset {spec.preset}{sets}{runs_dir_flag}")
    resumes = f" (run {started.run.hash12} is {state}: this resumes it)" if state else ""
    raise UserError(problem, where=where, fix=f"{command}{resumes}")


def damaged_error(run: RunInfo, *, where: str) -> UserError:
    """The one line of an operand whose run is DAMAGED: the word and reason `status` and `table` show, and the
    fix they name (the command of exactly that variant)."""
    why, _, fix = run.damage.rpartition(" (fix: ") if " (fix: " in run.damage else (run.damage, "", "")
    why = why.removesuffix("; its numbers are not shown")
    return UserError(f"its run {run.hash12} is DAMAGED ({why})", where=where,
                     fix=fix.removesuffix(")") or "re-run it with --force")


def _pick_path(registry: Registry, operand: Operand) -> Picked:
    """The run at a run directory path, through a Selection holding only that run (pick_run then has one
    candidate: this run, with the stale note a reading verb would print for it)."""
    where = f"operand {operand.text}"
    fix = f"name a run directory <runs root>/<spec>/<hash12> that holds {SPEC_FILE_NAME}"
    if operand.path is None or not operand.path.is_dir():
        raise UserError("no such run directory", where=where, fix=fix)
    path = Path(os.path.realpath(operand.path))  # a link to a run: the run where it lives (its spec directory)
    info = entry_of(path)
    if info is None:
        raise UserError(f"not a run directory (no {SPEC_FILE_NAME})", where=where, fix=fix)
    selection = Selection(registry=registry, preset=info.preset, runs_root=info.path.parent.parent)
    selection.add_runs([info])
    name = row_spec(info, registry)
    picked = selection.pick(name, source=info.source, preset=info.preset)
    if picked is None and info.damage:
        raise damaged_error(info, where=where)
    if picked is None:
        sets = "".join(f" --set {word}" for word in set_words(info.identity.overrides))
        raise UserError(f"the run has no results yet (state {info.state or 'not started'})", where=where,
                        fix=f"finish it: reproduce.py run {info.spec} --preset {info.preset}{sets} --runs-dir "
                            f"{info.path.parent.parent}")
    return picked
