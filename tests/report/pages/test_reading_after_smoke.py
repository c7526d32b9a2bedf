"""The reading recipes of docs/reading.md after the README's main job, through the real CLI:
`run table1 --preset smoke` (cut down to seconds by --set), then `table anchor-norm` and `diff anchor-norm` without
--preset read the smoke runs (docs/reading.md "Which runs the reading verbs read"), `report table1` holds the figures
drawn from table1's runs, and `claims`, `list --preset smoke` answer."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from exoformer.registry.registry import Registry
from exoformer.report.pages.html import table_figure_ids
from exoformer.report.tables.build import MARK
from smoke_runs import cli


class _Images(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.sources: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


@pytest.fixture(scope="module")
def smoke_root(smoke_main_job) -> Path:
    """`run table1` and the anchor-norm ablation's spec, cut down by tiny(): trained once per session
    (tests/conftest.py smoke_main_job); the verbs here only read it."""
    return smoke_main_job


@pytest.mark.slow
def test_table_and_diff_without_preset_read_the_smoke_runs_marked_not_comparable(smoke_root):
    table = cli("table", "anchor-norm", runs_dir=smoke_root, check=True)
    assert "reading preset smoke" in table.stderr and "--preset smoke" in table.stderr
    assert len(table.stderr.strip().splitlines()) == 1
    row = next(line for line in table.stdout.splitlines() if line.startswith("| E-ExoFormer without anchor norms"))
    assert MARK in row and "not run" not in row.split("|")[2]
    assert "not comparable: preset smoke (paper 450m)" in table.stdout
    diff = cli("diff", "anchor-norm", runs_dir=smoke_root)
    assert diff.returncode == 1, diff.stdout + diff.stderr  # two rows with values: a rank with no information
    assert "val_ppl        no information over 2 row(s)" in diff.stdout
    asked = cli("table", "anchor-norm", "--preset", "450m", runs_dir=smoke_root, check=True)
    assert asked.stderr.strip() == ("note: table anchor-norm has no runs of preset 450m; runs exist under preset "
                                    "smoke: add --preset smoke")


@pytest.mark.slow
def test_report_table1_holds_the_figures_drawn_from_its_runs(smoke_root, tmp_path):
    out = tmp_path / "report"
    cli("report", "table1", "--out", str(out), runs_dir=smoke_root, check=True)
    page = (out / "index.html").read_text()
    drawn = {Path(src).stem for src in _Images(page).sources}
    assert {"val-loss-table1", "accuracy-bars-table1"} <= drawn
    for fid in table_figure_ids(Registry(), "table1"):
        assert f'data-figure="{fid}"' in page
    assert "run attention-sink" not in page and "scale-1b" not in page.split('id="tables"')[1].split("<ul")[0]


@pytest.mark.slow
def test_claims_and_list_answer_after_the_main_job(smoke_root):
    claims = cli("claims", runs_dir=smoke_root, check=True)
    assert "reading preset smoke" in claims.stderr and "| claim |" in claims.stdout
    listed = cli("list", "e-exoformer-s42", "--preset", "smoke", runs_dir=smoke_root, check=True)
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith("e-exoformer-s42 "))
    assert " smoke " in line
