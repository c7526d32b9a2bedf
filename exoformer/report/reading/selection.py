"""Which run every reader reads: each spec resolved once, each run picked once per (spec, preset, source).

A reading verb builds one Selection and hands it to everything it shows (tables, derived cells, verdicts,
claims, figures), so they all read the same runs and none resolves a spec or picks a run itself. Per spec
and preset the picked run is run_index.pick_run's among the runs that have results: the spec's current hash,
else (without --set) the newest, noted "stale" unless its recorded --set explains its hash; per checkpoint row
the newest checkpoint run. A picked run that is DAMAGED shows no number and is noted. Which preset is read
follows README "Which runs the reading verbs read" (`choose_preset`).

The runs come from a runs root, read through the run index one spec directory when a reader first asks for it;
each candidate is the index's RunInfo. Torch-free.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from exoformer.errors import UserError, did_you_mean
from exoformer.eval.suites import SMOKE_PREFIX
from exoformer.registry.registry import Registry
from exoformer.registry.spec import Spec, parse_override
from exoformer.report.reading.recipe import identity_of, is_deliberate_variant, run_differences
from exoformer.rerun import rerun_command
from exoformer.rundir import SUCCEEDED, RunDir
from exoformer.runs.run_index import CHECKPOINT, OURS, RunInfo, find_runs, pick_run, variant_command

COLUMNS = ("spec", "seed", "preset", "task", "metric", "value", "stderr", "n")
EXTRA_COLUMNS = ("suite", "hash12", "run_dir", "source")


def check_outputs(run: RunInfo) -> None:
    """A finished evaluation whose output is missing is an error (of the run a reader picked: the others are still
    read); an unfinished one is "not run". The fix is the command of exactly that run's variant."""
    rd = run.run

    def again() -> str:  # read only for a run in error
        if run.source == CHECKPOINT:
            return f"re-run its evaluation: reproduce.py evaluate CKPT --as {run.as_row} --force"
        if run.identity is not None:
            return f"re-run it: {variant_command(run.identity, rd, '--force')}"
        return f"re-run it: {rerun_command(rd.read_provenance(), run.spec, rd.path)}"

    for stage, output, name in (("evaluate", rd.eval_rows, "eval_rows"), ("validate", rd.validation, "validation")):
        if run.has(f"stage:{stage}") and not run.has(name):
            raise UserError(f"the {stage} stage finished but {rd.display(output)} is missing", where=str(run.path),
                            fix=again())
    if run.state == SUCCEEDED and not run.has_eval:
        raise UserError(f"the run SUCCEEDED but has no eval results ({rd.display(rd.eval_rows)}, "
                        f"{rd.display(rd.validation)})", where=str(run.path), fix=again())


def row_spec(run: RunInfo, registry: Registry | None) -> str:
    """The spec name a run's rows are filed under: its own, or for a checkpoint run its row's first spec."""
    if run.source != CHECKPOINT or registry is None or run.as_row is None:
        return run.spec
    where = str(run.run.spec_file)
    table = registry.tables.get(run.table or "")
    if table is None:
        raise UserError(f"the checkpoint run names table {run.table!r}, which does not exist", where=where,
                        fix=did_you_mean(str(run.table), registry.tables))
    rows = {row.id: row for row in table.rows}
    if run.as_row not in rows:
        raise UserError(f"the checkpoint run names row {run.as_row!r}, not a row of table {table.id}", where=where,
                        fix=did_you_mean(run.as_row, rows))
    return rows[run.as_row].specs[0]


def run_rows(run: RunInfo, spec: str | None = None) -> list[dict[str, Any]]:
    """All result rows of one run, in the long layout plus suite / hash12 / run_dir / source."""
    out = []
    name = spec or run.spec
    for row in run.run.result_rows(run.spec):
        out.append({"spec": name, "seed": run.seed, "preset": run.preset,
                    "task": str(row["task"]).removeprefix(SMOKE_PREFIX), "metric": str(row["metric"]),
                    "value": _float(row.get("value")), "stderr": _float(row.get("stderr")), "n": row.get("n"),
                    "suite": run.suite, "hash12": run.hash12, "run_dir": str(run.path), "source": run.source})
    return out


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def frame_of(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows in the long layout, as one table with every column (COLUMNS + EXTRA_COLUMNS)."""
    return pd.DataFrame(rows, columns=[*COLUMNS, *EXTRA_COLUMNS])


DERIVED_TASK = "derived"
"""The task of rows computed across runs (exoformer/report/tables/derived.py)."""


def spec_overrides(overrides: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The `--set` words that change a spec (`profile.*` ones feed only the cost model)."""
    return tuple(text for text in overrides if not parse_override(text)[0].startswith("profile."))


@dataclass(kw_only=True, slots=True, eq=False)
class Picked:
    """The run a spec is read from, with what every reader must say about it."""

    run: RunInfo
    name: str
    """The spec its rows are filed under (a checkpoint run: its row's first spec)."""
    selection: Selection
    note: str = ""
    """"stale" or DAMAGED, for the notes under whatever shows it; empty otherwise."""

    @property
    def path(self) -> Path:
        return self.run.path

    @property
    def rows(self) -> pd.DataFrame:
        """Its rows of the long table (empty when DAMAGED)."""
        return self.selection.rows(self.run, self.name)

    @property
    def differs(self) -> list[str]:
        """What differs from the spec's reference recipe (report/reading/recipe.py)."""
        return [] if self.run.damage else self.selection.differs(self.run)


@dataclass(kw_only=True, slots=True)
class Selection:
    """Resolutions and picks of one reading (one preset, one --set), each made once."""

    registry: Registry
    preset: str | None = None
    """The preset read; None: each spec's own."""
    overrides: tuple[str, ...] = ()
    runs_root: Path | None = None
    note: str | None = None
    """choose_preset's line when the preset read is not the one asked for."""
    _sets: tuple[str, ...] = ()
    _specs: dict[tuple[str, str | None], Spec | None] = field(default_factory=dict)
    _pool: dict[tuple[str, str], list[RunInfo]] = field(default_factory=dict)
    """(the spec its rows are filed under, source) -> the runs a pick chooses among."""
    _loaded: set[str] | None = None
    """Spec directories of `runs_root` read so far (None: only the runs given to add_runs)."""
    check: bool = True
    """A finished run whose results are lost is an error (figures read runs still without results)."""
    _picks: dict[tuple[str, str, str, bool], Picked | None] = field(default_factory=dict)
    memo: dict[Any, Any] = field(default_factory=dict)
    """Values computed from the picked runs (derived cells), once per reading."""

    def __post_init__(self) -> None:
        self.overrides = tuple(self.overrides)
        self._sets = spec_overrides(self.overrides)

    # ---------------------------------------------------------------------------------------- resolving
    def reference(self, name: str) -> Spec | None:
        """The spec under its own preset without --set (the paper's recipe); None for a spec the registry lacks."""
        key = (name, None)
        if key not in self._specs:
            self._specs[key] = self.registry.resolve(name) if name in self.registry.specs else None
        return self._specs[key]

    def spec(self, name: str, preset: str | None = None) -> Spec:
        """The spec as this reading reads it: under `preset` (default: the reading's, else its own) with --set."""
        preset = preset or self.preset
        if not self._sets:
            own = self.reference(name)
            if own is not None and preset in (None, own.preset):
                return own
        key = (name, f"{preset or ''} {' '.join(self._sets)}")  # never a reference's key (name, None)
        if key not in self._specs:
            self._specs[key] = self.registry.resolve(name, preset=preset, overrides=self._sets)
        return self._specs[key]  # type: ignore[return-value]

    def current_hash(self, name: str, preset: str) -> str | None:
        """The hash `name` resolves to under `preset` today; None for a spec or preset the registry no longer has
        (its runs are then read as non-current ones)."""
        if name not in self.registry.specs or preset not in self.registry.presets:
            return None
        try:
            return self.spec(name, preset).hash12
        except UserError:
            return None

    # ---------------------------------------------------------------------------------------- candidates
    def add_runs(self, runs: list[RunInfo]) -> None:
        """These runs (of the runs root) become candidates (a damaged one among them never stops the others)."""
        for run in runs:
            self._pool.setdefault((row_spec(run, self.registry), run.source), []).append(run)

    def _candidates(self, name: str, source: str) -> list[RunInfo]:
        if self._loaded is not None and name not in self._loaded and self.runs_root is not None:
            self._loaded.add(name)
            self.add_runs(find_runs(self.runs_root, preset=self.preset, specs={name}))
        return self._pool.get((name, source), [])

    @classmethod
    def of_root(cls, registry: Registry, runs_root: str | os.PathLike, *, preset: str | None = None,
                overrides: list[str] | tuple[str, ...] = (), check: bool = True) -> Selection:
        """A selection among the runs of `runs_root`, each spec directory read when a reader first asks for it."""
        return cls(registry=registry, preset=preset, overrides=tuple(overrides), runs_root=Path(runs_root),
                   check=check, _loaded=set())

    def rows(self, run: RunInfo, name: str) -> pd.DataFrame:
        """The run's rows of the long table filed under spec `name` (COLUMNS + EXTRA_COLUMNS), read once; empty
        for a DAMAGED run."""
        key = ("rows", str(run.path))
        if key not in self.memo:
            self.memo[key] = frame_of([] if run.damage or not run.has_eval else run_rows(run, name))
        return self.memo[key]

    # ---------------------------------------------------------------------------------------- picking
    def pick(self, name: str, *, source: str = OURS, preset: str | None = None, results: bool = True
             ) -> Picked | None:
        """The run `name`'s rows are read from (ours: under `preset`, default the reading's; checkpoint: the newest
        evaluated as its row), or None when no run has results (`results` False: among every run, for figures
        of runs still training)."""
        if source == CHECKPOINT:
            key = (name, "", CHECKPOINT, results)
        else:
            if preset is None:
                preset = self.spec(name).preset if name in self.registry.specs else self.preset or ""
            key = (name, preset, OURS, results)
        if key not in self._picks:
            self._picks[key] = self._pick(name, key[1], source, results)
        return self._picks[key]

    def _pick(self, name: str, preset: str, source: str, results: bool) -> Picked | None:
        # a DAMAGED run is a candidate with or without results: its cells say DAMAGED, as `status` says of it
        pool = [c for c in self._candidates(name, source)
                if c.has_eval or c.damage or not results or (self.check and c.state == SUCCEEDED)]
        if source == CHECKPOINT:
            chosen = pick_run(pool, current_hash12=None)
            current = None
        else:
            pool = [c for c in pool if c.of_preset(preset)]
            current = self.current_hash(name, preset)
            chosen = pick_run(pool, current_hash12=current, exact=bool(self._sets))
        if chosen is None:
            return None
        if self.check and not chosen.damage:
            check_outputs(chosen)
        if chosen.damage:
            return Picked(run=chosen, name=name, selection=self,
                          note=f"DAMAGED {name} ({chosen.hash12}): {chosen.damage}")
        note = ""
        if current is not None and chosen.hash12 != current and not self._variant(name, chosen):
            note = (f"{name}: results from run {chosen.hash12}, not the current spec hash {current} "
                    "(stale run: the spec's definition changed since)")
        return Picked(run=chosen, name=name, selection=self, note=note)

    def _variant(self, name: str, chosen: RunInfo) -> bool:
        """A run of another hash that its recorded --set explains (a deliberate variant, not a stale run)."""
        identity = identity_of(chosen)
        now = self.current_hash(name, identity.preset) if identity.preset_hash12 is not None else None
        return is_deliberate_variant(self.registry, name, chosen, chosen.hash12, preset_hash12=now)

    def differs(self, run: RunInfo) -> list[str]:
        """What in the run differs from its spec's reference recipe (report/reading/recipe.py), read once."""
        key = ("differs", str(run.path))
        if key not in self.memo:
            reference = self.reference(identity_of(run).spec)
            self.memo[key] = run_differences(self.registry, run.spec, run,
                                             reference_hash12=None if reference is None else reference.hash12)
        return self.memo[key]

    def row_runs(self, specs: tuple[str, ...] | list[str]) -> list[Picked | None]:
        """The picked run (ours) of each seed position of a table row; None where it has no results."""
        return [p if p is not None and not p.rows.empty else None for p in map(self.pick, specs)]

    def picked(self) -> list[Picked]:
        """Every pick made so far that has a run."""
        return list(dict.fromkeys(p for p in self._picks.values() if p is not None))

    def notes(self) -> list[str]:
        """The stale and DAMAGED notes of every pick made so far (stale first)."""
        notes = [p.note for p in self.picked() if p.note]
        return list(dict.fromkeys([*(n for n in notes if not n.startswith("DAMAGED")),
                                   *(n for n in notes if n.startswith("DAMAGED"))]))

    def curve(self, picked: Picked) -> tuple[list[float], list[float]]:
        """The picked run's validation curve (tokens, val_loss), read once."""
        key = ("curve", str(picked.path))
        if key not in self.memo:
            self.memo[key] = RunDir(picked.path).val_curve()
        return self.memo[key]


def choose_preset(selection: Selection, runs_root: str | os.PathLike, specs: list[str], preset: str | None, *,
                  what: str) -> tuple[str | None, str | None]:
    """(the preset a reading verb reads for `specs`, one line to print or None): README "Which runs the
    reading verbs read".

    No --preset: each spec's own preset, unless none of `specs` has results under its own preset while some
    have results under other presets; then the preset most of them ran under (ties: by name) is read, its
    cells marked not comparable, and the line says so. `--preset P` with no results under P while other
    presets have some: P is read (cells "not run") and the line names the flag to add.
    """
    found = [run for run in find_runs(runs_root, specs=set(specs)) if run.has_eval and run.identity is not None]
    if preset is not None:
        others = sorted({run.preset for run in found} - {preset})
        if others and not any(run.preset == preset for run in found):
            return preset, (f"note: {what} has no runs of preset {preset}; runs exist under preset "
                            f"{', '.join(others)}: add --preset {others[0]}")
        return preset, None

    def own(name: str) -> str | None:
        spec = selection.reference(name)
        return None if spec is None else spec.preset

    if not found or any(run.preset == own(row_spec(run, selection.registry)) for run in found):
        return None, None
    counts = Counter(run.preset for run in found)
    chosen = min(counts, key=lambda p: (-counts[p], p))
    return chosen, (f"note: {what} has no runs under its specs' own preset; reading preset {chosen} (not "
                    f"comparable with the paper; add --preset {chosen} to ask for it)")


def read(registry: Registry, runs_root: str | os.PathLike, specs: list[str], *, preset: str | None = None,
         overrides: list[str] | tuple[str, ...] = (), what: str, check: bool = True,
         resolved: dict[tuple[str, str | None], Spec | None] | None = None) -> Selection:
    """The selection a reading verb reads for `specs`: the preset choose_preset chooses (its line in `.note`),
    the runs of `runs_root` (other spec directories read when a reader asks for them). `resolved`: resolutions
    shared with other selections of the same verb (one per spec and preset). `check` False: a finished run whose
    results are lost is no error (figures draw runs without results)."""
    out = Selection(registry=registry, overrides=tuple(overrides), runs_root=Path(runs_root), check=check,
                    _specs={} if resolved is None else resolved, _loaded=set(specs))
    out.preset, out.note = choose_preset(out, runs_root, specs, preset, what=what)
    out.add_runs(find_runs(runs_root, preset=out.preset, specs=set(specs)))
    return out
