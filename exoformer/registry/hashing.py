"""Identity of a run: sha256 over the canonical JSON of its semantic fields.

Canonical means: keys sorted, no whitespace, tuples as lists, floats written by `repr` (the shortest string
that round-trips, which is what `json` uses), so the same config gives the same bytes in every process and
on every machine. Placement (profile, partition, account, paths) never enters: moving a run to another
cluster must not orphan its results.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

HASH_SCHEMA_VERSION = 1
"""Bump only when the meaning of an existing field changes; every run directory then changes too."""


def _plain(value: Any, where: str = "") -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"non-finite float at {where or 'top level'} cannot be hashed")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot hash a {type(value).__name__} at {where or 'top level'}")


def canonical_json(obj: Any) -> str:
    """The one byte-stable text form of plain data (dicts, lists, str, int, float, bool, None)."""
    return json.dumps(_plain(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def semantic_hash(semantic: dict) -> str:
    """Full sha256 hex digest of the semantic fields, tagged with the schema version."""
    payload = canonical_json({"schema": HASH_SCHEMA_VERSION, "spec": semantic})
    return hashlib.sha256(payload.encode("ascii")).hexdigest()


def hash12(full_hash: str) -> str:
    """The run-directory form: the first 12 hex digits (48 bits; collisions are checked by `validate`)."""
    return full_hash[:12]
