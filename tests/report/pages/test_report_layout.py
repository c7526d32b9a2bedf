"""The report leads with its point: verdicts first, a note shared by several rows once, Table 1 with its checkpoint
column within a 1,280 px window (avg6 in view), and counts that name their unit.

Synthetic smoke runs of Table 1 (two seeds per row, so cells read "mean ± sd", and a checkpoint evaluated as each
row: the widest layout the table has). The browser checks measure the page in Debian's chromium (.ci/run installs
it) and skip without it.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest


from synthetic import make_run, registry, uniform
from test_html_report import NEEDS_CHROMIUM, _headless, chromium

from exoformer.cli import main
from exoformer.report.pages import html as report_html
from exoformer.report.tables.compose import compose
from exoformer.report.tables.diff import diff_table, render_diff
from exoformer.report.tables.build import MARK, comparability_notes, fold, render, rows_named

ROW_IDS = [row.id for row in registry().tables["table1"].rows]
SHARED = "not comparable: preset smoke (paper 450m), 2 of 3 seeds"
"""What every row's cells of ours share in the fixture: read once per table, never once per row."""
WINDOW = 1280
CONTENT = WINDOW - 2 * 24
"""The page's content width in a 1,280 px window (body margin 1.5em of 16 px on each side)."""


def table1_runs(root: Path) -> Path:
    """Every Table 1 row in the smoke preset: seeds s42 and s1337 (ours) and a checkpoint evaluated as the row."""
    for i, row in enumerate(registry().tables["table1"].rows):
        for k, spec in enumerate(row.specs[:2]):
            make_run(root, spec, preset="smoke", accuracies=uniform(0.30 + 0.02 * i + 0.003 * k), ppl=40.0 - i + k,
                     task_prefix="smoke_")
        make_run(root, row.specs[2], preset="smoke", accuracies=uniform(0.31 + 0.02 * i), ppl=41.0 - i,
                 task_prefix="smoke_", checkpoint_as=("table1", row.id))  # its own directory, filed under the row
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return table1_runs(tmp_path_factory.mktemp("layout") / "runs")


@pytest.fixture(scope="module")
def index(runs) -> Path:
    return report_html.build_report(registry(), ["table1"], runs_root=runs, out_dir=runs.parent / "out",
                                    preset="smoke")


@pytest.fixture(scope="module")
def built(runs):
    return compose(registry(), runs, tables=["table1"], preset="smoke").tables["table1"].built


# ------------------------------------------------------------------------------------------ verdicts first

def test_the_verdicts_lead_the_page_coloured(index):
    page = index.read_text()
    verdicts, tables = page.index('<section id="verdicts">'), page.index('<h2 id="tables">')
    assert verdicts < tables < page.index('data-table="table1"')
    assert page.index("<h1>") < verdicts < page.index("<nav>")  # nothing but the title above the verdicts
    section = page[verdicts:tables]
    headline = re.search(r'<p class="headline">([^<]*)</p>', section).group(1)
    assert re.fullmatch(r"\d+ of \d+ claims replicate( \([^)]*\))?(; \d+ claims? not run)?", headline), headline
    chips = re.findall(r'<span class="chip verdict-([a-z-]+)">([^<]*)</span>', section)
    assert chips and all(re.fullmatch(r"[a-z ]+: \d+ claims?", text) for _, text in chips), chips
    for kind, _ in chips:  # every chip and verdict row has its colour in the page's style
        assert f".chip.verdict-{kind}" in report_html.PAGE_STYLE and f"tr.verdict-{kind} td" in report_html.PAGE_STYLE
    assert re.findall(r'<tr class="verdict-([a-z-]+)">', section)


def test_diff_and_claims_print_the_verdicts_first(runs, capsys):
    main(["diff", "table1", "--runs-dir", str(runs), "--preset", "smoke", "--bootstrap", "200"])
    out = capsys.readouterr().out
    assert out.startswith("row differences claimed by the paper: ")
    assert out.index("verdicts: replicates = ") < out.index("diff table1:") < out.index("column maxima")
    assert main(["claims", "--runs-dir", str(runs), "--preset", "smoke", "--bootstrap", "200"]) == 0
    assert capsys.readouterr().out.startswith("row differences claimed by the paper: ")


# ------------------------------------------------------------------------------------------ notes once

def test_fold_names_the_subjects_of_a_shared_note_once():
    pairs = [("base", "x"), ("gated", "x"), ("resformer", "y"), ("gated", "x")]
    assert fold(pairs) == [(["base", "gated"], "x"), (["resformer"], "y")]
    assert rows_named(["base"]) == "base" and rows_named(["base", "gated"]) == "rows base, gated"


def test_a_note_shared_by_every_row_is_printed_once_naming_the_rows(built, index):
    expected = f"{MARK} rows {', '.join(ROW_IDS)} (ours): {SHARED}"
    assert expected in comparability_notes(built)
    markdown = render(built, "md")
    assert markdown.count(SHARED) == 1 and expected in markdown
    section = index.read_text().split('data-table="table1"')[1].split("</section>")[0]
    assert section.count(SHARED) == 1 and expected in section
    sections = dict(re.findall(r"## (\w+ vs \w+)\n(.*?)(?=\n## |\Z)", render_diff(diff_table(built)), re.S))
    ours = sections["ours vs paper"]
    line = next(x for x in ours.splitlines() if SHARED in x)  # the rows diff compares: those with a paper value
    assert ours.count(SHARED) == 1 and line.startswith(f"{MARK} rows base, gated, resformer, ") and line.endswith(SHARED)


def test_stale_runs_of_a_table_are_one_note(tmp_path, capsys):
    for name in ("base-s42", "gated-s42"):
        stale = make_run(tmp_path, name, accuracies=uniform(0.45), ppl=15.0)
        stale.rename(stale.parent / "000000000000")  # a run of an older definition of the spec
    assert main(["table", "table1", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("stale run") == 1 and out.count("the spec's definition changed since") == 1
    line = next(x for x in out.splitlines() if "stale run" in x)
    assert line.startswith("note: 2 specs read from stale runs") and "base-s42 (run 000000000000, current hash " \
        in line and "gated-s42 (run 000000000000" in line


# ------------------------------------------------------------------------------------------ width

NARROW = set(" .,:;()|!il")
SCALE = {"line": 0.9, "tag": 0.8, "delta": 0.8, "ours": 1.08}
"""Font size of a cell's parts relative to the table's (PAGE_STYLE; "ours" is bold, about 8% wider)."""
FONT_PX = 13.6
"""The table's font: 0.85em of 16 px."""
CELL_PADDING_PX = 13
LABEL_PX = 12 * FONT_PX + CELL_PADDING_PX
"""The row-name column: at most 12em (PAGE_STYLE), its long names wrap."""


def text_px(text: str, scale: float) -> float:
    """An upper estimate of a text's width in DejaVu Sans (0.64em a digit or letter, 0.32em a point or space)."""
    return sum(0.32 if ch in NARROW else 0.64 for ch in text) * FONT_PX * scale


class Cells(HTMLParser):
    """Table 1's header texts and, per column, the estimated width of each line of each cell (a cell's text breaks
    at its line spans), each part at its own font size."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.headers: list[tuple[str, str]] = []
        self.widths: dict[str, list[float]] = {}
        self.texts: dict[str, list[str]] = {}
        self._th: list[str] | None = None
        self._td: str | None = None
        self._scales: list[float] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "th":
            self._th = [a.get("class") or "", ""]
        if tag == "td" and "data-column" in a:
            self._td = a["data-column"]
            self.widths.setdefault(self._td, []).append(0.0)
            self.texts.setdefault(self._td, []).append("")
        if tag == "span" and self._td is not None:
            self._scales.append(SCALE.get(a.get("class", ""), 1.0))

    def handle_endtag(self, tag):
        if tag == "th" and self._th is not None:
            self.headers.append((self._th[0], self._th[1]))
            self._th = None
        if tag == "td":
            self._td = None
        if tag == "span" and self._scales:
            self._scales.pop()

    def handle_data(self, data):
        if self._th is not None:
            self._th[1] += data
        if self._td is None:
            return
        scale = 1.0
        for s in self._scales:
            scale *= s
        for k, part in enumerate(data.split("\n")):
            if k:  # a line break between the cell's lines
                self.widths[self._td].append(0.0)
            self.widths[self._td][-1] += text_px(part, scale)
            self.texts[self._td][-1] += ("\n" if k else "") + part


def test_table1_with_its_checkpoint_column_fits_a_1280px_window(index):
    section = index.read_text().split('data-table="table1"')[1].split("</section>")[0]
    assert '<div class="scroll"><table class="results">' in section  # scrolls, never the page, if it ever overflows
    cells = Cells(section)
    assert cells.headers[-1] == ("key", "avg6") and any("ckpt" in text for text in cells.texts["avg6"])
    widths = {column: max(lines + [text_px(column, 1.0)]) + CELL_PADDING_PX for column, lines in cells.widths.items()}
    assert LABEL_PX + sum(widths.values()) <= CONTENT, widths  # one number per line: columns stay narrow
    style = report_html.PAGE_STYLE.replace("\n", " ")
    assert re.search(r"div\.scroll \{ overflow-x: auto;", style)
    assert re.search(r"div\.scroll th\.label, div\.scroll td\.label \{ position: sticky; left: 0;", style)
    assert re.search(r"div\.scroll th\.key, div\.scroll td\.key \{ position: sticky; right: 0;", style)
    assert all("key" in c.split() for c in re.findall(r'<td class="([^"]*)" data-row="[^"]*" data-column="avg6"',
                                                        section))


MEASURE = """<script>
window.addEventListener("load", function () {
  var box = document.querySelector('section[data-table="table1"] div.scroll');
  var r = box.getBoundingClientRect(), key = box.querySelector("th.key").getBoundingClientRect();
  var label = box.querySelector("tr[data-row] td.label").getBoundingClientRect();
  document.body.setAttribute("data-measure", JSON.stringify({page: document.documentElement.scrollWidth,
    viewport: window.innerWidth, scroll: box.scrollWidth, client: box.clientWidth, boxLeft: r.left, boxRight: r.right,
    keyLeft: key.left, keyRight: key.right, labelLeft: label.left}));
});
</script>"""


def _measure(index: Path, tmp_path: Path, width: int) -> dict:
    page = index.parent / f"measure-{width}.html"  # beside index.html: the same relative links
    page.write_text(index.read_text().replace("</head>", MEASURE + "</head>", 1))
    dom = _headless(chromium(), tmp_path / f"profile-{width}", f"--window-size={width},1000",
                    "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'data-measure="([^"]*)"', dom.stdout)
    assert found, dom.stdout[:500]
    return json.loads(found.group(1).replace("&quot;", '"'))


@NEEDS_CHROMIUM
def test_table1_fits_1280px_in_chromium_and_keeps_avg6_in_view_when_narrower(index, tmp_path):
    wide = _measure(index, tmp_path, WINDOW)
    assert wide["viewport"] == WINDOW and wide["page"] <= WINDOW, wide
    assert wide["scroll"] <= wide["client"] and wide["keyRight"] <= wide["boxRight"] + 1, wide  # no overflow at all
    narrow = _measure(index, tmp_path, 800)
    assert narrow["scroll"] > narrow["client"], narrow  # too narrow for the table: its box scrolls, not the page
    assert narrow["page"] <= 800, narrow
    assert narrow["boxLeft"] - 1 <= narrow["keyLeft"] and narrow["keyRight"] <= narrow["boxRight"] + 1, narrow
    assert narrow["labelLeft"] >= narrow["boxLeft"] - 1, narrow


# ------------------------------------------------------------------------------------------ counts

def test_the_page_counts_name_their_units(index):
    page = index.read_text()
    assert "1 table with results, reading 27 run directories of 27 specs between them." in page
    assert re.search(r'<h2 id="figures">Figures \(\d+ figures(: \d+ drawn, \d+ not drawn yet)?\)</h2>', page)
    assert '<h2 id="runs">Runs (27 run directories)</h2>' in page and "27 run directories read;" in page
    taus = re.findall(r"<td[^>]*>([^<]*)</td>", re.search(r'<tr class="tau">(.*?)</tr>', page).group(1))[1:]
    assert len(taus) == 8 and all(re.fullmatch(r"(n/a|no information|[+-]\d\.\d\d) \(\d+ rows?\)", t) for t in taus), taus


def test_tables_sharing_one_run_count_it_once(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs, "dynamic-e-exoformer-s42", preset="smoke", accuracies=uniform(0.4), ppl=30.0,
             task_prefix="smoke_")
    index = report_html.build_report(registry(), ["table1", "dynamic-fc2-init"], runs_root=runs,
                                     out_dir=tmp_path / "out", preset="smoke")
    page = index.read_text()
    assert page.count('<section class="table"') == 2
    assert "2 tables with results, reading 1 run directory of 1 spec between them." in page
