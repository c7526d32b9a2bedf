"""Safe YAML loading that remembers where every key and value came from.

Registry errors must name `file:line` (STYLE.md 3), and `yaml.safe_load` forgets positions, so the loader is
a safe loader subclass whose mappings and sequences carry their line numbers. It also rejects duplicate
keys, which plain PyYAML silently resolves to the last one (a classic source of "my change did nothing").
Only the standard safe constructors are used: no Python objects can be built from a registry file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from exoformer.errors import UserError

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LineDict(dict):
    """A mapping from YAML with `line` (1-based, of the mapping) and `key_lines` (per key)."""

    __slots__ = ("line", "key_lines")

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class LineList(list):
    """A sequence from YAML with `line` (1-based) and `item_lines`."""

    __slots__ = ("line", "item_lines")

    def line_of(self, index: int) -> int:
        return self.item_lines[index] if index < len(self.item_lines) else self.line


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int) -> None:
        self.key, self.line = key, line


class _LineLoader(_Base):  # type: ignore[misc, valid-type]
    """SafeLoader whose containers record node marks."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise _DuplicateKey(f"unhashable key {key!r}", key_node.start_mark.line + 1)
        if key in result.key_lines:
            raise _DuplicateKey(key, key_node.start_mark.line + 1)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_yaml_with_lines(path: str | Path, *, display: str | None = None) -> Any:
    """Parse one YAML file; broken YAML or a duplicate key raises a one-line UserError at file:line."""
    path = Path(path)
    shown = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError("file not found", where=shown, fix="check the path (or the include: list)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read file ({exc.__class__.__name__})", where=shown,
                        fix="make it a readable UTF-8 text file") from None
    try:
        return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as dup:
        problem = dup.key if isinstance(dup.key,
                                        str) and dup.key.startswith("unhashable") else f"duplicate key {dup.key!r}"
        raise UserError(problem, where=f"{shown}:{dup.line}", fix="keep one of them") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{shown}:{mark.line + 1}" if mark is not None else shown
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"invalid YAML: {problem}", where=where,
                        fix="fix the syntax (indentation, a missing ':' or an unclosed quote or bracket)") from None


def line_of(container: Any, key: Any) -> int | None:
    """The line of `key` inside a LineDict/LineList, or of the container itself, when known."""
    if isinstance(container, LineDict):
        return container.line_of(key)
    if isinstance(container, LineList) and isinstance(key, int):
        return container.line_of(key)
    return getattr(container, "line", None)
