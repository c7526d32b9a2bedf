"""One label and one colour per model, shared by every figure (and the HTML report), defined once here.

A model is named by its table row id or by a spec name without its seed suffix (`e-exoformer-s1337` ->
`e-exoformer`): Table 1's row ids are the spec stems, so the same model gets the same label and colour in
the loss curves, the accuracy bars, the per-layer probes, the similarity matrices and the heatmaps. Models
not listed get a stable colour from their name (never one that depends on which other models are drawn).
Colours are from the colour-blind-safe Okabe-Ito set plus a grey and lighter blues and pinks.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

NEUTRAL_RATIO = 1.0
"""The λ ratio (anchor / self) drawn in the neutral colour of a diverging map: both terms weigh the same."""
DIVERGING_MAP = "RdBu_r"
"""Diverging colour map for ratios around NEUTRAL_RATIO (white at the centre)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class ModelStyle:
    label: str
    colour: str


MODELS: dict[str, ModelStyle] = {
    "base": ModelStyle(label="Base Transformer", colour="#666666"),  # not black: error bars and paper dashes are
    "gated": ModelStyle(label="Gated Attention", colour="#E69F00"),
    "resformer": ModelStyle(label="ResFormer", colour="#56B4E9"),
    "gated-resformer": ModelStyle(label="Gating + ResFormer", colour="#009E73"),
    "e-nuresformer": ModelStyle(label="E-NuResFormer", colour="#CC79A7"),
    "e-exoformer": ModelStyle(label="E-ExoFormer", colour="#0072B2"),
    "dynamic-e-exoformer": ModelStyle(label="Dynamic E-ExoFormer", colour="#D55E00"),
    "h-exoformer": ModelStyle(label="H-ExoFormer", colour="#4B8BBE"),
    "s-exoformer": ModelStyle(label="S-ExoFormer", colour="#8DB6D9"),
    "h-nuresformer": ModelStyle(label="H-NuResFormer", colour="#B05A92"),
    "s-nuresformer": ModelStyle(label="S-NuResFormer", colour="#E3A9CB"),
}
"""Model id -> its label and colour in every figure."""

_FALLBACK = ("#7F7F7F", "#BCBD22", "#17BECF", "#8C564B", "#9467BD", "#2CA02C", "#D62728", "#AEC7E8")
_SEED = re.compile(r"-s\d+$")


def model_id(name: str) -> str:
    """The model of a spec name or row id: the name without a trailing seed (`-s42`)."""
    return _SEED.sub("", name)


def style_of(name: str, default_label: str | None = None) -> ModelStyle:
    """Label and colour of the model of `name` (a spec name or row id).

    Unlisted models keep `default_label` (e.g. their table row label) or their id, and a colour chosen by a
    hash of the id, so it does not change with the set of models in a figure.
    """
    key = model_id(name)
    if key in MODELS:
        return MODELS[key]
    colour = _FALLBACK[zlib.crc32(key.encode()) % len(_FALLBACK)]
    return ModelStyle(label=default_label or key, colour=colour)


def label_of(name: str, default_label: str | None = None) -> str:
    return style_of(name, default_label).label


def colour_of(name: str) -> str:
    return style_of(name).colour
