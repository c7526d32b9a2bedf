"""results/paper/reported.yaml: the paper's numbers with provenance, checked against the declared tables.

Layout: `tables: {table: {row: {column: {value, source, version[, note]} | {value: null, reason}}}}`. A cell
the paper does not give needs no line: readers show it as "not reported". Numbers known only as a gap between
two cells or as a column's best over an unknown row are claims (experiments/claims.yaml).

Each source tag (`sources:`) has a strength (SOURCE_STRENGTH, docs/paper.md section 0): PRIMARY, the paper's own
text; AUTHOR, the author's own words outside the paper; SECONDARY, a machine-generated or third-party account. A tag
not rated there is SECONDARY: no number reads as the paper's own unless its source is known to be the paper.
`source_legend` explains the tags an output shows, one line each.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exoformer.errors import UserError, did_you_mean
from exoformer.registry.registry import REPO_ROOT, Registry
from exoformer.limits import check_finite
from exoformer.yaml_lines import load_yaml_with_lines

DEFAULT_REPORTED = REPO_ROOT / "results" / "paper" / "reported.yaml"
VERSIONS = ("v1", "v2", "v3", "v4", "unknown")
SECTIONS = ("paper", "sources", "tables")


PRIMARY, AUTHOR, SECONDARY = "primary", "author", "secondary"
STRENGTH_MEANS = {PRIMARY: "the paper's own text",
                  AUTHOR: "the author's own words, not the paper",
                  SECONDARY: "a machine-generated or third-party account, not the paper's own number"}
SOURCE_STRENGTH = {"A-v1": PRIMARY, "A-v2": PRIMARY, "A-v4": PRIMARY, "RED": AUTHOR}
"""Tag -> strength, as docs/paper.md section 0 rates each source; every other tag ([WEB]: an LLM-generated
explanation of arXiv v4 on the author's site, [WIZ], [N-...]) is SECONDARY."""
TAG = re.compile(r"\[([A-Za-z][A-Za-z0-9-]*)\]")


@dataclass(kw_only=True, slots=True, frozen=True)
class Source:
    """One source tag of reported.yaml: what it is and how far it is the paper's own word."""

    tag: str
    text: str
    strength: str = SECONDARY

    @property
    def secondary(self) -> bool:
        return self.strength == SECONDARY


@dataclass(kw_only=True, slots=True, frozen=True)
class Reported:
    """One known number: value, source tag, paper version."""

    value: float
    source: str
    version: str
    note: str = ""


def strength(tag: str) -> str:
    return SOURCE_STRENGTH.get(tag, SECONDARY)


def load_sources(registry: Registry, path: str | os.PathLike | None = None) -> dict[str, Source]:
    """The `sources:` of reported.yaml as tag -> Source (with its strength), in the file's order."""
    path = reported_path(path)
    _load_reported(registry, str(path), _stamp(path))  # checks the file
    data = _document(registry, str(path), _stamp(path))
    return {str(tag): Source(tag=str(tag), text=" ".join(str(text).split()), strength=strength(str(tag)))
            for tag, text in (data.get("sources") or {}).items()}


def tags_in(text: str, sources: dict[str, Source]) -> list[str]:
    """The known source tags a text names ("[WEB]", "[N-v3]"), in order, once each."""
    return list(dict.fromkeys(t for t in TAG.findall(text) if t in sources))


def describe(tag: str, sources: dict[str, Source]) -> str:
    """"[WEB] (secondary)": a tag with its strength, for a count of cells."""
    return f"[{tag}] ({sources[tag].strength if tag in sources else SECONDARY})"


def source_legend(tags: Iterable[str], sources: dict[str, Source], *,
                  versions: dict[str, Iterable[str]] | None = None) -> list[str]:
    """One line per tag in `tags` (once each, in order): "[WEB] = <what reported.yaml says it is> (v4); secondary:
    a machine-generated or third-party account, not the paper's own number". Only the tags an output shows."""
    out = []
    for tag in dict.fromkeys(tags):
        source = sources.get(tag, Source(tag=tag, text="not described in reported.yaml"))
        seen = sorted(set((versions or {}).get(tag, ())) - {"unknown"})
        version = f"; numbers of paper {', '.join(seen)}" if seen else ""
        out.append(f"[{tag}] = {source.text}{version}; {source.strength}: {STRENGTH_MEANS[source.strength]}")
    return out


def reported_path(explicit: str | os.PathLike | None = None) -> Path:
    if explicit is not None and not str(explicit).strip():
        raise UserError("empty file name", where="--reported", fix="name reported.yaml, or leave --reported out")
    env = os.environ.get("EXOFORMER_REPORTED")
    if explicit is None and env is not None and not env.strip():
        raise UserError("empty file name", where="$EXOFORMER_REPORTED", fix="unset it, or name reported.yaml")
    chosen = explicit or env
    return Path(chosen) if chosen else DEFAULT_REPORTED


def load_reported(registry: Registry, path: str | os.PathLike | None = None) -> dict[tuple[str, str, str],
                                                                                     Reported | None]:
    """All cells keyed (table, row, column); None for an unknown cell. Raises UserError on any mismatch.
    Parsed once per registry and file version (a report builds many tables from the same file)."""
    path = reported_path(path)
    return dict(_load_reported(registry, str(path), _stamp(path)))


def _stamp(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


@functools.lru_cache(maxsize=16)
def _document(registry: Registry, path_text: str, stamp: int | None) -> Any:
    return load_yaml_with_lines(Path(path_text), display=registry.display(Path(path_text)))


@functools.lru_cache(maxsize=16)
def _load_reported(registry: Registry, path_text: str, stamp: int | None) -> dict[tuple[str, str, str],
                                                                                  Reported | None]:
    file = registry.display(Path(path_text))
    data = _document(registry, path_text, stamp)
    if not isinstance(data, dict):
        raise UserError("must be a mapping with paper:, sources:, tables:", where=f"{file}:1", fix="see its header")
    for key in data:
        if key not in SECTIONS:
            raise UserError(f"unknown section {key!r}", where=f"{file}:{data.line_of(key)}",
                            fix=did_you_mean(str(key), SECTIONS))
    sources = data.get("sources") or {}
    tables = data.get("tables")
    if not isinstance(tables, dict) or not isinstance(sources, dict):
        raise UserError("needs mappings sources: and tables:", where=f"{file}:1", fix="see its header")
    cells: dict[tuple[str, str, str], Reported | None] = {}
    by_key = {t.reported: t for t in registry.tables.values()}  # a table's `reported:` key (default: its id)
    for key, rows in tables.items():
        tw = f"{file}:{tables.line_of(key)}"
        if key not in by_key:
            raise UserError(f"table {key!r} is not declared", where=tw, fix=did_you_mean(str(key), by_key))
        table = by_key[key]
        tid = table.id
        row_ids = [r.id for r in table.rows]
        if not isinstance(rows, dict):
            raise UserError(f"table {tid!r} must map row -> columns", where=tw, fix="indent rows under it")
        for rid, cols in rows.items():
            rw = f"{file}:{rows.line_of(rid)}"
            if rid not in row_ids:
                raise UserError(f"row {rid!r} is not a row of table {tid!r}", where=rw, fix=did_you_mean(str(rid),
                                                                                                         row_ids))
            if not isinstance(cols, dict):
                raise UserError(f"row {tid}/{rid} must map column -> cell", where=rw, fix="indent columns under it")
            for col, cell in cols.items():
                cw = f"{file}:{cols.line_of(col)}"
                if col not in table.columns:
                    raise UserError(f"{col!r} is not a column of table {tid!r}", where=cw,
                                    fix=did_you_mean(str(col), table.columns))
                cells[(tid, rid, col)] = _cell(cell, cw, sources)
    return cells


def _cell(cell: object, where: str, sources: dict) -> Reported | None:
    if not isinstance(cell, dict):
        raise UserError(f"a cell must be a mapping, got {cell!r}", where=where,
                        fix="write {value: X, source: TAG, version: vN} or {value: null, reason: ...}")
    value = cell.get("value", "missing")
    if value is None:
        if set(cell) != {"value", "reason"} or not isinstance(cell["reason"], str) or not cell["reason"].strip():
            raise UserError("an unknown cell needs exactly value: null and a reason", where=where,
                            fix="write {value: null, reason: why it is unknown}")
        return None
    allowed = {"value", "source", "version", "note"}
    extra = set(cell) - allowed
    if extra:
        raise UserError(f"unknown key {sorted(extra)[0]!r} in a cell", where=where,
                        fix=did_you_mean(sorted(extra)[0], allowed))
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise UserError(f"value must be a number or null, got {value!r}", where=where, fix="write a number")
    check_finite(value, where=where)
    if cell.get("source") not in sources:
        raise UserError(f"unknown source tag {cell.get('source')!r}", where=where,
                        fix=did_you_mean(str(cell.get("source")), sources))
    if cell.get("version") not in VERSIONS:
        raise UserError(f"unknown paper version {cell.get('version')!r}", where=where,
                        fix=did_you_mean(str(cell.get("version")), VERSIONS))
    return Reported(value=float(value), source=cell["source"], version=cell["version"], note=str(cell.get("note", "")))
