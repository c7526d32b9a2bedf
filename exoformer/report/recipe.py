"""Is a run the table's reference recipe? Read from the run's identity (exoformer/run_identity.py).

A table's reference recipe is each row's specs resolved under their own preset (450m for the paper's
tables) with no `--set`: what the paper ran. A run made under another preset, with `--set` overrides, a
limited evaluation or fewer validation tokens measures something else, so every reading verb marks its
cells "not comparable: <what differs>" instead of judging its absolute values against the paper's.

What differs is computed once per run, when it is launched, and recorded in its identity file. A run
launched before identity files existed has none: `derive_identity` derives it once per process from its
spec file and the `--set` words of the command its provenance records (the registry's definitions of
today), marked `recorded=False`. Torch-free.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from exoformer.errors import UserError
from exoformer.registry.registry import Registry
from exoformer.runs.run_index import RunInfo, read_run_spec
from exoformer.registry.spec import Spec, parse_override
from exoformer.run_identity import (
    CHECKPOINT,
    OURS,
    REFERENCE_WORD,
    RunIdentity,
    flat_fields,
    recipe_differences,
    scoring_of,
)
from exoformer.run_identity import differences as _differences
from exoformer.rundir import RunDir

__all__ = ["REFERENCE_WORD", "differences", "flat_fields", "identity_of", "is_deliberate_variant",
           "run_differences", "shorten"]

MAX_ITEMS = 4
"""A `why` names at most this many fields, then "+N more"."""

RunLike = RunInfo | RunDir | str | os.PathLike
"""A run as the reading layer hands it around: its index entry, its RunDir, or (from a long table) its path."""


def differences(run_spec: dict[str, Any], reference: Spec | dict[str, Any], *, checkpoint: bool = False,
                word: str = REFERENCE_WORD) -> list[str]:
    """run_identity.differences against a Spec or a spec mapping."""
    ref = reference.to_dict() if isinstance(reference, Spec) else reference
    return _differences(run_spec, ref, checkpoint=checkpoint, word=word)


def shorten(items: list[str]) -> str:
    """The first MAX_ITEMS items, then how many more."""
    if len(items) <= MAX_ITEMS:
        return ", ".join(items)
    return ", ".join(items[:MAX_ITEMS]) + f", +{len(items) - MAX_ITEMS} more"


def _command_overrides(run: RunDir) -> list[str]:
    """The `--set KEY=VALUE` words of the command its provenance records (runs without an identity only)."""
    command = run.read_provenance().get("command")
    words = [str(w) for w in command] if isinstance(command, list) else []
    out = []
    for i, word in enumerate(words):
        if word == "--set" and i + 1 < len(words):
            out.append(words[i + 1])
        elif word.startswith("--set="):
            out.append(word[len("--set="):])
    return [text for text in out if "=" in text and not text.startswith("profile.")]


def derive_identity(registry: Registry, run: RunDir) -> RunIdentity:
    """The identity of a run launched before identity files existed, from its spec file and provenance."""
    data = read_run_spec(run)
    name, preset = str(data["name"]), str(data.get("preset") or "")
    checkpoint = data.get("source") == CHECKPOINT
    texts = _command_overrides(run)
    reference = registry.resolve(name) if name in registry.specs else None
    under, preset_hash = None, None
    if reference is not None and preset in registry.presets:
        under = reference if preset == reference.preset else registry.resolve(name, preset=preset)
        try:  # the hash its recorded --set explains: a deliberate variant, else a stale run
            explained = registry.resolve(name, preset=preset, overrides=texts).hash12 == run.path.name
        except UserError:
            explained = False
        preset_hash = under.hash12 if explained else None
    differs = [] if reference is None else recipe_differences(
        data, reference.to_dict(), None if under is None else under.to_dict(), checkpoint=checkpoint)
    sets: dict[str, Any] = {}
    for text in texts:
        try:
            key, value = parse_override(text)
        except UserError:
            continue
        sets[key] = value
    seed = data.get("seed", 0)
    return RunIdentity(spec=name, seed=seed if isinstance(seed, int) else 0, preset=preset, hash12=run.path.name,
                       overrides=sets, reference_hash12=None if reference is None else reference.hash12,
                       preset_hash12=preset_hash, source=CHECKPOINT if checkpoint else OURS,
                       as_row=data.get("as_row"), table=data.get("table"), scoring=scoring_of(data),
                       differs=tuple(differs), recorded=False)


@lru_cache(maxsize=8192)
def _derived(registry: Registry, run_dir: str, mtime_ns: int) -> RunIdentity:
    return derive_identity(registry, RunDir(run_dir))


def identity_of(registry: Registry, run: RunLike) -> RunIdentity:
    """The run's identity: recorded at launch, else derived (once per run and process)."""
    rd = run.run if isinstance(run, RunInfo) else run if isinstance(run, RunDir) else RunDir(run)
    recorded = rd.identity()
    if recorded is not None:
        return recorded
    return _derived(registry, str(rd.path), rd.spec_file.stat().st_mtime_ns)


@lru_cache(maxsize=4096)
def _reference_hash(registry: Registry, name: str) -> str | None:
    return registry.resolve(name).hash12 if name in registry.specs else None


def run_differences(registry: Registry, spec_name: str, run: RunLike, *, checkpoint: bool = False,
                    reference_hash12: str | None = None) -> list[str]:
    """What in this run (filed under `spec_name`) differs from its spec's reference recipe (own preset, no
    --set), as its identity records it; a run whose recorded reference is no longer the registry's says so
    too. The identity knows whose weights the run evaluated, so `checkpoint` is implied."""
    del spec_name, checkpoint
    identity = identity_of(registry, run)
    items = list(identity.differs)
    now = reference_hash12 or _reference_hash(registry, identity.spec)
    if identity.recorded and identity.reference_hash12 and now and identity.reference_hash12 != now:
        items.append(f"the paper's recipe of {identity.spec} changed since the run (reference "
                     f"{identity.reference_hash12}, now {now})")
    return items


def is_deliberate_variant(registry: Registry, spec_name: str, run: RunLike, hash12: str, *,
                          preset_hash12: str | None = None) -> bool:
    """True when the run is its spec under its preset as the registry defines it today, with the `--set`
    overrides it was made with: a variant someone asked for. A run whose recorded definition is no longer the
    registry's was made before the spec's definition changed (stale)."""
    identity = identity_of(registry, run)
    if identity.preset_hash12 is None or identity.preset not in registry.presets or spec_name not in registry.specs:
        return False
    now = preset_hash12 or _preset_hash(registry, spec_name, identity.preset)
    return now == identity.preset_hash12 and identity.hash12 == hash12


@lru_cache(maxsize=4096)
def _preset_hash(registry: Registry, name: str, preset: str) -> str:
    return registry.resolve(name, preset=preset).hash12
