"""Verbs over the registry: list, show, validate. Torch-free."""

from __future__ import annotations

import argparse
import fnmatch
import json

import yaml

from exoformer.cli import options
from exoformer.runs import rundirs as runs
from exoformer.registry.validate import validate
from exoformer.rundir import RunDir


def _state(spec, args) -> tuple[str | None, bool]:
    rd = RunDir(runs.run_dir_for(spec, options.runs_root(args)))
    status = rd.read_status()
    return (status.state if status else None), rd.has_checkpoint()


def list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pattern", nargs="?", default="*", help="glob over spec, table and figure names")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--preset", default=None,
                        help="resolve each spec under this preset and show the status of that run (default: each "
                             "spec's own preset; when none of the listed specs has a run there but runs of another "
                             "preset exist, a note names the flag to add). SHAPE is the model shape the spec "
                             "resolves to under it: a preset is a recipe (data, steps, numerics), and a spec may "
                             "train another shape under it (the size ladder under 450m)")
    options.add_runs_dir(parser)
    options.add_registry(parser)


def _other_presets_note(specs, status: dict[str, str], root, preset: str | None) -> str | None:
    """One line naming the --preset to add when none of `specs` has a run under the preset listed."""
    from exoformer.runs.run_index import find_runs

    if any(state != "-" for state in status.values()) or not root.is_dir():
        return None
    listed = {s.preset for s in specs}
    others = sorted({r.preset for r in find_runs(root, specs={s.name for s in specs}) if r.identity} - listed)
    if not others:
        return None
    which = f"preset {preset}" if preset else "their own presets"
    return f"note: none of these specs has a run under {which}; runs exist under preset {', '.join(others)}: " \
           f"add --preset {others[0]}"


def list_verb(args: argparse.Namespace) -> int:
    reg = options.registry(args)
    root = options.existing_runs_root(args, default_may_be_missing=True)

    def match(name: str) -> bool:
        return fnmatch.fnmatchcase(name, args.pattern)

    specs = [reg.resolve(name, preset=args.preset) for name in reg.specs if match(name)]
    status = {s.name: _state(s, args)[0] or "-" for s in specs}
    tables = [t for t in reg.tables.values() if match(t.id)]
    figures = [f for f in reg.figures.values() if match(f.id)]
    if args.json:
        print(json.dumps({
            "specs": [{"name": s.name, "group": s.group, "hash": s.hash12, "variant": s.variant, "preset": s.preset,
                       "shape": s.shape, "status": None if status[s.name] == "-" else status[s.name]}
                      for s in specs],
            "tables": [{"id": t.id, "title": t.title, "rows": len(t.rows),
                        "specs": len(t.spec_names())} for t in tables],
            "figures": [{"id": f.id, "title": f.title, "kind": f.kind} for f in figures],
        }))
        return 0
    if specs:
        w = max(4, *(len(s.name) for s in specs))
        g = max(5, *(len(s.group) for s in specs))
        v = max(7, *(len(s.variant) for s in specs))
        p = max(6, *(len(s.preset) for s in specs))
        h = max(5, *(len(s.shape) for s in specs))
        print(f"{'SPEC':<{w}}  {'GROUP':<{g}}  {'VARIANT':<{v}}  {'PRESET':<{p}}  {'SHAPE':<{h}}  HASH          STATUS")
        for s in specs:
            print(f"{s.name:<{w}}  {s.group:<{g}}  {s.variant:<{v}}  {s.preset:<{p}}  {s.shape:<{h}}  {s.hash12}  "
                  f"{status[s.name]}")
    if tables:
        print(f"\nTABLES ({len(tables)})")
        for t in tables:
            print(f"  {t.id:<14} {len(t.rows):>3} rows  {t.title}")
    if figures:
        print(f"\nFIGURES ({len(figures)})")
        for f in figures:
            print(f"  {f.id:<26} {f.kind:<9} {f.title}")
    print(f"\n{len(specs)} specs, {len(tables)} tables, {len(figures)} figures")
    note = _other_presets_note(specs, status, root, args.preset)
    if note:
        print(note)
    return 0


def show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="spec name")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options.add_resolve(parser)


def show_verb(args: argparse.Namespace) -> int:
    reg = options.registry(args)
    spec = reg.resolve(args.name, preset=args.preset, overrides=args.overrides)
    directory = runs.run_dir_for(spec, options.existing_runs_root(args, default_may_be_missing=True))
    status, has_ckpt = _state(spec, args)
    info = {"spec": spec.to_dict(), "hash": spec.hash, "hash12": spec.hash12,
            "parameters": spec.model.num_parameters(), "run_dir": str(directory),
            "status": status, "checkpoint": has_ckpt, "source": spec.source}
    if args.json:
        print(json.dumps(info))
        return 0
    print(yaml.safe_dump(spec.to_dict(), sort_keys=False, default_flow_style=None, width=120).rstrip())
    print(f"# declared at: {spec.source}")
    print(f"# parameters:  {info['parameters']:,} ({info['parameters'] / 1e6:.1f}M)")
    print(f"# run dir:     {directory}")
    print(f"# status:      {status or 'not run'}{' (checkpoint present)' if has_ckpt else ''}")
    return 0


def validate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reported", default=None, metavar="FILE",
                        help="reported numbers (default: $EXOFORMER_REPORTED or results/paper/reported.yaml)")
    options.add_registry(parser)


def validate_verb(args: argparse.Namespace) -> int:
    summary = validate(options.registry(args), reported=args.reported)
    print(f"ok: {summary['files']} files, {summary['specs']} specs in {summary['groups']} groups, "
          f"{summary['tables']} tables, {summary['figures']} figures, {summary['known']} reported numbers "
          f"({summary['unknown']} unknown cells), {summary['profiles']} profiles")
    return 0


VERBS = [
    options.Verb("list", "list specs, tables and figures (PATTERN: a glob over names)", list_arguments, list_verb),
    options.Verb("show", "print one resolved spec, its hash, parameter count, run directory and status",
                 show_arguments, show_verb),
    options.Verb("validate", "check every registry file, reported.yaml and the profiles, against the schema and "
                 "each other", validate_arguments, validate_verb),
]
