"""Does our difference between two rows replicate the paper's? A 95% interval and a verdict per claim.

The paper's claims that are differences between two rows are the `differences` of results/paper/reported.yaml
(minuend row - subtrahend row in one column, e.g. Dynamic E-ExoFormer - Gated Attention = +1.47 avg6). For
each, from our runs (source "ours"; seed k of one row paired with seed k of the other, s42 with s42, ...):
- our difference: the mean over the paired seeds of (minuend's cell - subtrahend's cell), in the table's
  display units (% for accuracies) and metric convention;
- its 95% interval:
  * accuracy columns (tasks, avg6): a paired bootstrap on lm-eval's per-sample results (kept by the evaluate
    stage, exoformer.eval.samples): each replicate redraws the documents of every task with replacement, the
    same documents for both rows (they answered the same questions), and, when there are two or more seed
    pairs, redraws the seed pairs too; the interval is the 2.5th-97.5th percentile of the replicates;
  * other columns (val_ppl: one deterministic pass, no items to redraw) and accuracy runs without per-sample
    results: a t interval over the seed pairs (mean +- t_{0.975, K-1} sd / sqrt(K)); with one seed pair there
    is no interval;
- the verdict:
  * replicates: the interval excludes 0 on the side of the paper's difference (our difference is
    significantly of the paper's sign);
  * contradicts: the interval excludes 0 on the other side;
  * inconclusive: the interval contains 0, or there is no interval (one seed of a metric without items).
  Whether the paper's value itself lies inside our interval is shown beside the verdict ("paper inside" /
  "paper outside"): a replication of the sign need not match the size.
A verdict from cells that are not comparable with the paper's recipe (another preset, --set, a limited
evaluation: report/recipe.py) is marked † with what differs: at smoke scale it judges the harness, not the paper.
Torch-free (numpy only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from exoformer.errors import UserError
from exoformer.limits import check_option
from exoformer.eval.suites import SMOKE_PREFIX
from exoformer.registry.registry import Registry
from exoformer.registry.reported import load_reported, reported_document
from exoformer.registry.tables import TASKS
from exoformer.report.tables import AVERAGE, MARK, BuiltTable, _per_seed, build_table, pick_runs

REPLICATES, CONTRADICTS, INCONCLUSIVE = "replicates", "contradicts", "inconclusive"
DEFAULT_BOOTSTRAP = 1000
BOOTSTRAP_SEED = 0
"""The bootstrap's random generator seed: the same runs give the same interval."""
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
"""Two-sided 95% Student t quantiles by degrees of freedom (more: 1.96 + 2.4/df, within 1% for df > 10)."""


def check_bootstrap(value: object, *, where: str = "--bootstrap") -> int:
    """The bootstrap replicate count: a positive integer (given as int or digits), else a UserError."""
    text = str(value).strip()
    if isinstance(value, bool) or not (isinstance(value, int) or text.isdigit()) or int(text) < 1:
        raise UserError(f"the bootstrap count must be a positive integer, got {value!r}", where=where,
                        fix="--bootstrap 1000")
    return check_option(int(text), "--bootstrap")


@dataclass(kw_only=True, slots=True, frozen=True)
class PaperDifference:
    table: str
    minuend: str
    subtrahend: str
    column: str
    value: float
    source: str
    note: str = ""


@dataclass(kw_only=True, slots=True)
class Verdict:
    claim: PaperDifference
    ours: float | None = None
    low: float | None = None
    high: float | None = None
    seeds: int = 0
    method: str = "not run"
    verdict: str = INCONCLUSIVE
    why: str = ""
    """What differs from the paper's recipe when the cells are not comparable."""

    @property
    def label(self) -> str:
        c = self.claim
        return f"{c.table}: {c.minuend} - {c.subtrahend}, {c.column}"

    @property
    def paper_inside(self) -> bool | None:
        if self.low is None or self.high is None:
            return None
        return self.low <= self.claim.value <= self.high


def paper_differences(registry: Registry, reported_file: str | None = None) -> list[PaperDifference]:
    """reported.yaml's `differences` (validated by exoformer.registry.reported.load_reported)."""
    load_reported(registry, reported_file)
    data = reported_document(registry, reported_file)
    out = []
    for item in data.get("differences") or []:
        table, minuend, column = str(item["minuend"]).split("/")
        _, subtrahend, _ = str(item["subtrahend"]).split("/")
        out.append(PaperDifference(table=table, minuend=minuend, subtrahend=subtrahend, column=column,
                                   value=float(item["value"]), source=str(item.get("source", "")),
                                   note=str(item.get("note", ""))))
    return out


def column_maxima(registry: Registry, reported_file: str | None = None) -> dict[str, dict[str, float]]:
    """reported.yaml's `column_maxima`: table -> column -> the paper's best value of the column (min for ppl)."""
    data = reported_document(registry, reported_file)
    return {str(t): {str(c): float(cell["value"]) for c, cell in cols.items() if cell.get("value") is not None}
            for t, cols in (data.get("column_maxima") or {}).items()}


# ------------------------------------------------------------------------------------------------ computing

def _runs(registry: Registry, frame: pd.DataFrame, row_specs: list[str], preset: str | None,
          overrides: list[str] | tuple[str, ...]) -> list[pd.DataFrame | None]:
    """The picked run rows (ours) of each seed position of a row; None where it has no run."""
    ours = frame[frame["source"] == "ours"] if "source" in frame.columns else frame
    out = []
    for name in row_specs:
        spec = registry.resolve(name, preset=preset, overrides=overrides)
        rows = pick_runs(ours[ours["preset"] == spec.preset], name, spec.hash12, [], registry=registry,
                         exact=bool(overrides))
        out.append(None if rows.empty else rows)
    return out


def _per_sample(run_dir: str, column: str, convention: dict[str, str]) -> dict[str, dict[int, float]] | None:
    """task -> {doc id: 0/1 score} of the tasks a column averages; None without per-sample results."""
    from exoformer.eval.samples import read_samples

    samples = read_samples(run_dir)
    if samples is None:
        return None
    by_task = {name.removeprefix(SMOKE_PREFIX): body for name, body in samples.items()}
    tasks = TASKS if column == AVERAGE else (column,)
    out = {}
    for task in tasks:
        body = by_task.get(task)
        values = None if body is None else body.get(convention[task])
        if values is None or any(v is None for v in values):
            return None
        out[task] = dict(zip(body["doc_id"], values, strict=True))
    return out


def _item_bootstrap(pairs: list[tuple[dict, dict]], n_boot: int, rng: np.random.Generator) -> np.ndarray | None:
    """Replicates of the mean over seed pairs of (minuend - subtrahend) in %, items and seeds redrawn."""
    per_seed = []
    for minuend, subtrahend in pairs:
        tasks = []
        for task in minuend:
            docs = sorted(set(minuend[task]) & set(subtrahend.get(task, {})))
            if not docs:
                return None
            delta = np.array([minuend[task][d] - subtrahend[task][d] for d in docs], dtype=float)
            idx = rng.integers(0, len(docs), size=(n_boot, len(docs)))
            tasks.append(delta[idx].mean(axis=1))
        per_seed.append(100.0 * np.mean(tasks, axis=0))  # a task column, or avg6's equal-weight task mean
    stacked = np.stack(per_seed)  # (K, n_boot)
    k = stacked.shape[0]
    if k == 1:
        return stacked[0]
    chosen = rng.integers(0, k, size=(n_boot, k))
    return stacked[chosen, np.arange(n_boot)[:, None]].mean(axis=1)


def _t_interval(values: list[float]) -> tuple[float, float] | None:
    k = len(values)
    if k < 2:
        return None
    sd = float(np.std(values, ddof=1))
    t = T975.get(k - 1, 1.96 + 2.4 / (k - 1))
    mean = float(np.mean(values))
    return mean - t * sd / math.sqrt(k), mean + t * sd / math.sqrt(k)


def judge(low: float | None, high: float | None, paper: float) -> str:
    """The verdict rule of the module docstring."""
    if low is None or high is None or low <= 0 <= high or paper == 0:
        return INCONCLUSIVE
    ours_positive = low > 0
    return REPLICATES if ours_positive == (paper > 0) else CONTRADICTS


def verdict_for(registry: Registry, frame: pd.DataFrame, built: BuiltTable, claim: PaperDifference, *,
                preset: str | None, overrides: list[str] | tuple[str, ...] = (),
                n_boot: int = DEFAULT_BOOTSTRAP) -> Verdict:
    """The Verdict of one paper difference from `frame` (collect's long table) and the built table's cells."""
    table = built.table
    rows = {r.id: r for r in table.rows}
    a, b = rows[claim.minuend], rows[claim.subtrahend]
    runs_a = _runs(registry, frame, a.specs, preset, overrides)
    runs_b = _runs(registry, frame, b.specs, preset, overrides)
    out = Verdict(claim=claim)
    paired = [(k, ra, rb) for k, (ra, rb) in enumerate(zip(runs_a, runs_b)) if ra is not None and rb is not None]
    diffs, sample_pairs = [], []
    for k, ra, rb in paired:
        va = _per_seed(ra, claim.column, table.convention, a.specs[k], table)
        vb = _per_seed(rb, claim.column, table.convention, b.specs[k], table)
        if va is None or vb is None:
            continue
        diffs.append(va[0] - vb[0])
        if claim.column in (*TASKS, AVERAGE):
            sa = _per_sample(ra["run_dir"].iloc[0], claim.column, table.convention)
            sb = _per_sample(rb["run_dir"].iloc[0], claim.column, table.convention)
            sample_pairs.append(None if sa is None or sb is None else (sa, sb))
    if not diffs:
        return out
    out.ours, out.seeds = float(np.mean(diffs)), len(diffs)
    replicates = None
    if sample_pairs and all(p is not None for p in sample_pairs):
        replicates = _item_bootstrap(sample_pairs, n_boot, np.random.default_rng(BOOTSTRAP_SEED))
    if replicates is not None:
        out.low, out.high = (float(q) for q in np.percentile(replicates, [2.5, 97.5]))
        n_items = sum(len(v) for v in sample_pairs[0][0].values())
        out.method = (f"paired bootstrap, {n_items} items" + (f" x {len(diffs)} seeds" if len(diffs) > 1 else "")
                      + f", {n_boot} replicates")
    elif (interval := _t_interval(diffs)) is not None:
        out.low, out.high = interval
        out.method = f"t over {len(diffs)} seeds"
    else:
        out.method = "one seed, no item noise: no interval"
    out.verdict = judge(out.low, out.high, claim.value)
    whys = [c.why for c in (built.cell(a, claim.column), built.cell(b, claim.column)) if c.why]
    out.why = "; ".join(dict.fromkeys(whys))
    return out


def table_verdicts(registry: Registry, frame: pd.DataFrame, built: BuiltTable, *, preset: str | None,
                   overrides: list[str] | tuple[str, ...] = (), n_boot: int = DEFAULT_BOOTSTRAP,
                   reported_file: str | None = None) -> list[Verdict]:
    """The Verdicts of the paper's differences within `built`'s table."""
    return [verdict_for(registry, frame, built, claim, preset=preset, overrides=overrides, n_boot=n_boot)
            for claim in paper_differences(registry, reported_file) if claim.table == built.table.id]


def all_verdicts(registry: Registry, frame: pd.DataFrame, *, preset: str | None, runs_root: str = "",
                 overrides: list[str] | tuple[str, ...] = (), n_boot: int = DEFAULT_BOOTSTRAP,
                 reported_file: str | None = None) -> list[Verdict]:
    """The Verdicts of every paper difference, table by table (the `claims` verb and the HTML report)."""
    out = []
    for table_id in dict.fromkeys(c.table for c in paper_differences(registry, reported_file)):
        built = build_table(registry, table_id, frame, preset=preset, runs_root=runs_root, overrides=overrides)
        out += table_verdicts(registry, frame, built, preset=preset, overrides=overrides, n_boot=n_boot,
                              reported_file=reported_file)
    return out


# ------------------------------------------------------------------------------------------------ rendering

def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def verdict_rows(verdicts: list[Verdict]) -> list[dict[str, str]]:
    """One mapping per verdict with the shown texts (shared by the text and HTML renderings)."""
    out = []
    for v in verdicts:
        interval = "" if v.low is None else f" [{v.low:+.2f}, {v.high:+.2f}]"
        inside = {True: " (paper inside)", False: " (paper outside)", None: ""}[v.paper_inside]
        out.append({"claim": v.label, "paper": f"{v.claim.value:+.2f} [{v.claim.source}]",
                    "ours": "not run" if v.ours is None else f"{_num(v.ours)}{interval}",
                    "method": v.method, "verdict": f"{v.verdict}{inside}" + (f" {MARK}" if v.why else ""),
                    "why": v.why})
    return out


def render_verdicts(verdicts: list[Verdict]) -> list[str]:
    """Text lines: one per claim, then the † notes and the rule."""
    if not verdicts:
        return []
    lines = ["row differences claimed by the paper (ours: mean over paired seeds [95% interval]):",
             f"{'claim':<58} {'paper':>14} {'ours':>26}  verdict  (method)"]
    rows = verdict_rows(verdicts)
    for r in rows:
        lines.append(f"{r['claim']:<58} {r['paper']:>14} {r['ours']:>26}  {r['verdict']}  ({r['method']})")
    lines.extend(f"{MARK} {r['claim']}: not comparable: {r['why']}" for r in rows if r["why"])
    lines.append("verdict: replicates = the interval excludes 0 on the paper's side; contradicts = on the other "
                 "side; inconclusive = it contains 0 or there is none (exoformer/report/verdicts.py)")
    return lines


def render_maxima(built: BuiltTable, maxima: dict[str, float], better: dict[str, str]) -> list[str]:
    """Our best value of each column with a paper column maximum (min where lower is better) beside it."""
    lines = []
    for column, paper in maxima.items():
        cells = [(row.id, built.cell(row, column)) for row in built.table.rows]
        have = [(rid, c) for rid, c in cells if c.value is not None]
        lower = better.get(column) == "lower"
        if not have:
            lines.append(f"  {column:<14} paper {paper:.2f}  ours not run")
            continue
        rid, best = (min if lower else max)(have, key=lambda rc: rc[1].value)
        mark = f" {MARK}" if not best.comparable else ""
        lines.append(f"  {column:<14} paper {paper:.2f}  ours {best.value:.2f} ({rid}){mark}  "
                     f"delta {best.value - paper:+.2f}")
    if lines:
        lines.insert(0, "column maxima (the paper's best per column, row unknown; min for lower-is-better):")
    return lines


def verdicts_html(verdicts: list[Verdict]) -> str:
    """The verdict table as an HTML section (the report's "Replication verdicts")."""
    import html

    if not verdicts:
        return ""
    rows = verdict_rows(verdicts)
    head = "".join(f"<th>{h}</th>" for h in ("claim", "paper", "ours [95% interval]", "verdict", "method"))
    body = "".join(f'<tr class="verdict-{html.escape(r["verdict"].split()[0])}"><td class="label">'
                   f'{html.escape(r["claim"])}</td><td>{html.escape(r["paper"])}</td><td>{html.escape(r["ours"])}'
                   f'</td><td>{html.escape(r["verdict"])}</td><td>{html.escape(r["method"])}</td></tr>'
                   for r in rows)
    notes = "".join(f'<p class="note">{MARK} {html.escape(r["claim"])}: not comparable: {html.escape(r["why"])}</p>'
                    for r in rows if r["why"])
    return (f'<section id="verdicts"><h2>Replication verdicts</h2><table class="verdicts"><tr>{head}</tr>{body}'
            f'</table>{notes}<p class="note">replicates = our 95% interval excludes 0 on the paper\'s side; '
            "contradicts = on the other side; inconclusive = it contains 0 or there is none.</p></section>")
