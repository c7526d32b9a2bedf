"""Safe YAML loading under input limits that remembers where every key and value came from.

Registry errors name `file:line` (docs/input-limits.md), but `yaml.safe_load` forgets positions, so the loader is
a safe loader whose mappings and sequences carry their line numbers. It also rejects duplicate keys, which
plain PyYAML silently resolves to the last one (a classic source of "my change did nothing"), while merge
keys (`<<: *base`) keep their standard meaning: the mapping's own keys win over merged ones.

Limits (exoformer/limits.py) are enforced while composing, before any Python object exists: the file size,
the nesting depth (counted, never left to the recursion limit or the C stack), the number of alias uses and
the node count after expanding aliases (a few hundred bytes can otherwise expand to gigabytes). Events come
from libyaml when available; composition is always the Python composer below, so the checks always run.
Only the standard safe constructors are used: no Python objects can be built from a registry file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from exoformer import limits
from exoformer.errors import UserError

_MERGE_TAG = "tag:yaml.org,2002:merge"


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


class _Refused(Exception):
    """A problem found while composing or constructing: (message, 1-based line, fix)."""

    def __init__(self, problem: str, line: int, fix: str) -> None:
        self.problem, self.line, self.fix = problem, line, fix


try:
    from yaml._yaml import CParser as _EventSource  # libyaml's event parser: fast, and not recursive
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _PyEvents(Reader, Scanner, Parser):  # type: ignore[misc]
        """The pure-Python event parser (also not recursive)."""

        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)

    _EventSource = _PyEvents  # type: ignore[misc, assignment]


class _LimitedLoader(Composer, _EventSource, SafeConstructor, Resolver):  # type: ignore[misc, valid-type]
    """Events from the parser, composed here (Composer comes first in the MRO) under depth and size budgets."""

    def __init__(self, stream: str) -> None:
        _EventSource.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._depth = 0
        self._aliases = 0
        self._sizes: dict[int, int] = {}

    def compose_document(self) -> Any:
        self._aliases = 0
        self._sizes = {}
        return super().compose_document()

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self._aliases += 1
            if self._aliases > limits.MAX_ALIASES:
                raise _Refused(f"more than {limits.MAX_ALIASES} alias uses (*name)", event.start_mark.line + 1,
                               "write the values out, or use fewer aliases")
        self._depth += 1
        if self._depth > limits.MAX_DEPTH:
            raise _Refused(f"nesting deeper than {limits.MAX_DEPTH} levels", self.peek_event().start_mark.line + 1,
                           "flatten the structure")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._sizes.setdefault(id(node), self._size_of(node))
        return node

    def _size_of(self, node: Any) -> int:
        """Nodes in the fully expanded tree under `node` (children are composed first, so theirs are known)."""
        if isinstance(node, ScalarNode):
            return 1
        children = node.value if isinstance(node, SequenceNode) else [n for pair in node.value for n in pair]
        size = 1 + sum(self._sizes.get(id(child), 1) for child in children)
        if size > limits.MAX_NODES:
            raise _Refused(f"more than {limits.MAX_NODES} values once aliases are expanded",
                           node.start_mark.line + 1, "use fewer or smaller aliases (an alias repeats its whole value)")
        return size

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        """Constructor failures (a 5,000-digit integer, a timestamp like 2026-13-45) become one-line errors."""
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError, TypeError) as exc:
            raise _Refused(f"cannot read the value {_short(node.value) if isinstance(node, ScalarNode) else ''} "
                           f"({exc.__class__.__name__})", node.start_mark.line + 1,
                           "quote it to make it a string, or write a plain number") from None

    def construct_yaml_map(self, node: MappingNode):  # type: ignore[override]
        yield _construct_mapping(self, node)

    def construct_yaml_seq(self, node: SequenceNode):  # type: ignore[override]
        yield _construct_sequence(self, node)


def _construct_mapping(loader: _LimitedLoader, node: MappingNode) -> LineDict:
    """A LineDict: merged keys (`<<`) first, then the mapping's own keys, which may override merged ones but
    not repeat each other."""
    result = LineDict()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    own: dict[Any, int] = {}
    merged: list[LineDict] = []
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:
            merged.extend(_merge_sources(loader, value_node))
    for source in reversed(merged):  # earlier sources win (YAML merge-key semantics)
        for key, value in source.items():
            result[key] = value
            result.key_lines[key] = source.line_of(key)
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise _Refused(f"unhashable key {_short(key)}", line, "use a plain scalar as the key")
        if key in own:
            raise _Refused(f"duplicate key {_short(key)} (first at line {own[key]})", line, "keep one of them")
        own[key] = line
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = line
    return result


def _merge_sources(loader: _LimitedLoader, value_node: Any) -> list[LineDict]:
    nodes = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
    out = []
    for sub in nodes:
        if not isinstance(sub, MappingNode):
            raise _Refused("a merge key (<<) must name a mapping or a list of mappings", sub.start_mark.line + 1,
                           "write <<: *anchor where the anchor is a mapping")
        out.append(loader.construct_object(sub, deep=True))
    return out


def _construct_sequence(loader: _LimitedLoader, node: SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_LimitedLoader.add_constructor("tag:yaml.org,2002:map", _LimitedLoader.construct_yaml_map)
_LimitedLoader.add_constructor("tag:yaml.org,2002:seq", _LimitedLoader.construct_yaml_seq)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_limited(path: str | Path, *, display: str | None = None) -> str:
    """The text of a regular UTF-8 file of at most MAX_FILE_BYTES (devices, FIFOs and directories refused)."""
    path = Path(path)
    shown = display or str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UserError("file not found", where=shown, fix="check the path (or the include: list)") from None
    except OSError as exc:
        raise UserError(f"cannot read file ({exc.__class__.__name__})", where=shown,
                        fix="make it a readable UTF-8 text file") from None
    if not stat.S_ISREG(info.st_mode):
        raise UserError("not a regular file", where=shown, fix="name a YAML file (not a directory, device or pipe)")
    cap = limits.MAX_FILE_BYTES
    if info.st_size > cap:
        raise UserError(f"file is {info.st_size} bytes, over the {cap}-byte limit", where=shown,
                        fix="split it into included files or shorten it")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(cap + 1)
        if len(raw) > cap:
            raise UserError(f"file is over the {cap}-byte limit", where=shown, fix="shorten it")
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read file ({exc.__class__.__name__})", where=shown,
                        fix="make it a readable UTF-8 text file") from None


def load_yaml_text(text: str, *, where: str, numbered: bool = True) -> Any:
    """Parse YAML text under the limits; any problem is a one-line UserError at `where:line`.

    `numbered=False` (a `--set` value) names `where` alone, since a one-line value has no useful line number.
    """
    def at(line: int | None) -> str:
        return f"{where}:{line}" if numbered and line is not None else where

    if len(text) > limits.MAX_FILE_BYTES:
        raise UserError(f"text is over the {limits.MAX_FILE_BYTES}-byte limit", where=where, fix="shorten it")
    loader = _LimitedLoader(text)
    try:
        return loader.get_single_data()
    except _Refused as refused:
        raise UserError(refused.problem, where=at(refused.line), fix=refused.fix) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"invalid YAML: {problem}", where=at(mark.line + 1 if mark is not None else None),
                        fix="fix the syntax (indentation, a missing ':' or an unclosed quote or bracket)") from None
    except RecursionError:  # pragma: no cover - the depth budget comes first; kept so nothing escapes as a trace
        raise UserError("nesting too deep", where=where, fix="flatten the structure") from None
    finally:
        loader.dispose()


def load_yaml_with_lines(path: str | Path, *, display: str | None = None) -> Any:
    """Parse one YAML file under the limits; broken YAML or a duplicate key raises a one-line UserError."""
    shown = display or str(path)
    return load_yaml_text(read_limited(path, display=shown), where=shown)


def line_of(container: Any, key: Any) -> int | None:
    """The line of `key` inside a LineDict/LineList, or of the container itself, when known."""
    if isinstance(container, LineDict) or (isinstance(container, LineList) and isinstance(key, int)):
        return container.line_of(key)
    return getattr(container, "line", None)
