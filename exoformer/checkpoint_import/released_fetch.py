"""Fetch the author's released checkpoints on a machine with internet (`reproduce.py prefetch --checkpoints`).

Which hub repository holds which table row is registry data (experiments/released.yaml); `--map ROW=REPO`
adds or replaces one. Each file lands in `<out>/checkpoints/<table>/<row>/<file>` through huggingface_hub (which
lm-eval already installs), then its sha256 is computed and compared with the registry's, else with the hub's
LFS checksum, and written beside it as `<file>.sha256`. A verified copy is never fetched again. Compute nodes
only read the files (`reproduce.py evaluate PATH --as ROW`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from exoformer.errors import UserError, did_you_mean
from exoformer.registry.released import Released, check_repo
from exoformer.io import atomic_write_text, sha256_file

CHECKPOINTS_DIR = "released-checkpoints"


def parse_map(items: list[str] | tuple[str, ...], rows: list[str]) -> dict[str, str]:
    """`ROW=OWNER/NAME` pairs from the command line, each row checked against the table's rows."""
    out = {}
    for text in items:
        row, sep, repo = text.partition("=")
        if not sep or not row.strip():
            raise UserError(f"{text!r} is not ROW=OWNER/NAME", where="--map", fix="e.g. --map gated=OWNER/NAME")
        row = row.strip()
        if row not in rows:
            raise UserError(f"unknown row {row!r}", where=f"--map {text}", fix=did_you_mean(row, rows))
        out[row] = check_repo(repo.strip(), where=f"--map {text}")
    return out


def hub_download(repo: str, filename: str, local_dir: Path) -> Path:
    """One file of a model repository into `local_dir` (network)."""
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(repo_id=repo, filename=filename, local_dir=str(local_dir)))


def hub_sha256(repo: str, filename: str) -> str | None:
    """The hub's LFS sha256 of a file (None when it is not an LFS file) (network)."""
    from huggingface_hub import HfApi

    (info,) = HfApi().get_paths_info(repo, [filename])
    lfs = getattr(info, "lfs", None)
    return getattr(lfs, "sha256", None) if lfs is not None else None


def prefetch_checkpoints(released: dict[tuple[str, str], Released], out_dir: str | Path, *, table: str = "table1",
                         mapping: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Download and verify every row of `table` that has a repository; returns one record per row (what was
    fetched, found already verified, or skipped and why)."""
    mapping = dict(mapping or {})
    entries = {row: e for (t, row), e in released.items() if t == table}
    for row, repo in mapping.items():
        base = entries.get(row)
        entries[row] = Released(table=table, row=row, repo=repo, file=base.file if base else "ckpt_step:38146.pt",
                                sha256=None, why=None, source=f"--map {row}={repo}")
    records = []
    for row, entry in entries.items():
        if entry.repo is None:
            records.append({"row": row, "state": "skipped", "why": entry.why})
            continue
        target_dir = Path(out_dir) / CHECKPOINTS_DIR / table / row
        path = target_dir / entry.file
        sidecar = Path(f"{path}.sha256")
        if path.is_file() and sidecar.is_file() and sidecar.read_text().split()[:1] == [sha256_file(path)]:
            records.append({"row": row, "state": "present", "repo": entry.repo, "path": str(path)})
            continue
        got = hub_download(entry.repo, entry.file, target_dir)
        digest = sha256_file(got)
        expected = entry.sha256 or hub_sha256(entry.repo, entry.file)
        if expected is None:
            raise UserError(f"no sha256 to verify {entry.repo}/{entry.file} against", where=entry.source,
                            fix=f"write its sha256 into experiments/released.yaml (the file's is {digest})")
        if digest != expected:
            raise UserError(f"sha256 mismatch: {digest[:12]} downloaded, {expected[:12]} expected", where=str(got),
                            fix="delete the file and run the prefetch again")
        atomic_write_text(sidecar, f"{digest}  {Path(got).name}\n")
        records.append({"row": row, "state": "fetched", "repo": entry.repo, "path": str(got), "sha256": digest})
    return records


def format_records(records: list[dict[str, Any]], table: str) -> str:
    lines = []
    for r in records:
        if r["state"] == "skipped":
            lines.append(f"{table} {r['row']}: no repository ({r['why']}); supply one with --map {r['row']}=OWNER/NAME")
        else:
            lines.append(f"{table} {r['row']}: {r['state']} {r['path']} ({r['repo']})\n"
                         f"  evaluate: reproduce.py evaluate '{r['path']}' --as {r['row']}")
    return "\n".join(lines)
