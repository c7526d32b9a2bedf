"""Does our difference between two rows replicate the paper's? One line per claim, from exoformer/report/stats/replication.py.

The paper's claims that are differences between two rows are the `difference` claims of experiments/claims.yaml
(first row - second row in one column, e.g. Dynamic E-ExoFormer - Gated Attention = +1.47 avg6). For each, from
our runs (source "ours"; seed k of one row paired with seed k of the other, s42 with s42, ...):
- per seed and item, both rows' scores: lm-eval's per-document results (exoformer.eval.samples) for an accuracy
  column (avg6 weighs its six tasks equally, as the table does), the cell itself (one item) for a perplexity;
- replication.compare_all over the claims a command prints (one table's for `diff TABLE`, every table's for
  `claims` and the HTML report): our mean difference with a t interval over the claim's own paired seeds
  (seeds - 1 df), its size as an interval of ours - the paper's single-seed value (with the claim's declared
  tolerance, claims.yaml `tolerance`), Holm across those claims (one family), power at the paper's effect and
  the seeds that would give it, and the item-sampling figure beside it; the seed
  variance pooled over the table's rows only as a note ("if all rows share one spread: ..."), since one row
  scattering more than the others makes the pooled interval undercover. The rules: docs/replication.md.
With a sequential design declared for the table (`budget TABLE --looks K`, `<runs root>/designs/TABLE.yaml`), each
claim's verdict is the design's at its current look, from report/stats/sequential.py alone: the declared seeds and
boundaries, Holm within the spending over the design's claims (docs/replication.md "Spending a fixed budget"); the
fixed-seed verdict above stays beside it, not the basis for stopping.
A verdict from cells that are not comparable with the paper's recipe (another preset, --set, a limited
evaluation: report/reading/recipe.py) is marked † with what differs: at smoke scale it judges the harness, not the paper.
Torch-free (numpy/scipy only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from exoformer.eval.suites import SMOKE_PREFIX
from exoformer.errors import UserError
from exoformer.registry.registry import Registry
from exoformer.registry.reported import source_legend
from exoformer.registry.tables import TASKS, Table
from exoformer.report.stats import replication as rep
from exoformer.report.stats import sequential as sq
from exoformer.report.reading.selection import Picked, Selection
from exoformer.report.tables.build import (
    AVERAGE,
    MARK,
    BuiltTable,
    seed_cell,
    build_table,
    fold,
    plural,
    rows_named,
    run_values,
)

DEFAULT_BOOTSTRAP = rep.DEFAULT_ITEM_RESAMPLES
RESAMPLE_SEED = 0
"""The item resampling's random generator seed: the same runs give the same figure."""


def check_bootstrap(value: object, *, where: str = "--bootstrap") -> int:
    """The item-resample count of --bootstrap (docs/input-limits.md), else a UserError."""
    text = str(value).strip()
    return rep.check_item_resamples(int(text) if text.isdigit() else value, where=where)


@dataclass(kw_only=True, slots=True, frozen=True)
class PaperDifference:
    table: str
    minuend: str
    subtrahend: str
    column: str
    value: float
    source: str
    margin: float | None = None
    """Equivalence margin of a "no loss" / "matches" claim (claims.yaml `margin`); None: directional."""
    tolerance: float | None = None
    """Between-implementation tolerance of the size (claims.yaml `tolerance`); None: replication's default."""


@dataclass(kw_only=True, slots=True)
class Verdict:
    claim: PaperDifference
    comparison: rep.Comparison | None = None
    """None: the two rows have no paired seed with a value."""
    why: str = ""
    """What differs from the paper's recipe when the cells are not comparable."""
    sources: dict = field(default_factory=dict)
    """reported.yaml's source tags (registry.reported.Source), for the legend of the paper values' tags."""
    note: str = ""
    """The pooled figure ("if all rows share one spread: ..."), a note beside the verdict, never its basis."""
    family: str = ""
    """The Holm family the verdict was adjusted in, e.g. "all 6 claims of 2 tables"."""
    look: str = ""
    """The declared sequential design's verdict at the current look (sequential.verdict_line); "" without one."""
    design: str = ""
    """The table's declared design in one line (its look, the claims stopped); "" without one."""
    look_state: str = ""
    """The claim's state at the design's current look, in one word (LOOK_STATES); "" without a design or outside
    it. The HTML row takes its colour from it, since the design's verdict is the one that counts."""

    @property
    def label(self) -> str:
        c = self.claim
        return f"{c.table}: {c.minuend} - {c.subtrahend}, {c.column}"

    @property
    def ours(self) -> float | None:
        return None if self.comparison is None else self.comparison.estimate

    @property
    def seeds(self) -> int:
        return 0 if self.comparison is None else self.comparison.seeds

    @property
    def verdict(self) -> str:
        """The verdict's keyword (replication.VERDICTS), or "not run"."""
        return "not run" if self.comparison is None else self.comparison.head


def paper_differences(registry: Registry) -> list[PaperDifference]:
    """The paper's row differences: the `difference` claims of experiments/claims.yaml."""
    out = []
    for claim in registry.claims.values():
        if claim.compare == "difference":
            minuend, subtrahend = claim.reads
            paper = claim.paper[0]
            out.append(PaperDifference(table=minuend.table, minuend=minuend.row, subtrahend=subtrahend.row,
                                       column=minuend.metric, value=float(paper.value), source=paper.source,
                                       margin=claim.margin, tolerance=claim.tolerance))
    return out


def column_maxima(registry: Registry) -> dict[str, dict[str, float]]:
    """table -> column -> the paper's best value of the column (min for ppl): the `column_max` claims."""
    out: dict[str, dict[str, float]] = {}
    for claim in registry.claims.values():
        if claim.compare == "column_max":
            out.setdefault(claim.reads[0].table, {})[claim.reads[0].metric] = float(claim.paper[0].value)
    return out


# ------------------------------------------------------------------------------------------------ computing

def _per_sample(run_dir: str, tasks: tuple[str, ...], convention: dict[str, str]) -> rep.ItemScores | None:
    """task -> {doc id: 0/1 score} of `tasks` in the table's metric convention; None without per-sample results."""
    from exoformer.eval.samples import read_samples

    samples = read_samples(run_dir)
    if samples is None:
        return None
    by_task = {name.removeprefix(SMOKE_PREFIX): body for name, body in samples.items()}
    out = {}
    for task in tasks:
        body = by_task.get(task)
        values = None if body is None else body.get(convention[task])
        if values is None or any(v is None for v in values):
            return None
        out[task] = dict(zip(body["doc_id"], values, strict=True))
    return out


@dataclass(kw_only=True, slots=True)
class Claimed:
    """One claim's paired seeds: (a, b) per seed and item for replication.compare_all, and the items' tasks."""

    claim: PaperDifference
    a: np.ndarray
    b: np.ndarray
    strata: np.ndarray | None
    why: str
    order: tuple[int, ...] = ()
    """Each pair's seed index (its position in the rows' spec lists): a design's look needs the first n."""


def _seed_value(picked: Picked | None, column: str, spec: str, table: Table) -> float | None:
    """One seed's value of `column`, read as the table reads a cell; None without a run or a value."""
    got = None if picked is None else seed_cell(run_values(picked.rows), column, table.convention, spec, table)
    return None if got is None else float(got[0])


def _row_values(built: BuiltTable, selection: Selection, column: str) -> dict[str, list[float | None]]:
    """row id -> its per-seed values of `column` (None where a seed has no run or no value)."""
    return {row.id: [_seed_value(picked, column, row.specs[k], built.table)
                     for k, picked in enumerate(selection.row_runs(row.specs))] for row in built.table.rows}


def claimed_pairs(built: BuiltTable, selection: Selection, claim: PaperDifference) -> Claimed | None:
    """The paired seeds of one claim; None when no seed pair has both values."""
    table = built.table
    rows = {r.id: r for r in table.rows}
    a_row, b_row = rows[claim.minuend], rows[claim.subtrahend]
    pairs, order = [], []
    for k, (ra, rb) in enumerate(zip(selection.row_runs(a_row.specs), selection.row_runs(b_row.specs))):
        va = _seed_value(ra, claim.column, a_row.specs[k], table)
        vb = _seed_value(rb, claim.column, b_row.specs[k], table)
        if va is not None and vb is not None:
            pairs.append((ra, rb, va, vb))
            order.append(k)
    if not pairs:
        return None
    whys = [c.why for c in (built.cell(a_row, claim.column), built.cell(b_row, claim.column)) if c.why]
    why = "; ".join(dict.fromkeys(whys))
    tasks = TASKS if claim.column == AVERAGE else (claim.column,) if claim.column in TASKS else ()
    if tasks:
        a_items = [_per_sample(str(ra.path), tasks, table.convention) for ra, *_ in pairs]
        b_items = [_per_sample(str(rb.path), tasks, table.convention) for _, rb, *_ in pairs]
        if all(x is not None for x in [*a_items, *b_items]):
            a, b, strata = rep.paired_items(a_items, b_items, tasks=list(tasks))
            return Claimed(claim=claim, a=a, b=b, strata=strata, why=why, order=tuple(order))
    return Claimed(claim=claim, a=np.array([[va] for *_, va, _ in pairs]), b=np.array([[vb] for *_, vb in pairs]),
                   strata=None, why=why, order=tuple(order))


def claim_note(built: BuiltTable, selection: Selection, claimed: Claimed) -> str:
    """The pooled figure of a claim as a note (replication.pooled_note) over the table's rows that have its K
    seeds; "" with one seed or fewer than two such rows."""
    k = claimed.a.shape[0]
    if k < 2:
        return ""
    rows = {rid: v[:k] for rid, v in _row_values(built, selection, claimed.claim.column).items()
            if len(v) >= k and all(x is not None for x in v[:k])}
    if len(rows) < 2:
        return ""
    return rep.pooled_note((claimed.a - claimed.b).mean(axis=1), np.array(list(rows.values())), list(rows))


@dataclass(kw_only=True, slots=True)
class _TableClaims:
    built: BuiltTable
    verdicts: list[Verdict]
    claimed: list[Claimed | None]
    notes: list[str]


def _table_claims(registry: Registry, built: BuiltTable, selection: Selection) -> _TableClaims:
    claims = [c for c in paper_differences(registry) if c.table == built.table.id]
    claimed = [claimed_pairs(built, selection, claim) for claim in claims]
    notes = ["" if c is None else claim_note(built, selection, c) for c in claimed]
    return _TableClaims(built=built, verdicts=[Verdict(claim=claim, sources=built.sources) for claim in claims],
                        claimed=claimed, notes=notes)


def _family_name(claims: int, tables: int) -> str:
    return (f"the {plural(claims, 'claim')} of {plural(tables, 'table')}" if tables == 1 else
            f"all {claims} claims of {tables} tables")


def _judge(registry: Registry, tables: list[_TableClaims], *, n_boot: int) -> list[Verdict]:
    """Every claim of `tables` compared in one Holm family (compare_all), each on its own paired seeds."""
    family = _family_name(sum(len(t.verdicts) for t in tables), len(tables))
    have = [(t, i, c) for t in tables for i, c in enumerate(t.claimed) if c is not None]
    if have:
        kinds = ["accuracy" if registry.metrics[c.claim.column].better == "higher" else "loss" for *_, c in have]
        comparisons = rep.compare_all([(c.a, c.b, c.claim.value) for *_, c in have], kind=kinds,
                                      margins=[c.claim.margin for *_, c in have],
                                      tolerances=[c.claim.tolerance for *_, c in have],
                                      item_resamples=n_boot, item_strata=[c.strata for *_, c in have],
                                      resample_seed=RESAMPLE_SEED)
        for (t, i, c), comparison in zip(have, comparisons, strict=True):
            t.verdicts[i] = Verdict(claim=c.claim, comparison=comparison, why=c.why, sources=t.built.sources,
                                    note=t.notes[i])
    out = [v for t in tables for v in t.verdicts]
    for v in out:
        v.family = family
    for t in tables:
        design_verdicts(t)
    return out


# ------------------------------------------------------------------------------------------------ a declared design

def _first_seeds(order: tuple[int, ...]) -> int:
    """How many of the first seeds (indices 0, 1, ...) are all paired: a look reads seeds in their declared order."""
    n = 0
    while n < len(order) and order[n] == n:
        n += 1
    return n


def design_seeds(design: sq.Design, claims: list[PaperDifference], claimed: list[Claimed | None], *,
                 runs_root: str) -> tuple[list[int], list[np.ndarray], list[int]]:
    """For each claim of `design`: its index in `claims`, its per-seed differences (1, n) over the first seeds
    that are all paired (the input of sequential.sequential_verdicts), and how many paired seeds are run."""
    where = {(c.minuend, c.subtrahend, c.column): i for i, c in enumerate(claims)}
    index, diffs, run = [], [], []
    for dc in design.claims:
        i = where.get((dc.minuend, dc.subtrahend, dc.column))
        if i is None:
            raise UserError(f"the declared design's claim {dc.label} is no longer a paper difference of "
                            f"{design.table}", where=str(sq.design_path(runs_root, design.table)),
                            fix="restore the claim in experiments/claims.yaml, or a new design in a fresh runs root")
        c = claimed[i]
        d = np.zeros(0) if c is None else (c.a - c.b).mean(axis=1)  # the verdict's per-seed differences
        index.append(i)
        diffs.append(d[None, :0 if c is None else _first_seeds(c.order)])
        run.append(d.size)
    return index, diffs, run


def design_verdicts(t: _TableClaims) -> None:
    """Each claim's verdict at the current look of the table's declared design, when the runs root holds one.

    The current look is the last one whose seeds every claim still open has (the Holm levels of the design are
    shared by its claims, so a look is taken for all at once); seeds run beyond it wait for that look."""
    root = t.built.runs_root
    design = sq.read_design(root, t.built.table.id) if root else None
    if design is None:
        return
    index, diffs, run = design_seeds(design, [v.claim for v in t.verdicts], t.claimed, runs_root=root)
    outcome = sq.sequential_verdicts(design, diffs)
    k = outcome.looks_taken
    for j, (i, dc) in enumerate(zip(index, design.claims, strict=True)):
        t.verdicts[i].look = sq.verdict_line(design, outcome, j) + _waiting(design, dc, outcome, j, run[j])
        t.verdicts[i].look_state = _look_state(design, outcome, j)
    states = [sq.STATE_WORDS[int(x)] for x in outcome.state[0]]
    counts = ", ".join(f"{states.count(w)} {w}" for w in ("decided", "futile", "continue") if w in states)
    head = (f"declared sequential design of {design.table} (digest {design.digest[:12]}): look {k} of "
            f"{design.looks}; {counts}; {design.spending} spending, Holm within it over its "
            f"{plural(len(design.claims), 'claim')} (docs/replication.md \"Spending a fixed budget\")")
    for v in t.verdicts:
        v.design = head
        if not v.look:
            v.look = "not in the declared design (read the fixed-seed verdict only)"


LOOK_STATES = ("decided", "equivalent", "contradicts", "futile", "undecided", "continue")
"""A claim's state at the current look: decided (the paper's direction), equivalent (within its margin),
contradicts (decided the other way), futile, undecided at the last look, or continue (more looks to come)."""


def _look_state(design: sq.Design, outcome: sq.Outcome, j: int) -> str:
    state = int(outcome.state[0, j])
    if state == sq.DECIDED:
        claim = design.claims[j]
        if claim.margin is not None:
            return "equivalent"
        return "decided" if outcome.sign[0, j] == math.copysign(1.0, claim.paper) else "contradicts"
    if state == sq.FUTILE:
        return "futile"
    return "undecided" if outcome.looks_taken == design.looks else "continue"


def _waiting(design: sq.Design, dc: sq.DesignClaim, outcome: sq.Outcome, j: int, run: int) -> str:
    """Seeds run beyond the current look: unused until their look is complete (or ever, once stopped)."""
    k, stopped = outcome.looks_taken, outcome.state[0, j] != sq.OPEN
    used = dc.pairs[int(outcome.look[0, j])] if stopped else dc.pairs[k - 1] if k else 0
    if run <= used:
        return ""
    extra = plural(run - used, "paired seed")
    if stopped:
        return f" ({extra} run beyond it, not used: the claim has stopped)"
    if k == design.looks:
        return f" ({extra} beyond the design's last look, not used)"
    return (f" ({extra} run beyond look {k} not used until look {k + 1} is complete: {dc.pairs[k]} paired seeds "
            "for every claim still open)")


def table_verdicts(registry: Registry, built: BuiltTable, *, n_boot: int = DEFAULT_BOOTSTRAP,
                   selection: Selection | None = None) -> list[Verdict]:
    """The Verdicts of the paper's differences within `built`'s table (`diff TABLE`), Holm-adjusted as one family."""
    return _judge(registry, [_table_claims(registry, built, selection or built.selection)], n_boot=n_boot)


def all_verdicts(registry: Registry, *, selection: Selection, runs_root: str = "",
                 n_boot: int = DEFAULT_BOOTSTRAP) -> list[Verdict]:
    """The Verdicts of every paper difference, table by table, Holm-adjusted as one family over all of them (the
    `claims` verb and the HTML report print them under one headline), from the runs `selection` picks."""
    tables = []
    for table_id in dict.fromkeys(c.table for c in paper_differences(registry)):
        built = build_table(registry, table_id, preset=selection.preset, runs_root=runs_root, selection=selection)
        tables.append(_table_claims(registry, built, selection))
    return _judge(registry, tables, n_boot=n_boot)


def headline(verdicts: list[Verdict], *, family: bool = False) -> str:
    """"k of m claims replicate" over the verdicts with runs (Holm-adjusted in one family), then how many claims
    have no runs; with `family`, the Holm family named ("Holm over all 6 claims of 2 tables")."""
    compared = [v.comparison for v in verdicts if v.comparison is not None]
    text = rep.headline(compared) if compared else "no claim has runs"
    missing = len(verdicts) - len(compared)
    text += f"; {plural(missing, 'claim')} not run" if missing else ""
    named = next((v.family for v in verdicts if v.family), "")
    return text + (f"; Holm over {named}" if family and named else "")


def tally(verdicts: list[Verdict]) -> list[tuple[str, int]]:
    """(verdict keyword, number of claims) in replication.VERDICTS order, then "not run"; only those that occur."""
    counts = {v: sum(x.verdict == v for x in verdicts) for v in (*rep.VERDICTS, "not run")}
    return [(v, n) for v, n in counts.items() if n]


# ------------------------------------------------------------------------------------------------ rendering

def verdict_rows(verdicts: list[Verdict]) -> list[dict[str, str]]:
    """One mapping per verdict with the shown texts (shared by the text and HTML renderings): the claim, the
    paper's value and source, the line (ours [interval], the interval of ours - paper's, the verdict, the seeds
    needed), how each interval was computed, and what differs from the paper's recipe."""
    out = []
    for v in verdicts:
        c = v.comparison
        out.append({"claim": v.label, "paper": f"{v.claim.value:+.2f} [{v.claim.source}]",
                    "line": "not run" if c is None else c.line() + (f" {MARK}" if v.why else ""),
                    "verdict": v.verdict, "method": "" if c is None else c.methods(), "why": v.why,
                    "note": v.note, "look": v.look + (f" {MARK}" if v.look and v.why else ""), "design": v.design,
                    "look_state": v.look_state})
    return out


RULE = ("replicates = same direction, significant after Holm, and the same size: the 95% interval of ours - paper's "
        "(the paper's one seed, our seeds, a declared tolerance) holds 0 and rules out 3x the paper's effect; "
        "size undetermined = the direction holds, the size interval holds 0 but not narrow enough to rule out 3x; "
        "direction only = the direction holds, the size shown different; contradicts = significant the other way; "
        "not powered = not significant and the paper's effect below the minimum detectable effect; inconclusive = "
        "not significant though powered; one seed = no verdict about the architecture (docs/replication.md)")


def why_lines(rows: list[dict[str, str]]) -> list[tuple[str, str]]:
    """(the claims, what differs) once per distinct reason (tables.fold): at smoke scale every claim shares one."""
    return [(rows_named(claims, "claims", "; "), why) for claims, why in fold([(r["claim"], r["why"]) for r in rows
                                                                              if r["why"]])]


def render_verdicts(verdicts: list[Verdict], *, family: bool = False) -> list[str]:
    """Text lines: the headline (with `family`, naming the Holm family: `claims`), one line per claim with its
    methods and the pooled note, then the † notes and the rule."""
    if not verdicts:
        return []
    rows = verdict_rows(verdicts)
    lines = [f"row differences claimed by the paper: {headline(verdicts, family=family)}"]
    lines.extend(dict.fromkeys(r["design"] for r in rows if r["design"]))
    for r in rows:
        if r["look"]:  # the design's verdict leads; the fixed-seed one is beside it, never the stopping rule
            lines.append(f"  {r['claim']}: {r['look']}")
            lines.append(f"      (fixed-seed verdict, not the design's: {r['line']})")
        else:
            lines.append(f"  {r['claim']}: {r['line']}")
        if r["method"]:
            lines.append(f"      ({r['method']})")
        if r["note"]:
            lines.append(f"      (note, not the verdict's basis: {r['note']})")
    lines.extend(f"{MARK} {claims}: not comparable: {why}" for claims, why in why_lines(rows))
    lines.append(f"verdicts: {RULE}")
    return lines


def maxima_sources(built: BuiltTable) -> dict[str, str]:
    """column -> the source tag of the paper's column maximum of `built`'s table (the `column_max` claims)."""
    registry = built.selection.registry if built.selection is not None else None
    if registry is None:
        return {}
    return {claim.reads[0].metric: claim.paper[0].source for claim in registry.claims.values()
            if claim.compare == "column_max" and claim.reads[0].table == built.table.id}


def render_maxima(built: BuiltTable, maxima: dict[str, float], better: dict[str, str]) -> list[str]:
    """Our best value of each column with a paper column maximum (min where lower is better) beside it. The paper's
    values' source tag (explained by diff's legend) is named once in the heading when one source gives them all
    ("[WIZ]"), else beside each value."""
    lines = []
    tags = {column: tag for column, tag in maxima_sources(built).items() if column in maxima and tag}
    one = set(tags.values()) if len(set(tags.values())) == 1 and len(tags) == len(maxima) else None
    for column, paper in maxima.items():
        cells = [(row.id, built.cell(row, column)) for row in built.table.rows]
        have = [(rid, c) for rid, c in cells if c.value is not None]
        tag = f" [{tags[column]}]" if tags.get(column) and not one else ""
        if not have:
            lines.append(f"  {column:<14} paper {paper:.2f}{tag}  ours not run")
            continue
        rid, best = (min if better.get(column) == "lower" else max)(have, key=lambda rc: rc[1].value)
        mark = f" {MARK}" if not best.comparable else ""
        lines.append(f"  {column:<14} paper {paper:.2f}{tag}  ours {best.value:.2f} ({rid}){mark}  "
                     f"delta {best.value - paper:+.2f}")
    if lines:
        source = f", all from [{next(iter(one))}]" if one else ""
        lines.insert(0, f"column maxima (the paper's best per column, row unknown; min for lower-is-better{source}):")
    return lines


def _line_html(r: dict[str, str]) -> str:
    """The verdict cell: a declared design's line first, the fixed-seed verdict beside it."""
    import html

    if not r["look"]:
        return html.escape(r["line"])
    return (f'<span class="look">{html.escape(r["look"])}</span><br><span class="note">fixed-seed verdict, not the '
            f"design's: {html.escape(r['line'])}</span>")


def _row_class(r: dict[str, str]) -> str:
    """A verdict row's colour: the design's state at its look where one is declared, else the fixed-seed verdict."""
    import html

    kind = f"look-{r['look_state']}" if r["look_state"] else r["verdict"].replace(" ", "-")
    return f"verdict-{html.escape(kind)}"


def verdicts_html(verdicts: list[Verdict]) -> str:
    """The verdicts as an HTML section (the report's "Replication verdicts"), its headline first."""
    import html

    if not verdicts:
        return ""
    rows = verdict_rows(verdicts)
    head = "".join(f"<th>{h}</th>" for h in ("claim", "paper", "ours [95% interval], ours - paper's [95%]: verdict",
                                             "method"))
    body = "".join(f'<tr class="{_row_class(r)}"><td class="label">'
                   f'{html.escape(r["claim"])}</td><td>{html.escape(r["paper"])}</td><td>{_line_html(r)}'
                   f'</td><td>{html.escape(r["method"])}'
                   + (f'<br><span class="note">note, not the verdict\'s basis: {html.escape(r["note"])}</span>'
                      if r["note"] else "") + "</td></tr>" for r in rows)
    notes = "".join(f'<p class="note">{MARK} {html.escape(claims)}: not comparable: {html.escape(why)}</p>'
                    for claims, why in why_lines(rows))
    tags = list(dict.fromkeys(v.claim.source for v in verdicts if v.claim.source))
    legend = source_legend(tags, next((v.sources for v in verdicts if v.sources), {}))
    if legend:
        items = "".join(f"<li>paper source {html.escape(line)}</li>" for line in legend)
        notes += (f'<div class="note sources" data-sources="{html.escape(" ".join(tags), quote=True)}"><ul>{items}'
                  "</ul></div>")
    named = next((v.family for v in verdicts if v.family), "")
    family = f'<p class="note family">Holm over {html.escape(named)} (one family)</p>' if named else ""
    family += "".join(f'<p class="design">{html.escape(head)}</p>'
                      for head in dict.fromkeys(r["design"] for r in rows if r["design"]))
    chips = "".join(f'<span class="chip verdict-{html.escape(v.replace(" ", "-"))}">{html.escape(v)}: '
                    f'{plural(n, "claim")}</span>' for v, n in tally(verdicts))
    return (f'<section id="verdicts"><h2>Replication verdicts</h2><p class="headline">'
            f'{html.escape(headline(verdicts))}</p>{family}<p class="tally">{chips}</p><table class="verdicts">'
            f'<tr>{head}</tr>{body}</table>{notes}<p class="note">{html.escape(RULE)}</p></section>')
