"""Named variants and shapes of the paper as data: a registry's `variants.yaml` (torch-free).

The file is registry data: `Registry` reads the `variants.yaml` of its own directory (so `--registry DIR`
brings its own variants) through `load_variants`, under the same input limits as every registry file.
Code without a registry (the trainer's `--variant`, tests) uses the module functions below, which read the
repository's experiments/variants.yaml: `list_variants`, `list_shapes`, `variant_fields`, `shape_fields`,
`resolve_shape`, `variant_config`. A shape alias (`aliases:`, e.g. 450m -> 450m-gated / 450m-ungated by the
variant's gating) is defined there once and nowhere else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exoformer.errors import UserError, did_you_mean
from exoformer.model.config import ModelConfig
from exoformer.records import check, field_types

VARIANTS_FILE = Path(__file__).resolve().parents[2] / "experiments" / "variants.yaml"
"""The repository's table of named variants and shapes (the default registry's variants.yaml)."""
VARIANTS_NAME = "variants.yaml"

SHAPE_FIELDS = ("n_layer", "n_head", "d_model", "vocab_size", "seq_len", "mlp_ratio", "rope_theta", "norm_eps",
                "init_std", "init_cutoff")
VARIANT_FIELDS = ("gated", "mix_paths", "anchor", "anchor_norm_paths", "post_mix_norm_paths", "granularity",
                  "dynamic", "dynamic_hidden", "coef_init", "dynamic_fc2_init")
SECTIONS = ("variants", "shapes", "aliases")


@dataclass(frozen=True, slots=True)
class VariantTable:
    """One variants.yaml, parsed and checked: variant -> fields, shape -> fields, alias -> (gated, ungated)."""

    variants: dict[str, dict]
    shapes: dict[str, dict]
    aliases: dict[str, tuple[str, str]]
    """Shape aliases resolved by the variant's `gated` field: ungated models are deeper at the same size."""
    file: str

    def list_variants(self) -> list[str]:
        return list(self.variants)

    def list_shapes(self) -> list[str]:
        return list(self.shapes)

    def describe(self, name: str) -> str:
        entry = self.variants.get(name) or self.shapes.get(name)
        if entry is None:
            raise UserError(f"unknown variant or shape {name!r}", where="variant",
                            fix=did_you_mean(name, [*self.variants, *self.shapes]))
        return entry.get("description", "")

    def variant_fields(self, name: str) -> dict:
        if name not in self.variants:
            raise UserError(f"unknown variant {name!r}", where="variant", fix=did_you_mean(name, self.variants))
        return {k: v for k, v in self.variants[name].items() if k != "description"}

    def shape_fields(self, name: str) -> dict:
        if name not in self.shapes:
            raise UserError(f"unknown shape {name!r}", where="shape",
                            fix=did_you_mean(name, [*self.shapes, *self.aliases]))
        return {k: v for k, v in self.shapes[name].items() if k != "description"}

    def resolve_alias(self, shape: str, gated: bool) -> str:
        """The shape an alias stands for at this gating; other names pass unchanged."""
        if shape in self.aliases:
            gated_name, ungated_name = self.aliases[shape]
            return gated_name if gated else ungated_name
        return shape

    def resolve_shape(self, shape: str, variant: str | None = None) -> str:
        if shape in self.aliases:
            if variant is None:
                raise UserError(f"shape {shape!r} depends on the variant's gating", where="shape",
                                fix=f"name the variant, or use one of {list(self.aliases[shape])}")
            return self.resolve_alias(shape, bool(self.variant_fields(variant).get("gated", False)))
        return shape


_CACHE: dict[tuple[str, str], VariantTable] = {}


def load_variants(path: str | os.PathLike, *, display: str | None = None) -> VariantTable:
    """Parse and check one variants.yaml (cached by its text); errors name file:line."""
    from exoformer.yaml_lines import load_yaml_text, read_limited  # lazy: harness imports this module

    shown = display or str(path)
    text = read_limited(path, display=shown)
    key = (shown, text)
    if key not in _CACHE:
        if len(_CACHE) > 16:
            _CACHE.clear()
        _CACHE[key] = _parse(load_yaml_text(text, where=shown), shown)
    return _CACHE[key]


def _parse(data: Any, file: str) -> VariantTable:
    if not isinstance(data, dict) or not {"variants", "shapes"} <= set(data) or not set(data) <= set(SECTIONS):
        raise UserError(f"must have the sections 'variants' and 'shapes' (and optionally 'aliases'), "
                        f"got {sorted(map(str, data)) if isinstance(data, dict) else type(data).__name__}",
                        where=f"{file}:1", fix="restore the file's layout (see experiments/variants.yaml)")
    out: dict[str, dict[str, dict]] = {}
    for section, allowed in (("variants", VARIANT_FIELDS), ("shapes", SHAPE_FIELDS)):
        body = data[section]
        if not isinstance(body, dict):
            raise UserError(f"section {section!r} must be a mapping name -> fields", where=_at(file, data, section),
                            fix="indent the entries under it")
        out[section] = {}
        for name, entry in body.items():
            where = _at(file, body, name)
            _check_name(name, where, section[:-1])
            if not isinstance(entry, dict):
                raise UserError(f"entry {name!r} is not a mapping", where=where, fix="write `field: value` lines")
            for key, value in entry.items():
                kw = _at(file, entry, key)
                if key == "description":
                    continue
                if key not in allowed:
                    raise UserError(f"unknown field {key!r} in {section}.{name}", where=kw,
                                    fix=did_you_mean(str(key), allowed))
                check(value, field_types(ModelConfig)[key], where=f"model.{key} at {kw}")
            try:  # each entry must make a valid model on its own (defaults for the rest)
                ModelConfig.from_dict({k: v for k, v in entry.items() if k != "description"}, where=where)
            except UserError as err:
                raise UserError(err.problem, where=f"{err.where} at {where}", fix=err.fix) from None
            out[section][name] = dict(entry)
    aliases: dict[str, tuple[str, str]] = {}
    body = data.get("aliases") or {}
    if not isinstance(body, dict):
        raise UserError("section 'aliases' must map alias -> {gated: SHAPE, ungated: SHAPE}",
                        where=_at(file, data, "aliases"), fix="e.g. 450m: {gated: 450m-gated, ungated: 450m-ungated}")
    for name, entry in body.items():
        where = _at(file, body, name)
        _check_name(name, where, "alias")
        if not isinstance(entry, dict) or set(entry) != {"gated", "ungated"}:
            raise UserError(f"alias {name!r} must be {{gated: SHAPE, ungated: SHAPE}}", where=where,
                            fix="name the shape for gated and for ungated variants")
        for which in ("gated", "ungated"):
            if entry[which] not in out["shapes"]:
                raise UserError(f"alias {name!r}: unknown {which} shape {entry[which]!r}",
                                where=_at(file, entry, which), fix=did_you_mean(str(entry[which]), out["shapes"]))
        if name in out["shapes"]:
            raise UserError(f"alias {name!r} is also a shape name", where=where, fix="rename one of them")
        aliases[name] = (entry["gated"], entry["ungated"])
    return VariantTable(variants=out["variants"], shapes=out["shapes"], aliases=aliases, file=file)


def _at(file: str, container: Any, key: Any) -> str:
    line = container.line_of(key) if hasattr(container, "line_of") else None
    return f"{file}:{line}" if line else file


def _check_name(name: Any, where: str, what: str) -> None:
    from exoformer.limits import check_name

    check_name(name, where=where, what=f"{what} name")


def default_table() -> VariantTable:
    """The repository's experiments/variants.yaml (for code that has no registry)."""
    return load_variants(VARIANTS_FILE, display="experiments/variants.yaml")


def list_variants() -> list[str]:
    """Variant names in table order."""
    return default_table().list_variants()


def list_shapes() -> list[str]:
    """Shape names in table order (aliases such as '450m' are not listed; see `resolve_shape`)."""
    return default_table().list_shapes()


def describe(name: str) -> str:
    """The one-line description of a variant or shape."""
    return default_table().describe(name)


def variant_fields(name: str) -> dict:
    """The ModelConfig variant fields of a named variant (fields not listed keep their defaults)."""
    return default_table().variant_fields(name)


def resolve_shape(shape: str, variant: str | None = None) -> str:
    """Resolve an alias ('450m') to a shape by the variant's gating; other names pass."""
    return default_table().resolve_shape(shape, variant)


def shape_fields(name: str) -> dict:
    """The ModelConfig shape fields of a named shape."""
    return default_table().shape_fields(name)


def variant_config(name: str, shape: str | None = None, *, table: VariantTable | None = None,
                   **overrides) -> ModelConfig:
    """ModelConfig of variant `name` at `shape` (None: ModelConfig's default shape), then `overrides`.

    `table` is a registry's variants (Registry.variants); without one, the repository's.
    """
    table = table or default_table()
    fields_ = table.variant_fields(name)
    if shape is not None:
        fields_ = {**table.shape_fields(table.resolve_shape(shape, name)), **fields_}
    return ModelConfig.from_dict({**fields_, **overrides}, where=f"variant {name!r}")
