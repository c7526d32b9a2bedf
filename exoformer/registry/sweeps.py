"""Sweeps: a grid in YAML expanded into named specs by a name template.

    sweeps:
      - name: "{variant}-s{seed}"          # placeholders: grid axes, or the sweep's own variant/seed/preset
        preset: 450m                       # any spec key: shared by every point
        grid:
          variant: [base, gated]           # a list: the axis is a spec key, each value a point
          seed: [42, 1337]
          paths:                           # a mapping: label -> settings (a free axis name) ...
            qk: {model.mix_paths: [q, k], model.anchor_norm_paths: [q, k]}
          model.granularity:               # ... or label -> value of the spec key the axis names
            e: elementwise

Points are the cartesian product of the axes in the order written; the first axis varies slowest.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Any

from exoformer import limits
from exoformer.errors import UserError, did_you_mean
from exoformer.registry.spec import FIELD_TYPES, Entry, Layer, set_flat
from exoformer.limits import NAME_RE, check_name

# NAME_RE: spec names are lowercase, digits, '.', '_', '-' and at most limits.MAX_NAME_LEN characters; no glob
# characters, so a name is never mistaken for a pattern (exoformer/limits.py).

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
SWEEP_KEYS = ("name", "grid")


@dataclass(slots=True)
class Point:
    name: str
    layer: Layer
    origin: str


def expand(sweep: dict, common: Layer, *, file: str, line: int) -> list[Point]:
    """All points of one sweep; `common` is the sweep's shared layer (already parsed from its spec keys)."""
    where = f"{file}:{line}"
    template = sweep.get("name")
    if not isinstance(template, str) or not template:
        raise UserError("sweep has no name template", where=where, fix="add name: \"{variant}-s{seed}\"")
    grid = sweep.get("grid")
    if not isinstance(grid, dict) or not grid:
        raise UserError("sweep has no grid (or it is not a mapping)", where=where,
                        fix="add grid: with at least one axis, e.g. seed: [42, 1337]")
    axes: list[tuple[str, list[tuple[str, Layer]]]] = []
    for axis, values in grid.items():
        axis_where = f"{file}:{_line(grid, axis, line)}"
        axes.append((str(axis), _axis_points(axis, values, file=file, where=axis_where, line=line)))
    n_points = math.prod(len(values) for _, values in axes)
    if n_points > limits.MAX_SWEEP_POINTS:
        sizes = " x ".join(str(len(values)) for _, values in axes)
        raise UserError(f"sweep grid has {n_points} points ({sizes}), over the limit of {limits.MAX_SWEEP_POINTS}",
                        where=where, fix="split it into smaller sweeps or drop axes")
    placeholders = _PLACEHOLDER.findall(template)
    known = [a for a, _ in axes] + [k for k in ("variant", "seed", "preset") if k in common]
    for ph in placeholders:
        if ph not in known:
            raise UserError(f"name template {template!r} uses {{{ph}}}, which is neither a grid axis "
                            "nor set by the sweep",
                            where=where, fix=did_you_mean(ph, known) if known else "add that axis to grid:")
    points = []
    for combo in itertools.product(*(values for _, values in axes)):
        layer: Layer = dict(common)
        labels: dict[str, str] = {k: _label(common[k].value) for k in ("variant", "seed", "preset") if k in common}
        for (axis, _), (label, settings) in zip(axes, combo):
            layer.update(settings)
            labels[axis] = label
            for key in ("variant", "seed", "preset"):
                if key in settings:
                    labels[key] = _label(settings[key].value)
        name = _PLACEHOLDER.sub(lambda m: labels[m.group(1)], template)
        check_name(name, where=where, what="name made by the template")
        _fill_parent(layer, labels)
        points.append(Point(name=name, layer=layer, origin=where))
    return points


def _fill_parent(layer: Layer, labels: dict[str, str]) -> None:
    """A decay branch names its parent by the same placeholders as the name template (`train.branch_from:
    "ladder-{variant}-b4"`), so one budget axis serves every variant of a ladder."""
    entry = layer.get("train.branch_from")
    if entry is None or not isinstance(entry.value, str) or "{" not in entry.value:
        return
    unknown = [ph for ph in _PLACEHOLDER.findall(entry.value) if ph not in labels]
    if unknown:
        raise UserError(f"train.branch_from {entry.value!r} uses {{{unknown[0]}}}, which is not a grid axis",
                        where=entry.origin, fix=did_you_mean(unknown[0], labels))
    parent = _PLACEHOLDER.sub(lambda m: labels[m.group(1)], entry.value)
    check_name(parent, where=entry.origin, what="parent name made by the template")
    layer["train.branch_from"] = Entry(parent, entry.origin)


def _axis_points(axis: Any, values: Any, *, file: str, where: str, line: int) -> list[tuple[str, Layer]]:
    if isinstance(values, list):
        if not values:
            raise UserError(f"grid axis {axis!r} is empty", where=where, fix="list at least one value")
        if axis not in FIELD_TYPES:
            raise UserError(f"grid axis {axis!r} is a list but not a spec key", where=where,
                            fix=f"{did_you_mean(str(axis), FIELD_TYPES)} (or map labels to settings)")
        out = []
        for i, value in enumerate(values):
            layer: Layer = {}
            set_flat(layer, axis, value, f"{file}:{_item_line(values, i, line)}")
            out.append((_label(value), layer))
        return out
    if isinstance(values, dict):
        if not values:
            raise UserError(f"grid axis {axis!r} is empty", where=where, fix="map at least one label")
        out = []
        for label, settings in values.items():
            origin = f"{file}:{_line(values, label, line)}"
            check_name(str(label), where=origin, what="grid label")
            layer = {}
            if isinstance(settings, dict):
                for key, value in settings.items():
                    set_flat(layer, str(key), value, f"{file}:{_line(settings, key, line)}")
            elif axis in FIELD_TYPES:
                set_flat(layer, axis, settings, origin)
            else:
                raise UserError(f"grid axis {axis!r} maps {label!r} to a value but is not a spec key", where=origin,
                                fix="map the label to settings, e.g. {model.mix_paths: [v]}")
            out.append((str(label), layer))
        return out
    raise UserError(f"grid axis {axis!r} must be a list or a mapping, got {type(values).__name__}", where=where,
                    fix="write a list of values or a mapping label -> settings")


def _label(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "".join(str(v) for v in value) or "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _line(container: Any, key: Any, default: int) -> int:
    lines = getattr(container, "key_lines", None)
    return lines.get(key, default) if lines else default


def _item_line(container: Any, index: int, default: int) -> int:
    lines = getattr(container, "item_lines", None)
    return lines[index] if lines and index < len(lines) else default


__all__ = ["Entry", "NAME_RE", "Point", "check_name", "expand"]
