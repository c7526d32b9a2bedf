"""The `released:` registry section (experiments/released.yaml): which released checkpoint is which table row.

    released:
      table1:
        base: {repo: Jonnester/Baseline, file: "ckpt_step:38146.pt", sha256: null}
        gated: {repo: null, why: "no released repository is known to hold it"}

`repo: null` needs a one-line `why:`; `sha256` (null: take the hub's LFS checksum) is checked after a download.
Torch-free: the registry loads it with every other file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from exoformer.errors import UserError, did_you_mean

DEFAULT_FILE = "ckpt_step:38146.pt"
"""The final checkpoint of the official train.py (docs/official_code.md 4.5)."""
KEYS = ("repo", "file", "sha256", "why")
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_SHA = re.compile(r"^[0-9a-f]{64}$")


@dataclass(kw_only=True, slots=True, frozen=True)
class Released:
    """One table row's released checkpoint on the Hugging Face hub (repo None: not known)."""

    table: str
    row: str
    repo: str | None
    file: str
    sha256: str | None
    why: str | None
    source: str


def check_repo(repo: str, *, where: str) -> str:
    if not isinstance(repo, str) or not _REPO.match(repo):
        raise UserError(f"{repo!r} is not a hub repository name", where=where, fix="write OWNER/NAME, e.g. "
                        "Jonnester/Baseline")
    return repo


def parse_checkpoints(body: Any, file: str) -> dict[tuple[str, str], Released]:
    """(table id, row id) -> Released; table and row ids are checked against the tables later (`check_rows`)."""
    out: dict[tuple[str, str], Released] = {}
    for table, rows in body.items():
        twhere = f"{file}:{body.line_of(table)}"
        if not isinstance(rows, dict):
            raise UserError(f"checkpoints.{table} must map row id -> {{repo:, file:}}", where=twhere,
                            fix="indent `row: {repo: OWNER/NAME}` lines under the table id")
        for row, entry in rows.items():
            where = f"{file}:{rows.line_of(row)}"
            if not isinstance(entry, dict):
                raise UserError(f"checkpoints.{table}.{row} must be a mapping", where=where,
                                fix="write {repo: OWNER/NAME, file: NAME} or {repo: null, why: ...}")
            for key in entry:
                if key not in KEYS:
                    raise UserError(f"unknown key {key!r}", where=where, fix=did_you_mean(str(key), KEYS))
            repo, why = entry.get("repo"), entry.get("why")
            if repo is None:
                if not isinstance(why, str) or not why.strip():
                    raise UserError(f"checkpoints.{table}.{row}: repo is null without a why:", where=where,
                                    fix="add why: <one line saying why no repository is known>")
            else:
                check_repo(repo, where=where)
            name = entry.get("file", DEFAULT_FILE)
            if not isinstance(name, str) or not name or name.startswith("/") or ".." in name.split("/"):
                raise UserError(f"bad file name {name!r}", where=where, fix=f"e.g. file: {DEFAULT_FILE!r}")
            sha = entry.get("sha256")
            if sha is not None and (not isinstance(sha, str) or not _SHA.match(sha)):
                raise UserError("sha256 must be 64 lowercase hex digits or null", where=where,
                                fix="write the file's sha256, or null to take the hub's checksum")
            out[(str(table), str(row))] = Released(table=str(table), row=str(row), repo=repo, file=name,
                                                   sha256=sha, why=why, source=where)
    return out


def check_rows(released: dict[tuple[str, str], Released], tables: dict) -> None:
    """Every entry must name a table and one of its rows (called once the whole registry is loaded)."""
    for (table, row), entry in released.items():
        if table not in tables:
            raise UserError(f"released: unknown table {table!r}", where=entry.source,
                            fix=did_you_mean(table, tables))
        rows = [r.id for r in tables[table].rows]
        if row not in rows:
            raise UserError(f"checkpoints.{table}: unknown row {row!r}", where=entry.source,
                            fix=did_you_mean(row, rows))
