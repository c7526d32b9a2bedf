"""One strict reader for records: a mapping parsed from YAML or JSON, checked against its dataclass's annotations.

Registry layers, variants.yaml, profiles, checkpoint configs, a run's identity file and its STATUS are all read
by these rules, so a wrong value is refused in the same words wherever it was written:
`WHERE: must be an integer, got 'abc' (fix: write an integer)`. A bool is not an integer; an integer is a
number; null only where the annotation says `| None`; a list where it says a tuple. Integers must fit in 64 bits
and numbers be finite (exoformer/limits.py); the bounds that belong to a field's meaning stay in its
dataclass's `__post_init__`. Annotations are read as written (`from __future__ import annotations`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import MISSING, fields
from typing import Any

from exoformer.errors import UserError, did_you_mean
from exoformer.limits import MAX_INT, check_finite

_NOUNS = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string",
          "dict[str, Any]": "a mapping", "tuple[str, ...]": "a list of strings",
          "tuple[dict[str, Any], ...]": "a list of mappings"}
_FITS = {"bool": lambda v: isinstance(v, bool),
         "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
         "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
         "str": lambda v: isinstance(v, str),
         "dict[str, Any]": lambda v: isinstance(v, dict),
         "tuple[str, ...]": lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v),
         "tuple[dict[str, Any], ...]": lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, dict) for x in v)}
_TEXT_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


@functools.cache
def field_types(cls: type) -> dict[str, str]:
    """Field name -> its annotation as written, e.g. {'limit': 'int | None'}."""
    return {f.name: str(f.type) for f in fields(cls)}


def check(value: Any, annotation: str, *, where: str, fix: str | None = None, yaml: bool = False) -> Any:
    """`value` checked against `annotation`, returned with lists made tuples; a one-line UserError otherwise.

    `yaml`: the value comes from a registry layer, where a float field also takes YAML 1.1's text floats
    (`1e-5`) and always holds a float, so that `1` and `1.0` hash alike. `fix` replaces the suggested fix.
    """
    base = annotation.removesuffix(" | None")
    if base not in _FITS:  # pragma: no cover - a new field type needs a rule here
        raise AssertionError(f"no type rule for {annotation}")
    noun = _NOUNS[base]
    if value is None:
        if base == annotation:
            raise UserError("must not be null", where=where, fix=fix or f"write {noun}")
        return None
    if yaml and base == "float" and isinstance(value, str) and _TEXT_FLOAT.match(value.strip()):
        value = float(value)  # a too-long exponent gives inf, refused below
    if not _FITS[base](value):
        raise UserError(f"must be {noun}{'' if base == annotation else ' or null'}, got {value!r}", where=where,
                        fix=fix or f"write {noun}")
    if isinstance(value, int) and not isinstance(value, bool) and not -MAX_INT <= value < MAX_INT:
        size = f"an integer of {value.bit_length()} bits"  # shown by its size: the line stays short
        if base == "int":
            raise UserError(f"does not fit in 64 bits ({size})", where=where, fix=fix or "write a smaller integer")
        raise UserError(f"is too large ({size})", where=where, fix=fix or "write a finite number of normal size")
    if base == "float":
        check_finite(value, where=where)
        return float(value) if yaml else value
    return tuple(value) if isinstance(value, list) else value


def check_fields(obj: Any, *, section: str) -> None:
    """Every field of a dataclass instance made in code against its annotation; nothing is converted, so a
    list where a tuple belongs is refused. Errors name `section.field`."""
    for name, annotation in field_types(type(obj)).items():
        value = getattr(obj, name)
        if check(value, annotation, where=f"{section}.{name}") is not value:
            raise UserError(f"must be a tuple, got {value!r}", where=f"{section}.{name}", fix="pass a tuple")


def load(cls: type, data: Any, *, where: str, what: str, fix: str | None = None, ignore_unknown: bool = False,
         yaml: bool = False) -> Any:
    """`cls` built from the record `data`, every value checked by `check` (`yaml` as there); errors name `where`
    and the field.

    Unknown keys are refused with a did-you-mean, or ignored (`ignore_unknown`) for files a newer version may have
    written; a field without a default must be present. `what` names the record in messages ("model").
    """
    if not isinstance(data, dict):
        raise UserError(f"not a {what} record", where=where, fix=fix or "write `field: value` pairs")
    types = field_types(cls)
    unknown = [key for key in data if key not in types]
    if unknown and not ignore_unknown:
        raise UserError(f"unknown {what} field {unknown[0]!r}", where=where,
                        fix=fix or did_you_mean(str(unknown[0]), types))
    for f in fields(cls):
        if f.name not in data and f.default is MISSING and f.default_factory is MISSING:
            raise UserError(f"the {what} has no {f.name!r}", where=where, fix=fix or f"add {f.name}")
    values = {}
    for name, annotation in types.items():
        if name in data:
            try:
                values[name] = check(data[name], annotation, where=where, fix=fix, yaml=yaml)
            except UserError as err:
                raise UserError(f"{what} field {name!r} {err.problem}", where=where, fix=err.fix) from None
    return cls(**values)
