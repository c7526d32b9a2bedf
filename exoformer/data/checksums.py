"""`SHA256SUMS` files (sha256sum's format, `<64 hex>  <relative path>` per line): read, write, check.

One reader for every checksum list the harness keeps (the smoke task files, fetched task data, the cached
smoke corpus), so a malformed line is always a one-line error naming file:line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from exoformer.errors import UserError
from exoformer.io import atomic_write_text, sha256_file

SUMS_FILE = "SHA256SUMS"
_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


def read_sums(path: str | os.PathLike, *, fix: str | None = None) -> dict[str, str]:
    """relative path -> lower-case hex digest; UserError at `file:line` for a line of another shape."""
    path = Path(path)
    fix = fix or f"regenerate {path.name}"
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise UserError("checksum file not found", where=str(path), fix=fix) from None
    except UnicodeDecodeError as error:
        line = path.read_bytes()[: error.start].count(b"\n") + 1
        raise UserError("checksum line is not UTF-8", where=f"{path}:{line}", fix=fix) from None
    sums: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _LINE.match(line.rstrip("\r"))
        if not match:
            raise UserError("not a sha256sum line (expected '<64 hex>  <relative path>')", where=f"{path}:{number}",
                            fix=fix)
        sums[match.group(2).strip().removeprefix("./")] = match.group(1).lower()
    return sums


def verify_files(root: str | os.PathLike, files: Iterable[str | os.PathLike], *, sums_path: str | os.PathLike,
                 fix: str) -> None:
    """Check that every file (under `root`) is listed in `sums_path` and matches; UserError naming the first not."""
    root = Path(root).resolve()
    expected = read_sums(sums_path, fix=fix)
    for path in files:
        path = Path(path)
        rel = path.resolve().relative_to(root).as_posix()
        if not path.is_file():
            raise UserError("file listed for checking is missing", where=str(path), fix=fix)
        if rel not in expected:
            raise UserError(f"not listed in {sums_path}", where=str(path), fix=fix)
        found = sha256_file(path)
        if found != expected[rel]:
            raise UserError(f"checksum mismatch: sha256 {found[:12]}... but {Path(sums_path).name} says "
                            f"{expected[rel][:12]}...", where=str(path), fix=fix)


def write_sums(root: str | os.PathLike, files: Iterable[str | os.PathLike]) -> Path:
    """Write `<root>/SHA256SUMS` for `files` (paths under `root`), atomically."""
    root = Path(root).resolve()
    lines = [f"{sha256_file(p)}  {Path(p).resolve().relative_to(root).as_posix()}\n" for p in files]
    return atomic_write_text(root / SUMS_FILE, "".join(lines))
