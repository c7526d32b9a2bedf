"""A copy of the registry whose Table 1 keeps only some rows (with their claims, released rows and reported cells),
and optionally another ladder file: a ladder of a few rows runs end to end in a test."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def subset_registry(tmp: Path, rows: list[str], ladder_yaml: str | None = None) -> tuple[Path, Path]:
    """(registry directory, reported.yaml) with table1 cut to `rows`."""
    registry = tmp / "registry"
    shutil.copytree(REPO / "experiments", registry)
    tables = yaml.safe_load((registry / "tables.yaml").read_text())
    tables["tables"]["table1"]["rows"] = [r for r in tables["tables"]["table1"]["rows"] if r["id"] in rows]
    (registry / "tables.yaml").write_text(yaml.safe_dump(tables, sort_keys=False))
    released = yaml.safe_load((registry / "released.yaml").read_text())
    released["released"]["table1"] = {k: v for k, v in released["released"]["table1"].items() if k in rows}
    (registry / "released.yaml").write_text(yaml.safe_dump(released, sort_keys=False))
    claims = yaml.safe_load((registry / "claims.yaml").read_text())
    claims["claims"] = {cid: c for cid, c in claims["claims"].items()
                        if all(r.get("table") != "table1" or r.get("row", rows[0]) in rows for r in c["reads"])}
    (registry / "claims.yaml").write_text(yaml.safe_dump(claims, sort_keys=False))
    if ladder_yaml is not None:
        (registry / "ladder.yaml").write_text(ladder_yaml)
    reported = yaml.safe_load((REPO / "results" / "paper" / "reported.yaml").read_text())
    reported["tables"]["table1"] = {k: v for k, v in reported["tables"]["table1"].items() if k in rows}
    out = tmp / "reported.yaml"
    out.write_text(yaml.safe_dump(reported, sort_keys=False))
    return registry, out
