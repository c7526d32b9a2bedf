"""Is a run the table's reference recipe? Read from the run's identity (exoformer/run_identity.py).

A table's reference recipe is each row's specs resolved under their own preset (450m for the paper's
tables) with no `--set`: what the paper ran. A run made under another preset, with `--set` overrides, a
limited evaluation or fewer validation tokens measures something else, so every reading verb marks its
cells "not comparable: <what differs>" instead of judging its absolute values against the paper's.

What differs is computed once per run, when it is launched, and recorded in its identity file (read through the
run index: exoformer/runs/run_index.py `identity_of`). Torch-free.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from exoformer.registry.registry import Registry
from exoformer.registry.spec import Spec
from exoformer.run_identity import REFERENCE_WORD
from exoformer.run_identity import differences as _differences
from exoformer.rundir import RunDir
from exoformer.runs.run_index import RunInfo, identity_of

__all__ = ["REFERENCE_WORD", "differences", "identity_of", "is_deliberate_variant", "run_differences", "shorten"]

MAX_ITEMS = 4
"""A `why` names at most this many fields, then "+N more"."""

RunLike = RunInfo | RunDir | str | os.PathLike
"""A run as the reading layer hands it around: its index entry, its RunDir, or its path."""


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


@lru_cache(maxsize=4096)
def _reference_hash(registry: Registry, name: str) -> str | None:
    return registry.resolve(name).hash12 if name in registry.specs else None


def run_differences(registry: Registry, spec_name: str, run: RunLike, *,
                    reference_hash12: str | None = None) -> list[str]:
    """What in this run differs from its spec's reference recipe (own preset, no --set), as its identity records
    it (which also names the spec, so `spec_name` is not read); a run whose recorded reference is no longer the
    registry's says so too."""
    del spec_name
    identity = identity_of(run)
    items = list(identity.differs)
    now = reference_hash12 or _reference_hash(registry, identity.spec)
    if identity.reference_hash12 and now and identity.reference_hash12 != now:
        items.append(f"the paper's recipe of {identity.spec} changed since the run (reference "
                     f"{identity.reference_hash12}, now {now})")
    return items


def is_deliberate_variant(registry: Registry, spec_name: str, run: RunLike, hash12: str, *,
                          preset_hash12: str | None = None) -> bool:
    """True when the run is its spec under its preset as the registry defines it today, with the `--set`
    overrides it was made with: a variant someone asked for. A run whose recorded definition is no longer the
    registry's was made before the spec's definition changed (stale)."""
    identity = identity_of(run)
    if identity.preset_hash12 is None or identity.preset not in registry.presets or spec_name not in registry.specs:
        return False
    now = preset_hash12 or _preset_hash(registry, spec_name, identity.preset)
    return now == identity.preset_hash12 and identity.hash12 == hash12


@lru_cache(maxsize=4096)
def _preset_hash(registry: Registry, name: str, preset: str) -> str:
    return registry.resolve(name, preset=preset).hash12
