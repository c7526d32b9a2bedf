"""`report [TARGET...] --out DIR`: one static HTML page of tables, figures and run status, for a browser.

Built only from what the other report verbs read: report.compose's tables (tables.build_table, each cell
rendered by `cell_html` and coloured by diff's per-cell verdict), figures.draw (PNG shown, PDF linked,
written into DIR/figures/) and each run's status record. DIR is self-contained: it holds index.html, the
figures, each table as CSV (DIR/tables/ID.csv, the numbers the page shows) and, per run, copies of its
small text files (RunDir's spec file, provenance, status record and logs, of which at most LOG_TAIL_BYTES
from the end) under DIR/runs/SPEC/HASH/, linked relatively; model weights and evaluation outputs are never
copied.
No server, no network, no external JS or CSS: the page's only script (PAGE_SCRIPT, inline) marks each
image with data-loaded once the browser has decoded it, which the browser test reads back. The page is meant to be
shared: it names no path of this machine (`shareable`: paths relative to the runs root, which it names by its last
component). Its order is its point: the verdicts, the tables with results, the figures, then one collapsed line
(<details>) per table that reads only runs a table above shows (mostly "not run", the same numbers again) and per
table without results, then the runs. Torch-free.
"""

from __future__ import annotations

import html
import logging
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from exoformer.errors import UserError, did_you_mean
from exoformer.registry.registry import Registry
from exoformer.runs.run_index import CHECKPOINT, RunInfo, find_runs, one_view
from exoformer.report import NOT_REPORTED, NOT_RUN
from exoformer.report.stats.rank import MIN_RANK_ROWS
from exoformer.report.tables.diff import OUTSIDE, WITHIN, CellDiff, TableDiff, diff_table
from exoformer.report.reading.outputs import check_apart, read_run_file
from exoformer.report.reading.selection import Selection
from exoformer.report.tables.build import (
    AVERAGE,
    PERCENT_COLUMNS,
    BuiltTable,
    Cell,
    check_out_dir,
    comparability_notes,
    convention_line,
    fmt_reported,
    fmt_value,
    paper_tags,
    plural,
    source_lines,
    sources_summary,
    to_frame,
)

INDEX = "index.html"
LOG_TAIL_BYTES = 200_000
"""Copied from the end of each log file; the rest is left out (the copy says so and names the original)."""

VERDICT_CLASS = {WITHIN: "within", OUTSIDE: "outside", "rank only": "rank-only", NOT_RUN: "not-run",
                NOT_REPORTED: "not-reported", "no tolerance": "no-tolerance"}
"""diff's per-cell verdict -> CSS class (its colour: PAGE_STYLE)."""

PAGE_SCRIPT = """
window.addEventListener("load", function () {
  var images = document.querySelectorAll("img");
  images.forEach(function (img) {
    img.setAttribute("data-loaded", img.complete && img.naturalWidth > 0 ? "yes" : "no");
  });
  document.body.setAttribute("data-images-checked", String(images.length));
});
"""

PAGE_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1400px; }
h1 { font-size: 1.5em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ccc; } h3 { font-size: 1.05em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; vertical-align: top; white-space: nowrap; }
td.label, th.label { white-space: normal; } .delta { font-size: 0.8em; color: #555; margin-left: 3px; }
.ours { font-weight: 600; } ul.empty { font-size: 0.9em; color: #555; } ul.empty code { color: #222; }
th { background: #f0f0f0; } td.label, th.label { text-align: left; }
div.scroll { overflow-x: auto; max-width: 100%; }
div.scroll th.label, div.scroll td.label { position: sticky; left: 0; z-index: 1; min-width: 8em; max-width: 12em;
  background: #fff; box-shadow: 1px 0 0 #ccc; } div.scroll th.label { background: #f0f0f0; }
div.scroll th.key, div.scroll td.key { position: sticky; right: 0; z-index: 1; box-shadow: -2px 0 0 #999; }
td.cell { background-color: #fff; } td.cell .line { display: block; font-size: 0.9em; }
.tag { font-size: 0.8em; color: #777; margin-right: 2px; }
td.within { background: #d9f2d9; } td.outside { background: #f8d0d0; } td.rank-only { background: #eef0f6; }
td.not-run { color: #999; } td.not-reported { background: #fafafa; } td.no-tolerance { background: #fff4cc; }
td.not-comparable { background-image: repeating-linear-gradient(45deg, transparent 0 6px, #0000000d 6px 9px); }
.paper { color: #333; } .source { font-size: 0.75em; color: #666; margin-left: 2px; }
.mark { color: #a33; font-weight: bold; margin-left: 2px; cursor: help; }
.note { color: #555; font-size: 0.85em; } .legend span { padding: 1px 6px; margin-right: 6px; border: 1px solid #ccc; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
.state-SUCCEEDED { color: #1a7f37; } .state-FAILED, .state-DAMAGED { color: #b00; font-weight: bold; }
.state-RUNNING, .state-PENDING { color: #9a6700; }
nav a { margin-right: 1em; }
table.verdicts td { white-space: normal; text-align: left; max-width: 44em; }
tr.verdict-replicates td, .chip.verdict-replicates, tr.verdict-equivalent td, .chip.verdict-equivalent {
  background: #d9f2d9; } tr.verdict-contradicts td, .chip.verdict-contradicts { background: #f8d0d0; }
tr.verdict-direction-only td, .chip.verdict-direction-only, tr.verdict-size-undetermined td,
  .chip.verdict-size-undetermined { background: #eaf3e0; }
tr.verdict-not-powered td, .chip.verdict-not-powered, tr.verdict-inconclusive td, .chip.verdict-inconclusive {
  background: #fff4cc; } tr.verdict-one-seed td, .chip.verdict-one-seed { background: #eef0f6; }
tr.verdict-not-run td, .chip.verdict-not-run { color: #999; }
tr.verdict-look-decided td, tr.verdict-look-equivalent td { background: #d9f2d9; }
tr.verdict-look-contradicts td { background: #f8d0d0; }
tr.verdict-look-futile td, tr.verdict-look-undecided td { background: #fff4cc; }
tr.verdict-look-continue td { background: #eef0f6; }
p.headline { font-size: 1.05em; font-weight: 600; margin-bottom: 0.3em; }
.chip { display: inline-block; padding: 1px 8px; margin: 0 6px 4px 0; border: 1px solid #ccc; border-radius: 3px; }
details.empty { margin: 0.15em 0; font-size: 0.9em; color: #555; } details.empty summary { cursor: pointer; }
details.empty p { margin: 0.2em 0 0.4em 1.4em; } details.empty code { color: #222; }
"""


@dataclass(kw_only=True, slots=True)
class Selection:
    """What the report shows: table ids, figure ids, and the specs whose runs are listed."""

    tables: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    specs: set[str] = field(default_factory=set)


@dataclass(kw_only=True, slots=True)
class DrawnFigure:
    figure_id: str
    title: str
    files: list[Path] = field(default_factory=list)
    error: str | None = None


# ------------------------------------------------------------------------------------------ checks

def table_figure_ids(registry: Registry, table_id: str) -> list[str]:
    """The figures drawn from a table's runs (declared with `table:<id>` among their specs)."""
    return [fid for fid, fig in registry.figures.items() if f"table:{table_id}" in fig.specs]


def select(registry: Registry, targets: list[str], runs: list[RunInfo]) -> Selection:
    """Tables and figures to show. TARGETs are table or figure ids (a table brings the figures drawn from its
    runs); none: every table (those without runs collapse to one line each) and every figure that has a run."""
    have = {r.spec for r in runs if r.has_eval or r.state is not None}
    choices = [*registry.tables, *registry.figures]
    if not targets:
        return Selection(tables=list(registry.tables), specs=have, figures=[
            fid for fid, fig in registry.figures.items() if set(registry.figure_specs(fig)) & have])
    chosen = Selection()
    for target in dict.fromkeys(targets):
        found = []  # an id may name both a table and a figure (spike-scores): show both
        if target in registry.tables:
            found.append(("table", set(registry.tables[target].spec_names())))
        if target in registry.figures:
            found.append(("figure", set(registry.figure_specs(registry.figures[target]))))
        if not found:
            raise UserError(f"unknown report target {target!r} (not a table or figure id)", where="TARGET",
                            fix=did_you_mean(target, choices))
        for kind, specs in found:
            if not specs & have:
                raise UserError(f"no runs for {kind} {target!r} under the runs root", where="TARGET",
                                fix=run_hint(target))
            target_list = chosen.tables if kind == "table" else chosen.figures
            if target not in target_list:
                target_list.append(target)
            if kind == "table":
                chosen.figures += [f for f in table_figure_ids(registry, target) if f not in chosen.figures
                                   and set(registry.figure_specs(registry.figures[f])) & have]
            chosen.specs |= specs & have
    return chosen


def has_gpu() -> bool:
    """Whether this machine has an NVIDIA GPU the harness could train on (without importing torch)."""
    return Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/gpus").is_dir()


def run_hint(target: str, *, gpu: bool | None = None, registry: Registry | None = None,
             runs_root: Path | None = None) -> str:
    """What to type to fill a table or figure on this machine: the smoke preset on a machine without a GPU (with
    its CPU-minute estimate when `registry` is given), else `plan` first (the paper's runs cost GPU-hours)."""
    gpu = has_gpu() if gpu is None else gpu
    if gpu:
        return f"reproduce.py plan {target} (its GPU-hours), then reproduce.py run {target}"
    minutes = ""
    if registry is not None:
        try:
            from exoformer.runs.plan import plan, totals

            cpu = totals(plan(registry, target, preset="smoke", runs_root=runs_root))["cpu_minutes"]
            minutes = "" if cpu is None else f" (about {max(1, round(cpu))} CPU-minutes)"
        except UserError:
            minutes = ""
    return f"reproduce.py run {target} --preset smoke{minutes}"


# ------------------------------------------------------------------------------------------ cells and tables

def _number(value: float | None) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else repr(float(value))


def cell_html(cell: Cell, verdict: CellDiff | None = None, checkpoint: Cell | None = None, *, key: bool = False
              ) -> str:
    """One table cell, one short line each: ours (bold), the checkpoint evaluated as the row (when the table has
    one), the paper's with the delta beside it; coloured by diff's verdict of ours against the paper, marked when
    not comparable. Stacked lines keep a column as narrow as one number, so a table with the checkpoint column still
    fits the page (`key`: the column kept in view while the table scrolls). The one place a cell is turned into
    HTML."""
    status = verdict.status if verdict is not None else ""
    classes = ["cell", VERDICT_CLASS.get(status, ""), "key" if key else ""]
    comparable = cell.comparable and (checkpoint is None or checkpoint.comparable)
    why = "; ".join(w for w in (cell.why, checkpoint.why if checkpoint is not None else "") if w)
    if not comparable:
        classes.append("not-comparable")
    tip = [f"status: {status}"] if status else []
    if verdict is not None and verdict.delta is not None:
        tip.append(f"delta {verdict.delta:+.2f}")
    if verdict is not None and verdict.tolerance is not None:
        tip.append(f"tolerance {verdict.tolerance:.2f}")
    if verdict is not None and verdict.hint:
        tip.append(verdict.hint)
    if cell.reported is not None:
        tip.append(f"paper: {cell.reported.source} {cell.reported.version}")
    attrs = {"class": " ".join(c for c in classes if c), "data-row": cell.row, "data-column": cell.column,
             "data-ours": _number(cell.value), "data-paper": _number(None if cell.reported is None
                                                                      else cell.reported.value),
             "data-status": status, "data-comparable": "yes" if comparable else "no", "title": "; ".join(tip)}
    if checkpoint is not None:
        attrs["data-checkpoint"] = _number(checkpoint.value)
    first = f'<span class="ours">{html.escape(fmt_value(cell))}</span>'
    if not comparable:
        first += f'<span class="mark" title="{html.escape(why or "not comparable", quote=True)}">≁</span>'
    lines = [first]
    if checkpoint is not None:
        lines.append(f'<span class="line"><span class="tag">ckpt</span> <span class="checkpoint">'
                     f"{html.escape(fmt_value(checkpoint))}</span></span>")
    paper = (f'<span class="line"><span class="tag">paper</span> <span class="paper">{html.escape(fmt_reported(cell))}'
             "</span>")
    if verdict is not None and verdict.delta is not None and math.isfinite(verdict.delta):
        paper += f' <span class="delta">Δ{verdict.delta:+.2f}</span>'
    lines.append(paper + "</span>")
    shown = " ".join(f'{k}="{html.escape(str(v), quote=True)}"' for k, v in attrs.items())
    return f"<td {shown}>" + "\n".join(lines) + "</td>"


def _key(column: str, *classes: str) -> str:
    """The class attribute of a header or cell: "key" for the column kept in view (avg6), beside `classes`."""
    names = [*classes, *(["key"] if column == AVERAGE else [])]
    return f' class="{" ".join(names)}"' if names else ""


def table_html(result: TableDiff, csv_href: str) -> str:
    """A table's section: its title, one line on how to read a cell, each shared note once (tables.fold), then the
    table in a horizontally scrolling box whose row names and key column (avg6) stay in view."""
    built: BuiltTable = result.built
    t = built.table
    verdicts = {(c.row, c.column): c for c in result.cells}
    convention = convention_line(t) if any(c in PERCENT_COLUMNS for c in t.columns) else ""
    out = [f'<section class="table" id="table-{html.escape(t.id)}" data-table="{html.escape(t.id)}">',
           f"<h3>{html.escape(t.id)}: {html.escape(t.title)} <span class=\"note\">[{html.escape(t.paper_ref)}]"
           f"</span></h3>",
           f'<p class="note">preset {html.escape(built.preset)}; each cell: ours (bold)'
           f'{", ckpt (a trained checkpoint evaluated as the row)" if built.has_checkpoint else ""}, paper with Δ = '
           f"ours - paper; ours = mean over seeds with results (± seed std when there are several). "
           f'{html.escape(convention)} <a href="{html.escape(csv_href)}">CSV</a></p>']
    out += [f'<p class="note not-comparable-note">{html.escape(n)}</p>' for n in comparability_notes(built)]
    out += ['<div class="scroll"><table class="results">',
            '<tr><th class="label">Model</th>' + "".join(f"<th{_key(c)}>{html.escape(c)}</th>" for c in t.columns)
            + "</tr>"]
    for row in t.rows:
        cells = "".join(cell_html(built.cell(row, c), verdicts.get((row.id, c)),
                                  built.cell(row, c, CHECKPOINT) if built.has_checkpoint else None, key=c == AVERAGE)
                        for c in t.columns)
        out.append(f'<tr data-row="{html.escape(row.id)}"><td class="label">{html.escape(row.label)}</td>{cells}</tr>')
    taus = []
    for column in t.columns:
        tau, n = result.taus.get(column, (None, 0))
        shown = "no information" if tau is None and 0 < n < MIN_RANK_ROWS else "n/a" if tau is None else f"{tau:+.2f}"
        taus.append(f'<td{_key(column, "cell")}>{shown} ({n} {"row" if n == 1 else "rows"})</td>')
    out.append('<tr class="tau"><td class="label">rank agreement with the paper, Kendall τ-b</td>' + "".join(taus)
               + "</tr>")
    out += ["</table></div>", *(f'<p class="note">note: {html.escape(n)}</p>' for n in built.notes),
            *sources_footnote(built), "</section>"]
    return "\n".join(out)


def sources_footnote(built: BuiltTable) -> list[str]:
    """The footnote under a table: which sources its paper values come from (hover a cell for its own), then what
    each tag the section shows is and how strong it is (a secondary source's value is not the paper's own)."""
    tags = paper_tags(built)
    lines = source_lines(built, prefix="")
    if not lines:
        return []
    head = (f"paper values: {sources_summary(tags, built.sources)}; hover a cell for its own source"
            if tags else "no paper value in this table")
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return [f'<div class="note sources" data-sources="{html.escape(" ".join(tags), quote=True)}">'
            f"<p>{html.escape(head)}</p><ul>{items}</ul></div>"]


LEGEND = ('<p class="legend note">colours (diff verdict per cell): <span class="within"'
          ' style="background:#d9f2d9">within tolerance</span><span style="background:#f8d0d0">outside '
          'tolerance</span><span style="background:#eef0f6">rank only (not comparable)</span><span style="background:'
          '#fff4cc">no tolerance known</span><span>not run / not reported</span> <span class="mark">≁</span> not '
          "comparable (hover for why)</p>")


def table_counts(tables: int, run_dirs: int, specs: int) -> str:
    """How many tables have results and how many runs they read between them: tables share runs (table1's rows are
    rows of other tables too), so the run count is of distinct run directories, never a sum over tables."""
    if not tables:
        return "no table has results"
    return (f"{plural(tables, 'table')} with results, reading {plural(run_dirs, 'run directory', 'run directories')}"
            f" of {plural(specs, 'spec')} between them")


# ------------------------------------------------------------------------------------------ figures

def draw_figures(registry: Registry, figures: dict[str, Selection], *, out_dir: Path, gpu: bool | None = None
                 ) -> tuple[list[DrawnFigure], set[Path]]:
    """Each figure drawn into out_dir/figures from the runs its selection (report.compose) reads; one that cannot
    be drawn yet keeps its one-line reason (a "run ..." fix says what runs on this machine). Also returns the run
    directories the figures read."""
    from exoformer.report.figures.draw import draw, figure_runs, run_setting, runs_title

    drawn, used = [], set()
    for fid, selection in figures.items():
        figure = registry.figures[fid]
        item = DrawnFigure(figure_id=fid, title=figure.title)
        root = selection.runs_root
        try:
            refs = figure_runs(registry, figure, root, selection=selection)
            used |= {Path(ref[2]) for ref in refs}
            item.title = runs_title(figure, run_setting(selection, refs))  # the runs' setting, never the paper's
            item.files = draw(registry, fid, runs_root=root, out_dir=out_dir / "figures", preset=selection.preset,
                              overrides=selection.overrides, selection=selection)
        except UserError as err:
            fix = run_hint(fid, gpu=gpu) if "reproduce.py run" in (err.fix or "") else err.fix
            item.error = f"{err.problem} ({'fix: ' + fix if fix else ''})" if fix else err.problem
        drawn.append(item)
    return drawn, used


def figure_counts(drawn: list[DrawnFigure]) -> str:
    """"12 figures: 10 drawn, 2 not drawn yet" (the heading of the figures)."""
    done = sum(1 for item in drawn if not item.error)
    text = plural(len(drawn), "figure")
    return text + (f": {done} drawn, {len(drawn) - done} not drawn yet" if done < len(drawn) else "")


def figure_html(item: DrawnFigure, out_dir: Path) -> str:
    fid = html.escape(item.figure_id)
    title, _, setting = item.title.partition("\n")
    out = [f'<section class="figure" id="figure-{fid}" data-figure="{fid}">',
           f"<h3>{fid}: {html.escape(title)}</h3>",
           *([f'<p class="note">{html.escape(setting)}</p>'] if setting else [])]
    if item.error:
        out.append(f'<p class="note">not drawn: {html.escape(item.error)}</p>')
    for path in item.files:
        href = html.escape(path.relative_to(out_dir).as_posix())
        if path.suffix == ".png":
            pdf = path.with_suffix(".pdf")
            link = f' <a href="{html.escape(pdf.relative_to(out_dir).as_posix())}">PDF</a>' if pdf in item.files else ""
            out.append(f'<figure><img src="{href}" alt="{fid}: {html.escape(path.stem)}">'
                       f'<figcaption class="note">{html.escape(path.name)}{link}</figcaption></figure>')
        elif path.suffix != ".pdf":
            out.append(f'<p class="note"><a href="{href}">{html.escape(path.name)}</a></p>')
    out.append("</section>")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ runs

def copy_small(src: Path, dest: Path, run_dir: Path | None = None, runs_root: Path | None = None) -> Path | None:
    """Copy one text file of a run into the report; a log longer than LOG_TAIL_BYTES keeps only its end (and names
    the whole file relative to `runs_root`, when given: the report names no path of this machine). Only a regular
    file inside its run directory (`run_dir`, default the file's own directory) is copied."""
    from exoformer.io import atomic_write_bytes

    try:
        tail, size = read_run_file(src, run_dir or src.parent, tail_bytes=LOG_TAIL_BYTES)
    except OSError:
        return None
    if size <= LOG_TAIL_BYTES:
        return atomic_write_bytes(dest, tail)
    whole = shareable(str(src), runs_root) if runs_root is not None else str(src)
    head = f"[report: the first {size - LOG_TAIL_BYTES} bytes are left out; the whole file: {whole}]\n".encode()
    return atomic_write_bytes(dest, head + tail)


def run_rows_html(runs: list[RunInfo], out_dir: Path, runs_root: Path | None = None) -> str:
    """One row per run directory: identity, recorded state, progress, links to copies of its text files."""
    from exoformer.runs.status import row_for

    out = ['<table class="runs"><tr><th class="label">spec</th><th>hash</th><th>preset</th><th>state</th>'
           '<th>stage</th><th>progress</th><th class="label">reason</th><th class="label">files</th></tr>']
    for run in runs:
        rd = run.run
        row = row_for(rd.path, rd.read_status(), run.spec, run.steps, run)
        dest = out_dir / "runs" / run.spec / run.hash12
        files = [rd.spec_file, rd.provenance_file, rd.status_file]
        if rd.logs.is_dir():
            files += sorted(p for p in rd.logs.rglob("*") if p.is_file())
        links = []
        for src in files:
            copied = copy_small(src, dest / src.relative_to(rd.path), rd.path, runs_root)
            if copied is not None:
                href = copied.relative_to(out_dir).as_posix()
                links.append(f'<a href="{html.escape(href)}">{html.escape(src.relative_to(rd.path).as_posix())}</a>')
        state = str(row["state"])
        progress = f"{row['step'] or 0}/{row['total_steps'] or '?'}"
        out.append(f'<tr data-spec="{html.escape(run.spec)}" data-hash="{html.escape(run.hash12)}">'
                   f'<td class="label">{html.escape(run.spec)}</td><td>{html.escape(run.hash12)}</td>'
                   f"<td>{html.escape(run.preset)}</td><td class=\"state-{html.escape(state)}\">{html.escape(state)}"
                   f"</td><td>{html.escape(str(row['stage'] or ''))}</td><td>{html.escape(progress)}</td>"
                   f"<td class=\"label\">{html.escape(str(row['reason'] or ''))}</td>"
                   f'<td class="label">{" ".join(links) or "-"}</td></tr>')
    out.append("</table>")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ page

def shareable(text: str, runs_root: Path) -> str:
    """`text` without the machine path of the runs root: a path under it becomes relative to it, the root itself
    its last component ("/home/me/results/runs/base-s42/HASH/logs/x.log" -> "base-s42/HASH/logs/x.log"; "/tmp/x/runs"
    -> "runs"), whether it is written as given or through its links resolved."""
    root = Path(runs_root).absolute()
    forms = {str(root)}
    try:
        forms.add(str(root.resolve()))
    except (OSError, RuntimeError):
        pass
    for form in sorted((f.rstrip("/") for f in forms), key=len, reverse=True):
        if form:  # never the file system's root itself
            text = text.replace(form + "/", "").replace(form, root.name)
    return text


def empty_table_html(table_id: str, title: str, hint: str) -> str:
    """A table without results: one line (its id, title and "not run"), expanding to what to type to fill it."""
    return (f'<details class="empty" id="table-{html.escape(table_id)}" data-empty-table="{html.escape(table_id)}">'
            f"<summary><b>{html.escape(table_id)}</b>: {html.escape(title)}: {NOT_RUN}</summary>"
            f"<p>to fill it on this machine: <code>{html.escape(hint)}</code></p></details>")


def repeated_table_html(built: BuiltTable, sources: list[str], section: str) -> str:
    """A table with results that reads only runs the tables `sources` above already show: one line saying how
    many of its rows have results and from where, expanding to the whole table (`section`)."""
    t = built.table
    with_results = sum(1 for row in t.rows if any(
        cell.value is not None for c in t.columns for cell in (built.cell(row, c), built.cell(row, c, CHECKPOINT))))
    return (f'<details class="empty repeated" data-repeated-table="{html.escape(t.id)}"><summary><b>'
            f"{html.escape(t.id)}</b>: {html.escape(t.title)}: {with_results} of {plural(len(t.rows), 'row')} with "
            f"results, all read from runs of {html.escape(', '.join(sources))} above</summary>\n{section}</details>")


PHASES = logging.getLogger("exoformer.report.phases")
"""One INFO line as each phase of the report starts (the `report` verb shows them on stderr, on a terminal or off
one); the first once its input is known good, so a bad target or runs root is still a one-line error."""


@one_view()  # every table and figure sees one view of the runs root
def build_report(registry: Registry, targets: list[str], *, runs_root: str | os.PathLike,
                 out_dir: str | os.PathLike, preset: str | None = None,
                 overrides: list[str] | tuple[str, ...] = (), gpu: bool | None = None) -> Path:
    """Write DIR/index.html (and its figures, CSVs and run files) for TARGETs; returns the index path.

    Each table and figure reads the preset selection.choose_preset chooses for it (README "Which runs the
    reading verbs read"). The verdicts lead, then the tables with results and the figures. After the figures, one
    collapsed line each: a table whose results all come from runs a table above shows (expanding to the table) and
    a table without any (expanding to what to run on this machine; `gpu`: None = look). The runs listed are those
    the tables and figures read. No path of this machine appears (`shareable`).
    """
    from exoformer.io import atomic_write_text
    from exoformer.report.tables.compose import compose
    from exoformer.report.tables.verdicts import paper_differences, verdicts_html

    root = Path(runs_root)
    check_apart(out_dir, runs_roots=[root], registries=[registry.directory])
    out = check_out_dir(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = find_runs(root) if root.is_dir() else []
    if preset is not None and not any(r.preset == preset for r in runs) and runs:
        raise UserError(f"no runs of preset {preset} under {root}", where="--preset",
                        fix=f"add --preset {sorted({r.preset for r in runs})[0]}, or leave --preset out")
    if not runs:
        raise UserError(f"no runs under {root}", where="--runs-dir",
                        fix="run something first (reproduce.py run table1 --preset smoke), or point --runs-dir at "
                        "a runs root")
    chosen = select(registry, targets, runs)
    # the first phase line once the input is known good: a wrong target or root stays a one-line error
    PHASES.info(f"found {plural(len(runs), 'run directory', 'run directories')}")
    gpu = has_gpu() if gpu is None else gpu
    sections, repeated, empty, read_dirs, presets_read, table_specs = [], [], [], set(), set(), set()
    shown_by: dict[Path, str] = {}  # run directory -> the first table shown in full that reads it
    claimed = [tid for tid in chosen.tables if any(d.table == tid for d in paper_differences(registry))]
    PHASES.info(f"building {plural(len(chosen.tables), 'table')}, {plural(len(chosen.figures), 'figure')}"
                + (" and the verdicts" if claimed else ""))
    report = compose(registry, root, tables=chosen.tables, figures=chosen.figures, claims=bool(claimed), preset=preset,
                     overrides=overrides)
    for tid, table in report.tables.items():
        built = table.built
        picked = [p for p in table.selection.picked() if not p.rows.empty]
        if not any(c.value is not None for c in [*built.cells.values(), *built.checkpoint_cells.values()]):
            empty.append(empty_table_html(tid, registry.tables[tid].title,
                                          run_hint(tid, gpu=gpu, registry=registry, runs_root=root)))
            continue
        paths = {p.path for p in picked}
        read_dirs |= paths
        # a checkpoint run counts under its own spec, not under the row's first spec its numbers are filed under
        table_specs |= {p.run.spec for p in picked}
        presets_read.add(built.preset)
        csv_path = atomic_write_text(out / "tables" / f"{tid}.csv", to_frame(built).to_csv(index=False))
        section = table_html(diff_table(built), csv_path.relative_to(out).as_posix())
        if table.selection.note:
            section = section.replace("</h3>", f'</h3>\n<p class="note">{html.escape(table.selection.note)}</p>', 1)
        if sections and paths and paths <= shown_by.keys():  # nothing it reads is new: one line, after the figures
            repeated.append(repeated_table_html(built, sorted({shown_by[path] for path in paths},
                                                              key=chosen.tables.index), section))
            continue
        sections.append(section)
        for path in paths:
            shown_by.setdefault(path, tid)
    table_dirs = len(read_dirs)
    PHASES.info(f"drawing {plural(len(chosen.figures), 'figure')}")
    drawn, used = draw_figures(registry, report.figures, out_dir=out, gpu=gpu)
    read_dirs |= used
    shown_runs = [r for r in runs if r.path in read_dirs]
    PHASES.info(f"writing the page and the files of {plural(len(shown_runs), 'run directory', 'run directories')}")
    others = sum(1 for r in runs if r.path not in read_dirs)
    verdicts = verdicts_html(report.verdicts) if claimed else ""  # the same verdicts as the `claims` verb
    nav = "".join(f'<a href="#{anchor}">{name}</a>' for anchor, name in
                  ((("verdicts", "Verdicts"),) if verdicts else ()) + (("tables", "Tables"), ("figures", "Figures"))
                  + ((("same-runs", "Tables of the same runs"),) if repeated else ())
                  + ((("not-run", "Tables without runs"),) if empty else ()) + (("runs", "Runs"),))
    shown_preset = html.escape(preset) if preset else "each spec&#39;s own, else the one that has runs"
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    later = " and ".join(f"{plural(n, 'table')} {what}" for n, what in ((len(repeated), "of the same runs"),
                                                                       (len(empty), "without runs")) if n)
    later = f" {later[0].upper()}{later[1:]}: one line each, after the figures." if later else ""
    repeated_block = ([f'<h2 id="same-runs">Tables of the same runs ({plural(len(repeated), "table")})</h2>',
                       '<p class="note">each reads only runs a table above already shows (its other rows are not '
                       "run): one line each; open one for the table.</p>", *repeated] if repeated else [])
    empty_block = ([f'<h2 id="not-run">Tables without runs ({plural(len(empty), "table")})</h2>',
                    f'<p class="note">one line each; open one for what to run (on this machine: '
                    f'{"a GPU" if gpu else "no GPU, so the smoke preset"}).</p>', *empty] if empty else [])
    not_listed = (f'<p class="note">{plural(others, "other run directory", "other run directories")} under this root '
                  "(other hashes, presets or variants) not read by the tables and figures above; <code>reproduce.py "
                  "status</code> lists them all.</p>" if others else "")
    page = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>ExoFormer reproduction report</title>", f"<style>{PAGE_STYLE}</style>",
        f"<script>{PAGE_SCRIPT}</script></head><body>",
        "<h1>ExoFormer reproduction report</h1>", verdicts,
        f'<p class="note">runs root <code>{html.escape(root.absolute().name)}</code>; preset {shown_preset}'
        f'{" (read: " + html.escape(", ".join(sorted(presets_read))) + ")" if presets_read else ""}; '
        f"{plural(len(shown_runs), 'run directory', 'run directories')} read; built {when}. Static page: no server, "
        "no network.</p>",
        f"<nav>{nav}</nav>",
        f'<h2 id="tables">Tables</h2><p class="note counts">'
        f"{table_counts(len(sections) + len(repeated), table_dirs, len(table_specs))}.{later}</p>",
        *([LEGEND] if sections else []), *sections,
        f'<h2 id="figures">Figures ({figure_counts(drawn)})</h2>', *(figure_html(item, out) for item in drawn),
        *repeated_block, *empty_block,
        f'<h2 id="runs">Runs ({plural(len(shown_runs), "run directory", "run directories")})</h2>',
        '<p class="note">state as each run&#39;s status record says (reproduce.py status reconciles it with '
        "the scheduler); files: copies of the run&#39;s spec, provenance, status and logs.</p>",
        run_rows_html(shown_runs, out, root), not_listed, "</body></html>", ""]
    return atomic_write_text(out / INDEX, shareable("\n".join(page), root))
