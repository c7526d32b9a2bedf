"""`list [PATTERN]`: specs (with group, variant, preset, hash), tables and figures."""

from __future__ import annotations

import argparse
import fnmatch
import json

from exoformer.harness.cli_common import add_registry_arg, load_registry, run_dir, run_state

HELP = "list specs, tables and figures (PATTERN: a glob over names)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pattern", nargs="?", default="*", help="glob over spec, table and figure names")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs-dir", default=None, metavar="DIR",
                        help="runs root for the status column (default: $EXOFORMER_RUNS_DIR or results/runs)")
    add_registry_arg(parser)


def run(args: argparse.Namespace) -> int:
    reg = load_registry(args)

    def match(name: str) -> bool:
        return fnmatch.fnmatchcase(name, args.pattern)

    specs = [reg.resolve(name) for name in reg.specs if match(name)]
    status = {s.name: run_state(run_dir(s, args.runs_dir))[0] or "-" for s in specs}
    tables = [t for t in reg.tables.values() if match(t.id)]
    figures = [f for f in reg.figures.values() if match(f.id)]
    if args.json:
        print(json.dumps({
            "specs": [{"name": s.name, "group": s.group, "hash": s.hash12, "variant": s.variant, "preset": s.preset,
                       "status": None if status[s.name] == "-" else status[s.name]} for s in specs],
            "tables": [{"id": t.id, "title": t.title, "rows": len(t.rows),
                        "specs": len(t.spec_names())} for t in tables],
            "figures": [{"id": f.id, "title": f.title, "kind": f.kind} for f in figures],
        }))
        return 0
    if specs:
        w = max(4, *(len(s.name) for s in specs))
        g = max(5, *(len(s.group) for s in specs))
        v = max(7, *(len(s.variant) for s in specs))
        print(f"{'SPEC':<{w}}  {'GROUP':<{g}}  {'VARIANT':<{v}}  PRESET  HASH          STATUS")
        for s in specs:
            print(f"{s.name:<{w}}  {s.group:<{g}}  {s.variant:<{v}}  {s.preset:<6}  {s.hash12}  {status[s.name]}")
    if tables:
        print(f"\nTABLES ({len(tables)})")
        for t in tables:
            print(f"  {t.id:<14} {len(t.rows):>3} rows  {t.title}")
    if figures:
        print(f"\nFIGURES ({len(figures)})")
        for f in figures:
            print(f"  {f.id:<26} {f.kind:<9} {f.title}")
    print(f"\n{len(specs)} specs, {len(tables)} tables, {len(figures)} figures")
    return 0
