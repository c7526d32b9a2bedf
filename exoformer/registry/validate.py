"""Validation of the whole registry: every registry file, every spec under every preset, tables, figures,
reported.yaml, profiles.

Checks the files against the schema and against each other: every table row and figure names an existing
spec, every reported number names a declared table cell, every declared cell is in reported.yaml, no two
specs share a config (the same run twice is wasted compute), every registry file is reached by include:, every
decay branch can start exactly from its parent (exoformer/registry/ladders.py branch_parent).
"""

from __future__ import annotations

from exoformer.errors import UserError, did_you_mean
from exoformer.registry.claims_schema import check_claims
from exoformer.registry.figure_kinds import check_figure_kinds
from exoformer.registry.ladders import branch_parent
from exoformer.registry.profiles import list_profiles, load_profile
from exoformer.registry.reported import load_reported
from exoformer.registry.spec import PROBES
from exoformer.registry.tables import TASKS

LOGGED_SERIES = ("loss", "val_loss", "grad_norm", "lr", "tokens_per_s")


def validate(reg, *, reported=None) -> dict:
    """Raise UserError at the first problem; return counts when everything holds."""
    for path in reg.yaml_files_in_directory():
        if path not in reg.files:
            raise UserError("registry file is not reached from registry.yaml", where=reg.display(path),
                            fix="add it to an include: list (or move it out of the registry directory)")
    for preset in reg.presets.values():
        if preset.profile is not None and preset.profile not in list_profiles():
            raise UserError(f"preset {preset.name!r} names unknown profile {preset.profile!r}", where=preset.source,
                            fix=did_you_mean(preset.profile, list_profiles()))
    seen: dict[str, str] = {}
    for name, entry in reg.specs.items():
        spec = reg.resolve(name)
        other = seen.get(spec.hash12)  # equal configs, or (never seen yet) a 48-bit prefix collision
        if other is not None:
            raise UserError(f"spec {name!r} has the same config (hash {spec.hash12}) as {other!r}",
                            where=entry.source, fix=f"drop it and use {other!r} in tables instead")
        seen[spec.hash12] = name
        if spec.train.is_branch:  # a decay branch starts exactly where its parent keeps a checkpoint
            branch_parent(reg, spec)
        for preset in reg.presets:
            if preset != spec.preset:
                reg.resolve(name, preset=preset)
    for table in reg.tables.values():
        for col in table.columns:
            if col not in reg.metrics:
                raise UserError(f"table {table.id!r}: unknown column {col!r}", where=table.source,
                                fix=did_you_mean(col, reg.metrics))
        for row in table.rows:
            for spec_name in row.specs:
                if spec_name not in reg.specs:
                    raise UserError(f"table {table.id!r} row {row.id!r} names missing spec {spec_name!r}",
                                    where=row.source, fix=did_you_mean(spec_name, reg.specs))
    series_ok = (set(LOGGED_SERIES) | {f"eval.{t}" for t in (*TASKS, "avg6")} | {f"analysis.{p}" for p in PROBES})
    for fig in reg.figures.values():
        for spec_name in reg.figure_specs(fig):
            if spec_name not in reg.specs:
                raise UserError(f"figure {fig.id!r} names missing spec {spec_name!r}", where=fig.source,
                                fix=did_you_mean(spec_name, reg.specs))
        for series in fig.series:
            if series not in series_ok:
                raise UserError(f"figure {fig.id!r}: unknown series {series!r}", where=fig.source,
                                fix=did_you_mean(series, series_ok))
    check_figure_kinds(reg)
    check_claims(reg)
    cells = load_reported(reg, reported)
    profiles = list_profiles()
    for name in profiles:
        load_profile(name)
    return {"files": len(reg.files), "specs": len(reg.specs), "groups": len(reg.groups), "tables": len(reg.tables),
            "figures": len(reg.figures), "known": sum(v is not None for v in cells.values()),
            "unknown": sum(len(t.rows) * len(t.columns) for t in reg.tables.values())
            - sum(v is not None for v in cells.values()), "profiles": len(profiles)}
