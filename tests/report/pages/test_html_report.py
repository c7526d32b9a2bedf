"""`report`: the static HTML page from synthetic smoke runs; cells, links, bad input, and a real headless browser.

The browser test renders the page in Debian's chromium (.ci/run installs it) with --dump-dom after the page's
own script ran, and checks the DOM: every table, every image decoded, every number equal to the table CSV.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest


from synthetic import ROWS, make_run, registry, smoke_runs, uniform

from exoformer.cli import main
from exoformer.registry.reported import Reported
from exoformer.report import NO_VALUE
from exoformer.report.pages import html as report_html
from exoformer.report.tables.diff import CellDiff
from exoformer.report.tables.build import Cell
from exoformer.rundir import RunDir

TARGETS = ["table1", "val-loss-table1", "accuracy-bars-table1", "lambda-heatmaps", "pca-components",
           "attention-sink", "gate-sparsity", "layer-similarity", "spike-scores"]
CELLS = len(registry().tables["table1"].rows) * len(registry().tables["table1"].columns)


@pytest.fixture(scope="module")
def built_report(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("report")
    runs = smoke_runs(base / "runs")
    index = report_html.build_report(registry(), TARGETS, runs_root=runs, out_dir=base / "out", preset="smoke")
    return runs, index


# ------------------------------------------------------------------------------------------ reading the page

class Page(HTMLParser):
    """The parts of a page the tests check: tables with their cells, images, links, sections, body attrs."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: dict[str, list[dict]] = {}
        self.images: list[dict] = []
        self.links: list[str] = []
        self.figures: list[str] = []
        self.body: dict = {}
        self.run_rows: list[dict] = []
        self._table: str | None = None
        self._cell: dict | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if tag == "section" and "data-table" in a:
            self._table = a["data-table"]
            self.tables[self._table] = []
        if tag == "section" and "data-figure" in a:
            self.figures.append(a["data-figure"])
        if tag == "td" and "data-column" in a and self._table:
            self._cell = dict(a, text="")
            self.tables[self._table].append(self._cell)
        if tag == "tr" and "data-hash" in a:
            self.run_rows.append(a)
        if tag == "img":
            self.images.append(a)
        if tag == "a" and "href" in a:
            self.links.append(a["href"])

    def handle_endtag(self, tag):
        if tag == "td":
            self._cell = None
        if tag == "section":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data


def check_numbers_equal_csv(page: Page, out: Path) -> int:
    """Every cell of every table equals its line of the table's CSV (value, shown text and paper value)."""
    checked = 0
    for tid, cells in page.tables.items():
        frame = pd.read_csv(out / "tables" / f"{tid}.csv")
        assert len(cells) == len(frame)
        by_key = {(c["data-row"], c["data-column"]): c for c in cells}
        for line in frame.itertuples():
            cell = by_key[(line.row, line.column)]
            if pd.isna(line.reproduced):
                assert cell["data-ours"] == "" and cell["text"].startswith(("not run", NO_VALUE))
            else:
                assert float(cell["data-ours"]) == pytest.approx(line.reproduced, rel=1e-12)
                assert cell["text"].startswith(f"{line.reproduced:.2f}")
            if pd.isna(line.reported):
                assert cell["data-paper"] == "" and "not known" in cell["text"]
            else:
                assert float(cell["data-paper"]) == pytest.approx(line.reported)
                assert f"\npaper {line.reported:.2f}" in cell["text"]  # the paper's value on its own line
            checked += 1
    return checked


# ------------------------------------------------------------------------------------------ page content

def test_report_has_every_table_figure_and_run_with_working_links(built_report):
    runs, index = built_report
    out = index.parent
    page = Page(index.read_text())
    assert list(page.tables) == ["table1"]  # spike-scores, a table and a figure: its table has no results
    assert '<details class="empty" id="table-spike-scores" data-empty-table="spike-scores"><summary><b>spike-scores' \
        '</b>' in index.read_text()  # collapsed to one line
    assert set(TARGETS[1:]) <= set(page.figures)  # and the figures drawn from table1's runs come with table1
    assert set(report_html.table_figure_ids(registry(), "table1")) <= set(page.figures)
    assert check_numbers_equal_csv(page, out) == CELLS
    pngs = {Path(i["src"]).name for i in page.images}
    assert {"val-loss-table1.png", "accuracy-bars-table1.png", "lambda-heatmaps-e-exoformer-s42.png",
            "lambda-heatmaps-dynamic-e-exoformer-s42.png", "pca-components.png", "spike-scores.png"} <= pngs
    for img in page.images:
        assert (out / img["src"]).read_bytes()[:4] == b"\x89PNG"
    assert {r["data-spec"] for r in page.run_rows} == {f"{row}-s42" for row in ROWS}
    for href in page.links:
        assert not href.startswith(("http:", "https:", "/")), href  # self-contained, relative
        assert (out / href.split("#")[0]).is_file() or href.startswith("#"), href
    base_files = {h for h in page.links if h.startswith("runs/base-s42/")}
    assert {Path(h).name for h in base_files} == {"spec.yaml", "provenance.json", "STATUS", "local-1.log"}
    log = next(h for h in base_files if h.endswith("local-1.log"))
    assert (out / log).read_text() == "training base\n"
    assert "<script src" not in index.read_text() and "<link" not in index.read_text()


def test_figures_follow_the_tables_with_results_and_tables_without_runs_are_one_collapsed_line_each(built_report):
    _, index = built_report
    page = index.read_text()
    order = [page.index('<h2 id="tables">'), page.index('data-table="table1"'), page.index('<h2 id="figures">'),
             page.index('<h2 id="not-run">'), page.index('<h2 id="runs">')]
    assert order == sorted(order), order  # the figures right after the tables with results, before the empty ones
    empty = page[order[3]:order[4]]
    lines = re.findall(r'<details class="empty"[^>]*><summary>(.*?)</summary>(.*?)</details>', empty)
    assert [re.sub("<[^>]+>", "", summary) for summary, _ in lines] == [
        f"spike-scores: {registry().tables['spike-scores'].title}: not run"]
    assert "reproduce.py run spike-scores" in lines[0][1]  # what to run, once opened
    assert "<details" not in page[:order[2]] and '<ul class="empty">' not in page


def test_a_table_of_runs_a_table_above_shows_is_one_collapsed_line_after_the_figures(tmp_path):
    runs = tmp_path / "runs"
    for i, row in enumerate(("e-exoformer", "h-exoformer")):  # rows of table1 and of granularity alike
        make_run(runs, f"{row}-s42", preset="smoke", accuracies=uniform(0.3 + 0.02 * i), ppl=40.0 - i,
                 task_prefix="smoke_")
    index = report_html.build_report(registry(), ["table1", "granularity"], runs_root=runs, out_dir=tmp_path / "out",
                                     preset="smoke")
    page = index.read_text()
    full = page[:page.index('<h2 id="figures">')]
    assert 'data-table="table1"' in full and 'data-table="granularity"' not in full
    later = page[page.index('<h2 id="same-runs">'):page.index('<h2 id="runs">')]
    assert page.index('<h2 id="figures">') < page.index('<h2 id="same-runs">')
    (summary,) = re.findall(r'<details class="empty repeated" data-repeated-table="granularity"><summary>(.*?)</summary>',
                            later)
    rows = len(registry().tables["granularity"].rows)
    assert re.sub("<[^>]+>", "", summary) == (f"granularity: {registry().tables['granularity'].title}: 2 of {rows} rows "
                                               "with results, all read from runs of table1 above")
    assert 'data-table="granularity"' in later  # the whole table, once opened (and its CSV)
    assert "2 tables with results, reading 2 run directories of 2 specs between them. 1 table of the same runs: " \
        "one line each, after the figures." in page
    assert check_numbers_equal_csv(Page(page), index.parent) == sum(
        len(registry().tables[t].rows) * len(registry().tables[t].columns) for t in ("table1", "granularity"))


def test_figure_headings_say_what_the_runs_used(built_report):
    _, index = built_report
    section = index.read_text().split('data-figure="accuracy-bars-table1"')[1].split("</section>")[0]
    assert "<h3>accuracy-bars-table1: Six-task 2-shot accuracy per Table 1 model</h3>" in section
    assert "runs: preset smoke, 2-shot evaluation, 1 seed: no interval" in section and "5-shot" not in section


def test_the_page_names_no_path_of_this_machine(built_report):
    runs, index = built_report
    page = index.read_text()
    for path in {runs, runs.resolve(), runs.parent, index.parent.resolve()}:
        assert str(path) not in page, path
    assert f"runs root <code>{runs.name}</code>;" in page
    assert report_html.shareable(f"read {runs}/base-s42/abc/logs/x.log under {runs}", runs) == \
        f"read base-s42/abc/logs/x.log under {runs.name}"


def test_a_cut_log_names_the_whole_file_relative_to_the_runs_root(tmp_path, monkeypatch):
    monkeypatch.setattr(report_html, "LOG_TAIL_BYTES", 10)
    src = tmp_path / "runs" / "base-s42" / "abc" / "logs" / "long.log"
    src.parent.mkdir(parents=True)
    src.write_text("0123456789" * 3 + "END")
    text = report_html.copy_small(src, tmp_path / "out" / "long.log", src.parent, tmp_path / "runs").read_text()
    assert "the whole file: base-s42/abc/logs/long.log]" in text and str(tmp_path) not in text


def test_smoke_cells_are_rank_only_and_marked_not_comparable_by_the_table_note(built_report):
    _, index = built_report
    page = Page(index.read_text())
    statuses = {c["data-status"] for c in page.tables["table1"] if c["data-row"] in ROWS}
    assert statuses <= {"rank only", "not known"} and "rank only" in statuses
    assert {c["data-status"] for c in page.tables["table1"] if c["data-row"] not in ROWS} == {"not run"}
    assert "not comparable: preset smoke (paper 450m)" in index.read_text()
    assert all(c["data-comparable"] == "no" for c in page.tables["table1"] if c["data-ours"])


def _cell(value, reported=None) -> Cell:
    return Cell(row="base", column="piqa", value=value, stderr=0.5,
                reported=None if reported is None else Reported(value=reported, source="T1", version="v4"))


def test_cell_html_colours_by_the_diff_verdict_and_shows_ours_and_paper():
    within = report_html.cell_html(_cell(61.234, 61.0), CellDiff(row="base", label="B", column="piqa",
                                                                  reproduced=61.234, reported=61.0, delta=0.234,
                                                                  tolerance=1.0, status="within"))
    assert 'class="cell within"' in within and "61.23" in within
    assert '<span class="line"><span class="tag">paper</span> <span class="paper">61.00' in within
    assert 'data-ours="61.234"' in within and "delta +0.23" in within and 'class="checkpoint"' not in within
    assert '61.00</span> <span class="delta">Δ+0.23</span>' in within  # the delta beside the paper's value
    undefined = report_html.cell_html(_cell(float("nan"), 0.05), CellDiff(row="base", label="B", column="piqa",
                                                                           reproduced=float("nan"), reported=0.05,
                                                                           delta=float("nan")))
    assert "Δ" not in undefined
    outside = report_html.cell_html(_cell(50.0, 61.0), CellDiff(row="base", label="B", column="piqa",
                                                                 reproduced=50.0, reported=61.0, delta=-11.0,
                                                                 tolerance=1.0, status="OUTSIDE"))
    assert 'class="cell outside"' in outside
    missing = report_html.cell_html(_cell(None), CellDiff(row="base", label="B", column="piqa", reproduced=None,
                                                           reported=None, status="not run"))
    assert 'class="cell not-run"' in missing and "not run" in missing
    nan = report_html.cell_html(_cell(float("nan"), 0.05))
    assert "no value" in nan and "nan" not in nan.lower().replace("no value", "") and 'data-ours=""' in nan


def test_cell_html_shows_ours_checkpoint_and_paper_and_marks_what_is_not_comparable():
    ours = _cell(None, 61.0)
    ckpt = Cell(row="base", column="piqa", value=60.0, source="checkpoint", comparable=False,
                why="evaluated on a different suite")
    text = report_html.cell_html(ours, None, ckpt)
    lines = text.split("\n")  # one short line each: ours, ckpt, paper (a narrow column)
    assert lines[0].endswith('<span class="ours">not run</span><span class="mark" title="evaluated on a different '
                             'suite">≁</span>')
    assert lines[1:] == ['<span class="line"><span class="tag">ckpt</span> <span class="checkpoint">60.00†</span>'
                         "</span>", '<span class="line"><span class="tag">paper</span> <span class="paper">61.00'
                         "</span></span></td>"]
    assert 'data-checkpoint="60.0"' in text and 'data-comparable="no"' in text and "not-comparable" in text
    assert 'title="evaluated on a different suite"' in text


def test_long_logs_are_copied_as_their_tail(tmp_path, monkeypatch):
    monkeypatch.setattr(report_html, "LOG_TAIL_BYTES", 10)
    src = tmp_path / "long.log"
    src.write_text("0123456789" * 3 + "END")
    copied = report_html.copy_small(src, tmp_path / "out" / "long.log")
    text = copied.read_text()
    assert text.endswith("3456789END") and "the first 23 bytes are left out" in text and str(src) in text


# ------------------------------------------------------------------------------------------ bad input

def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    runs = tmp_path / "runs"
    make_run(runs, "base-s42", preset="smoke", accuracies=uniform(0.3))
    cases = [(["tabel1"], tmp_path / "o1", "unknown report target 'tabel1'", "did you mean"),
             (["scale-1b"], tmp_path / "o2", "no runs for table 'scale-1b'", "reproduce.py run scale-1b"),
             (["table1"], tmp_path / "afile", "is a file, not a directory", "name a directory")]
    (tmp_path / "afile").write_text("x")
    for targets, out, what, fix in cases:
        assert main(["report", *targets, "--runs-dir", str(runs), "--out", str(out), "--preset", "smoke"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and what in err and fix in err and "\n" not in err, err
    assert main(["report", "--runs-dir", str(tmp_path / "missing"), "--out", str(tmp_path / "o3")]) == 2
    assert "runs root" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["report", "--runs-dir", str(tmp_path / "empty"), "--out", str(tmp_path / "o3")]) == 2
    assert "no runs under" in capsys.readouterr().err


def test_report_verb_without_targets_shows_what_has_runs(tmp_path, capsys):
    runs = tmp_path / "runs"
    make_run(runs, "base-s42", preset="smoke", accuracies=uniform(0.3), curve=[(0, 5.0), (100, 4.0)])
    assert main(["report", "--runs-dir", str(runs), "--out", str(tmp_path / "out"), "--preset", "smoke"]) == 0
    assert "wrote" in capsys.readouterr().out
    page = Page((tmp_path / "out" / "index.html").read_text())
    assert "table1" in page.tables and "scale-1b" not in page.tables
    assert "val-loss-table1" in page.figures
    assert "not drawn:" in (tmp_path / "out" / "index.html").read_text()  # analysis figures of an unanalysed run


# ------------------------------------------------------------------------------------------ real browser

def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


NEEDS_CHROMIUM = pytest.mark.skipif(
    chromium() is None,
    reason=os.environ.get("EXOFORMER_NO_CHROMIUM") or "chromium is not on PATH (.ci/run installs Debian's chromium "
    "with apt-get; outside CI: apt-get install chromium)")


def _headless(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--no-first-run", f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180)


@NEEDS_CHROMIUM
def test_the_report_renders_in_headless_chromium(built_report, tmp_path):
    _, index = built_report
    binary = chromium()
    url = index.resolve().as_uri()
    dom = _headless(binary, tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = Page(dom.stdout)
    drawn = len(list((index.parent / "figures").glob("*.png")))  # every figure, a heatmap per mixing run
    assert page.body.get("data-images-checked") == str(len(page.images)) == str(drawn) and drawn >= 9
    assert [i["src"] for i in page.images if i.get("data-loaded") != "yes"] == []
    assert list(page.tables) == ["table1"] and set(TARGETS[1:]) <= set(page.figures)
    assert check_numbers_equal_csv(page, index.parent) == CELLS
    shot = Path(os.environ.get("EXOFORMER_REPORT_SCREENSHOT", tmp_path / "report.png"))
    taken = _headless(binary, tmp_path / "profile2", "--hide-scrollbars", "--window-size=1280,2200",
                      f"--screenshot={shot}", url)
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 20_000


@NEEDS_CHROMIUM
def test_the_page_script_marks_an_image_that_did_not_load(built_report, tmp_path):
    _, index = built_report
    good = next(index.parent.glob("figures/*.png"))
    page_file = tmp_path / "page.html"
    page_file.write_text(f"<html><head><script>{report_html.PAGE_SCRIPT}</script></head><body>"
                         f'<img src="{good.as_uri()}"><img src="missing.png"></body></html>')
    dom = _headless(chromium(), tmp_path / "profile", "--allow-file-access-from-files", "--virtual-time-budget=5000",
                    "--dump-dom", page_file.as_uri())
    assert [i.get("data-loaded") for i in Page(dom.stdout).images] == ["yes", "no"]


@NEEDS_CHROMIUM
@pytest.mark.skipif(not os.environ.get("EXOFORMER_REPORT_RUNS"),
                    reason="set EXOFORMER_REPORT_RUNS to a runs root of trained smoke runs (reproduce.py run table1 "
                    "--preset smoke) to check their report in the browser too")
def test_the_report_of_trained_smoke_runs_renders_in_headless_chromium(tmp_path):
    out = tmp_path / "out"
    index = report_html.build_report(registry(), [], runs_root=Path(os.environ["EXOFORMER_REPORT_RUNS"]),
                                     out_dir=out, preset="smoke")
    dom = _headless(chromium(), tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom",
                    index.resolve().as_uri())
    page = Page(dom.stdout)
    assert page.images and [i["src"] for i in page.images if i.get("data-loaded") != "yes"] == []
    assert "table1" in page.tables
    assert check_numbers_equal_csv(page, out) == sum(len(registry().tables[t].rows) * len(registry().tables[t].columns)
                                                     for t in page.tables)


def test_every_verdict_head_has_a_colour():
    """A verdict row or chip is classed by its head (report/tables/verdicts.py); each head needs its rule."""
    from exoformer.report.stats.replication import VERDICTS

    for head in (*VERDICTS, "not run"):
        name = head.replace(" ", "-")
        assert f"tr.verdict-{name} td" in report_html.PAGE_STYLE and f".chip.verdict-{name}" in report_html.PAGE_STYLE
