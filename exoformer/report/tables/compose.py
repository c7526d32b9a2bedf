"""One report of the runs: the tables, the claims and the verdicts a reading verb shows, composed in one place.

`compose` is what the reading verbs (exoformer/cli/report.py), the HTML report (report/pages/html.py) and the summary
after `run` (report/pages/summary.py) call: each table reads the preset README "Which runs the reading verbs read"
chooses for its specs (report/reading/selection.py), the claims and verdicts read the preset chosen for every spec a
claim or a paper difference names; every spec is resolved once per preset for the whole report.
Torch-free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from exoformer.registry.registry import Registry
from exoformer.registry.spec import Spec
from exoformer.report.tables.claims import Claim, build_claims
from exoformer.report.reading.selection import Selection, read
from exoformer.report.tables.build import BuiltTable, build_table
from exoformer.report.tables.verdicts import DEFAULT_BOOTSTRAP, Verdict, all_verdicts, paper_differences


@dataclass(kw_only=True, slots=True)
class TableReport:
    built: BuiltTable
    selection: Selection


@dataclass(kw_only=True, slots=True)
class Report:
    tables: dict[str, TableReport] = field(default_factory=dict)
    figures: dict[str, Selection] = field(default_factory=dict)
    """Figure id -> the runs it is drawn from (report/figures.draw)."""
    claims: list[Claim] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    claims_selection: Selection | None = None

    @property
    def notes(self) -> list[str]:
        """The preset lines of the report, once each, in the order they arose."""
        selections = [t.selection for t in self.tables.values()] + [*self.figures.values(), self.claims_selection]
        return list(dict.fromkeys(s.note for s in selections if s is not None and s.note))


def claim_specs(registry: Registry) -> list[str]:
    """The specs the claims and verdicts read: every row of each table a claim or a paper difference names."""
    tables = [read.table for claim in registry.claims.values() for read in claim.reads]
    tables += [d.table for d in paper_differences(registry)]
    return list(dict.fromkeys(name for table in dict.fromkeys(tables) for name in registry.tables[table].spec_names()))


def compose(registry: Registry, runs_root: str | os.PathLike, *, tables: list[str] = (), figures: list[str] = (),
            claims: bool = False, preset: str | None = None, overrides: list[str] | tuple[str, ...] = (),
            n_boot: int = DEFAULT_BOOTSTRAP) -> Report:
    """The tables `tables` (built), the runs of the figures `figures` (drawn by the caller: figures.draw) and,
    with `claims`, the paper's claims and row-difference verdicts."""
    root = Path(runs_root)
    resolved: dict[tuple[str, str | None], Spec | None] = {}
    out = Report()
    for table_id in tables:
        specs = registry.tables[table_id].spec_names() if table_id in registry.tables else []
        selection = read(registry, root, specs, preset=preset, overrides=overrides, what=f"table {table_id}",
                         resolved=resolved)
        built = build_table(registry, table_id, preset=selection.preset, runs_root=root, selection=selection)
        out.tables[table_id] = TableReport(built=built, selection=selection)
    for figure_id in figures:
        out.figures[figure_id] = read(registry, root, registry.figure_specs(registry.figures[figure_id]),
                                      preset=preset, overrides=overrides, what=f"figure {figure_id}", check=False,
                                      resolved=resolved)
    if claims:
        selection = read(registry, root, claim_specs(registry), preset=preset, overrides=overrides, what="claims",
                         resolved=resolved)
        out.claims_selection = selection
        out.claims = build_claims(registry, selection=selection)
        out.verdicts = all_verdicts(registry, selection=selection, runs_root=str(root), n_boot=n_boot)
    return out
