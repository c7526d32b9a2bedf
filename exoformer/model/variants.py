"""Named variants and shapes of the paper as data: `experiments/variants.yaml` (torch-free).

The registry, the planner and the CLI resolve names through these functions, so they must stay stable:
`list_variants`, `list_shapes`, `variant_fields`, `shape_fields`, `resolve_shape`, `variant_config`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from exoformer.errors import UserError, did_you_mean
from exoformer.model.config import ModelConfig

VARIANTS_FILE = Path(__file__).resolve().parents[2] / "experiments" / "variants.yaml"
"""The one table of named variants and shapes."""

SHAPE_FIELDS = ("n_layer", "n_head", "d_model", "vocab_size", "seq_len", "mlp_ratio", "rope_theta", "norm_eps",
                "init_std", "init_cutoff")
VARIANT_FIELDS = ("gated", "mix_paths", "anchor", "anchor_norm_paths", "post_mix_norm_paths", "granularity",
                  "dynamic", "dynamic_hidden", "coef_init")
GATING_ALIASES = {"450m": ("450m-gated", "450m-ungated")}
"""Shape aliases resolved by the variant's `gated` field: ungated models are deeper at the same size."""


@lru_cache(maxsize=1)
def _table() -> dict:
    where = str(VARIANTS_FILE)
    try:
        data = yaml.safe_load(VARIANTS_FILE.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise UserError(f"cannot read the variant table ({e.__class__.__name__}: {e})", where=where,
                        fix="restore experiments/variants.yaml") from e
    if not isinstance(data, dict) or set(data) != {"variants", "shapes"}:
        raise UserError("must have exactly the sections 'variants' and 'shapes'", where=where, fix="fix the file")
    for section, allowed in (("variants", VARIANT_FIELDS), ("shapes", SHAPE_FIELDS)):
        for name, entry in data[section].items():
            if not isinstance(entry, dict):
                raise UserError(f"entry {name!r} is not a mapping", where=f"{where}:{section}", fix="fix the file")
            for key in entry:
                if key != "description" and key not in allowed:
                    raise UserError(f"unknown field {key!r} in {section}.{name}", where=where,
                                    fix=did_you_mean(key, allowed))
    return data


def list_variants() -> list[str]:
    """Variant names in table order."""
    return list(_table()["variants"])


def list_shapes() -> list[str]:
    """Shape names in table order (the alias '450m' is not listed; see `resolve_shape`)."""
    return list(_table()["shapes"])


def describe(name: str) -> str:
    """The one-line description of a variant or shape."""
    table = _table()
    entry = table["variants"].get(name) or table["shapes"].get(name)
    if entry is None:
        raise UserError(f"unknown variant or shape {name!r}", where="variant",
                        fix=did_you_mean(name, [*table["variants"], *table["shapes"]]))
    return entry.get("description", "")


def variant_fields(name: str) -> dict:
    """The ModelConfig variant fields of a named variant (fields not listed keep their defaults)."""
    variants = _table()["variants"]
    if name not in variants:
        raise UserError(f"unknown variant {name!r}", where="variant", fix=did_you_mean(name, variants))
    return {k: v for k, v in variants[name].items() if k != "description"}


def resolve_shape(shape: str, variant: str | None = None) -> str:
    """Resolve the alias '450m' to '450m-gated' / '450m-ungated' by the variant's gating; other names pass."""
    if shape in GATING_ALIASES:
        if variant is None:
            raise UserError(f"shape {shape!r} depends on the variant's gating", where="shape",
                            fix=f"name the variant, or use one of {list(GATING_ALIASES[shape])}")
        gated_name, ungated_name = GATING_ALIASES[shape]
        return gated_name if variant_fields(variant).get("gated", False) else ungated_name
    return shape


def shape_fields(name: str) -> dict:
    """The ModelConfig shape fields of a named shape."""
    shapes = _table()["shapes"]
    if name not in shapes:
        raise UserError(f"unknown shape {name!r}", where="shape", fix=did_you_mean(name, [*shapes, *GATING_ALIASES]))
    return {k: v for k, v in shapes[name].items() if k != "description"}


def variant_config(name: str, shape: str | None = None, **overrides) -> ModelConfig:
    """ModelConfig of variant `name` at `shape` (None: ModelConfig's default shape), then `overrides`."""
    fields = variant_fields(name)
    if shape is not None:
        fields = {**shape_fields(resolve_shape(shape, name)), **fields}
    return ModelConfig.from_dict({**fields, **overrides}, where=f"variant {name!r}")
