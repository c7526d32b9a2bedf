"""One label and one colour per model, shared by every figure (and the HTML report), as the registry declares them.

A model is named by its table row id or by a spec name without its seed suffix (`e-exoformer-s1337` ->
`e-exoformer`): Table 1's row ids are the spec stems, so the same model gets the same label and colour in
the loss curves, the accuracy bars, the per-layer probes, the similarity matrices and the heatmaps. A row
declares its model's look with `figure: {label, colour}` (experiments/tables.yaml). Models without one get a
stable colour from their name (never one that depends on which other models are drawn).
"""

from __future__ import annotations

import functools
import re
import zlib
from dataclasses import dataclass
from typing import Any

NEUTRAL_RATIO = 1.0
"""The λ ratio (anchor / self) drawn in the neutral colour of a diverging map: both terms weigh the same."""
DIVERGING_MAP = "RdBu_r"
"""Diverging colour map for ratios around NEUTRAL_RATIO (white at the centre)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class ModelStyle:
    label: str
    colour: str


_FALLBACK = ("#7F7F7F", "#BCBD22", "#17BECF", "#8C564B", "#9467BD", "#2CA02C", "#D62728", "#AEC7E8")
_SEED = re.compile(r"-s\d+$")


def model_id(name: str) -> str:
    """The model of a spec name or row id: the name without a trailing seed (`-s42`)."""
    return _SEED.sub("", name)


@functools.lru_cache(maxsize=8)
def models(registry: Any) -> dict[str, ModelStyle]:
    """Model id -> its label and colour, from the rows that declare `figure:` (the first declaration wins)."""
    out: dict[str, ModelStyle] = {}
    for table in registry.tables.values():
        for row in table.rows:
            if row.colour and row.id not in out:
                out[row.id] = ModelStyle(label=row.figure_label or row.label, colour=row.colour)
    return out


def style_of(registry: Any, name: str, default_label: str | None = None) -> ModelStyle:
    """Label and colour of the model of `name` (a spec name or row id).

    Undeclared models keep `default_label` (e.g. their table row label) or their id, and a colour chosen by a
    hash of the id, so it does not change with the set of models in a figure.
    """
    key = model_id(name)
    declared = models(registry).get(key)
    if declared is not None:
        return declared
    return ModelStyle(label=default_label or key, colour=fallback_colour(key))


def fallback_colour(name: str) -> str:
    """The colour of an undeclared model: chosen by a hash of its id."""
    key = model_id(name)
    return _FALLBACK[zlib.crc32(key.encode()) % len(_FALLBACK)]


def label_of(registry: Any, name: str, default_label: str | None = None) -> str:
    return style_of(registry, name, default_label).label


def colour_of(registry: Any, name: str) -> str:
    return style_of(registry, name).colour
