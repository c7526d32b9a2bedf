"""Is a run the table's reference recipe? The fields of its spec file that differ from the reference spec.

A table's reference recipe is each row's specs resolved under their own preset (450m for the paper's
tables) with no `--set`: what the paper ran. A run made under another preset, with `--set` overrides, a
limited evaluation or fewer validation tokens measures something else, so every reading verb marks its
cells "not comparable: <what differs>" instead of judging its absolute values against the paper's.
Torch-free; spec files are read through run_index.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from exoformer.errors import UserError
from exoformer.harness.registry import Registry
from exoformer.harness.run_index import read_run_spec, recorded_overrides
from exoformer.harness.spec import Spec
from exoformer.rundir import RunDir

SECTIONS = ("model", "train", "eval", "analysis")
"""The spec file's sections that decide a result (what the spec hash covers)."""
FIRST = ("preset", "eval.limit", "eval.suite", "eval.num_fewshot", "train.final_val_tokens", "train.steps",
         "train.data", "model.n_layer", "model.d_model")
"""Fields named first in a `why`: the ones that most change what a number means."""
CHECKPOINT_FIELDS = ("preset", "eval.", "train.final_val_tokens")
"""For a checkpoint run only the evaluation recipe is ours to differ in (its weights are the paper's)."""
MAX_ITEMS = 4
"""A `why` names at most this many fields, then "+N more"."""
REFERENCE_WORD = "paper"


def flat_fields(data: dict[str, Any]) -> dict[str, Any]:
    """`preset` and every `section.field` of a spec mapping (a spec file or Spec.to_dict())."""
    out: dict[str, Any] = {"preset": data.get("preset")}
    for section in SECTIONS:
        body = data.get(section)
        if isinstance(body, dict):
            out.update({f"{section}.{key}": value for key, value in body.items()})
    return out


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


def differences(run_spec: dict[str, Any], reference: Spec, *, checkpoint: bool = False,
                word: str = REFERENCE_WORD) -> list[str]:
    """Human items for each field where the run's spec differs from `reference`, most telling first.

    Fields absent from either side are not compared (a spec file of an older layout, a checkpoint's
    partial spec). Items read "eval.limit=20" (reference null) or "train.steps=30 (paper 38147)", `word`
    naming the reference.
    """
    ours, ref = flat_fields(run_spec), flat_fields(reference.to_dict())
    keys = [k for k in ours if k in ref and _norm(ours[k]) != _norm(ref[k])]
    if checkpoint:
        keys = [k for k in keys if k == "preset" or k.startswith(CHECKPOINT_FIELDS[1:])]
    keys.sort(key=lambda k: (FIRST.index(k) if k in FIRST else len(FIRST), k))
    items = []
    for key in keys:
        label = "preset " if key == "preset" else f"{key}="
        text = f"{label}{_show(ours[key])}"
        if ref[key] is not None:
            text += f" ({word} {_show(ref[key])})"
        items.append(text)
    return items


def _norm(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def shorten(items: list[str]) -> str:
    """The first MAX_ITEMS items, then how many more."""
    if len(items) <= MAX_ITEMS:
        return ", ".join(items)
    return ", ".join(items[:MAX_ITEMS]) + f", +{len(items) - MAX_ITEMS} more"


@lru_cache(maxsize=4096)
def _run_spec(run_dir: str, mtime_ns: int) -> dict[str, Any]:
    return read_run_spec(RunDir(run_dir))


def run_spec(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The run's spec file (cached by path and modification time: tables read each run once per column)."""
    rd = RunDir(run_dir)
    return _run_spec(str(rd.path), rd.spec_file.stat().st_mtime_ns)


def run_differences(registry: Registry, spec_name: str, run_dir: str | os.PathLike, *,
                    checkpoint: bool = False) -> list[str]:
    """What in this run of `spec_name` differs from the spec's reference recipe (own preset, no --set).

    A run of another preset says so first, then only what differs from the spec under that preset (the
    `--set` on top of it): the preset's own changes are implied by its name.
    """
    data = run_spec(run_dir)
    reference = registry.resolve(spec_name)
    preset = data.get("preset")
    if not preset or preset == reference.preset or str(preset) not in registry.presets:
        return differences(data, reference, checkpoint=checkpoint)
    under = registry.resolve(spec_name, preset=str(preset))
    return [f"preset {preset} ({REFERENCE_WORD} {reference.preset})",
            *differences(data, under, checkpoint=checkpoint, word=str(preset))]


def is_deliberate_variant(registry: Registry, spec_name: str, run_dir: str | os.PathLike, hash12: str) -> bool:
    """True when the run's hash is its spec under the preset and `--set` overrides its command recorded.

    Such a run is a variant someone asked for; a run whose hash no recorded command explains was made
    before the spec's definition changed (stale).
    """
    data = run_spec(run_dir)
    overrides = recorded_overrides(RunDir(run_dir))
    try:
        spec = registry.resolve(spec_name, preset=str(data.get("preset") or "") or None, overrides=overrides)
    except UserError:  # a recorded override the registry no longer accepts: not explained
        return False
    return spec.hash12 == hash12
