"""Which runs form a table's ladder: a table's `ladders:` names groups (experiments/tables.yaml), and a spec of such
a group belongs to the row whose paper run (its first spec) has the same variant (docs/forecast.md).

So the ladder is declared once, as data: the rows of experiments/ladder.yaml's sweeps are matched to the table's
rows by variant, and no reader names a row or a spec. A ladder's decay branches (`train.branch_from`) name their
parent spec; `branch_parent` resolves it as the branch is resolved and says why it cannot start there. Torch-free.
"""

from __future__ import annotations

from typing import Any

from exoformer.errors import UserError, did_you_mean
from exoformer.train.schedule import branch_problem

Registry = Any
"""exoformer.registry.registry.Registry, which calls check_ladders while it loads (so no import of it here)."""


def _variant(registry: Registry, name: str) -> str:
    return str(registry.specs[name].layer["variant"].value)


def ladder_rows(registry: Registry, table_id: str, group: str) -> dict[str, tuple[str, ...]]:
    """Row id -> the specs of `group` that are that row's ladder (rows in table order); UserError when the table
    does not declare the group, or when a row has no ladder spec or shares its variant with another row."""
    table = registry.tables[table_id]
    if group not in table.ladders:
        raise UserError(f"table {table_id} declares no ladder {group!r} (its ladders: {list(table.ladders) or 'none'})",
                        where=table.source, fix=did_you_mean(group, table.ladders) if table.ladders else
                        f"add ladders: [{group}] to table {table_id} in experiments/tables.yaml")
    members = registry.groups[group].specs
    by_variant: dict[str, list[str]] = {}
    for name in members:
        by_variant.setdefault(_variant(registry, name), []).append(name)
    out: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    for row in table.rows:
        variant = _variant(registry, row.specs[0]) if row.specs[0] in registry.specs else None
        if variant in seen:
            raise UserError(f"rows {seen[variant]!r} and {row.id!r} of table {table_id} share variant {variant!r}: "
                            f"ladder {group} cannot tell their runs apart", where=table.source,
                            fix="give the ladder to a table whose rows differ in variant")
        seen[str(variant)] = row.id
        specs = tuple(by_variant.get(str(variant), ()))
        if not specs:
            raise UserError(f"ladder {group} has no spec of variant {variant!r} (row {row.id!r} of table {table_id})",
                            where=registry.groups[group].source, fix=f"add variant {variant} to the ladder's sweeps")
        out[row.id] = specs
    return out


def check_ladders(registry: Registry) -> None:
    """Every declared ladder names a group and covers every row of its table."""
    for table in registry.tables.values():
        for group in table.ladders:
            if group not in registry.groups:
                raise UserError(f"table {table.id} names ladder {group!r}, which is not a group", where=table.source,
                                fix=did_you_mean(group, registry.groups))
            ladder_rows(registry, table.id, group)


def check_branches(registry: Registry) -> None:
    """Every decay branch names another spec of the registry as its parent."""
    for name, entry in registry.specs.items():
        parent = entry.layer.get("train.branch_from")
        if parent is None or parent.value is None:
            continue
        if parent.value == name or parent.value not in registry.specs:
            raise UserError(f"spec {name} branches from {parent.value!r}, which is not another spec",
                            where=parent.origin, fix=did_you_mean(str(parent.value), registry.specs))


def branch_parent(registry: Registry, spec: Any, spec_sets: list[str] | tuple[str, ...] = ()) -> Any:
    """The resolved parent of decay branch `spec` (same preset, same `--set`); UserError naming the branch when it
    cannot start from that parent's checkpoint exactly (exoformer/train/schedule.py branch_problem)."""
    parent = registry.resolve(spec.train.branch_from, preset=spec.preset, overrides=spec_sets)
    problem = branch_problem(parent.train, spec.train)
    if problem is None and parent.model != spec.model:
        problem = "its model differs from the parent's"
    if problem is not None:
        raise UserError(f"decay branch {spec.name} cannot start from {parent.name} at step {spec.train.branch_step}: "
                        f"{problem}", where=spec.source, fix="give the branch its parent's recipe (only train.steps "
                        "differs) and a start where its decay begins")
    return parent
