"""The ExoFormer model family: one configurable model for every variant of the paper.

`ModelConfig` and the variant table are torch-free and imported eagerly; the torch parts
(`ExoTransformer`, `load_official_checkpoint`, `Inspection`, `LayerTrace`, `Tracer`) load on first access,
so that `import exoformer.model` stays cheap for the planning verbs of the CLI.
"""

from __future__ import annotations

from importlib import import_module

from exoformer.model.config import ModelConfig
from exoformer.model.variants import (
    describe,
    list_shapes,
    list_variants,
    resolve_shape,
    shape_fields,
    variant_config,
    variant_fields,
)

_LAZY = {
    "ExoTransformer": "exoformer.model.model",
    "Inspection": "exoformer.model.model",
    "LayerTrace": "exoformer.model.model",
    "Tracer": "exoformer.model.model",
    "load_official_checkpoint": "exoformer.model.loading",
}

__all__ = ["ModelConfig", "describe", "list_shapes", "list_variants", "resolve_shape", "shape_fields",
           "variant_config", "variant_fields", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'exoformer.model' has no attribute {name!r}")
