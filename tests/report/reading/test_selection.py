"""One selection per reading: each spec resolved once, each run picked once, and every reader of a derived number
(the claims table, the `claims` verb, the HTML report, a figure's title) prints the same value."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest


from synthetic import make_run, registry, uniform

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.registry.claims_schema import check_claims
from exoformer.registry.registry import Registry
from exoformer.report.figures import draw as figures
from exoformer.report.figures import style
from exoformer.report.reading.selection import Selection
from exoformer.rundir import RunDir


def test_table1_resolves_each_spec_at_most_once(tmp_path, monkeypatch, capsys):
    reg = registry()
    for row in reg.tables["table1"].rows:
        for name in row.specs:
            make_run(tmp_path, name, accuracies=uniform(0.45), ppl=15.0)
    stale = make_run(tmp_path, "base-s42", ppl=15.0)  # base-s42's only run is of an older definition: stale
    stale.rename(stale.parent / "000000000000")
    make_run(tmp_path, "gated-s42", ppl=14.0, overrides=("train.steps=30",))  # a deliberate variant: not read
    calls: Counter[str] = Counter()
    resolve = Registry.resolve

    def counted(self, name, **kwargs):
        calls[name] += 1
        return resolve(self, name, **kwargs)

    monkeypatch.setattr(Registry, "resolve", counted)
    assert main(["table", "table1", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| Base Transformer | 15.00 ± 0.00 / 14.79 |" in out.replace("  ", " ")
    assert max(calls.values()) == 1 and set(calls) == set(reg.tables["table1"].spec_names())
    assert "base-s42: results from run 000000000000" in out and "stale run" in out
    assert "gated-s42: results from run" not in out  # the current run is picked, not the --set variant


def test_the_stale_note_reaches_the_claims_and_the_figures(tmp_path, capsys):
    run = make_run(tmp_path, "e-exoformer-s42", preset="smoke", curve=[(100, 3.0), (200, 2.9)])
    rows = [{"task": "analysis", "metric": "token_similarity_max", "value": 0.5, "stderr": None, "n": 4}]
    RunDir(run).write_rows(RunDir(run).analysis_rows, rows)
    run.rename(run.parent / "000000000000")
    assert main(["claims", "--preset", "smoke", "--runs-dir", str(tmp_path)]) == 0
    assert "note: e-exoformer-s42: results from run 000000000000" in capsys.readouterr().out
    selection = Selection.of_root(registry(), tmp_path, preset="smoke", check=False)
    refs = figures.figure_runs(registry(), registry().figures["val-loss-table1"], tmp_path, selection=selection)
    footnote = figures.comparability_footnote(selection, refs)
    assert "stale run" in footnote.replace("\n", " ")


def _curve(final: float, slope: float) -> list[tuple[int, float]]:
    """A straight validation curve: loss = final + slope * (20 - i) at tokens 100 * i."""
    return [(100 * i, final + slope * (20 - i)) for i in range(1, 21)]


def _sink(run: Path, value: float) -> None:
    rd = RunDir(run)
    rd.write_rows(rd.analysis_rows, [{"task": "analysis", "metric": "first_token_attention_layer_mean",
                                      "value": value, "stderr": None, "n": 4}])


@pytest.fixture(scope="module")
def smoke_root(tmp_path_factory) -> Path:
    """Table 1's base, gated, E-ExoFormer and Dynamic E-ExoFormer, two seeds each, as `run table1 --preset smoke`
    leaves them (curves, evaluation, the analyse stage's attention sink)."""
    root = tmp_path_factory.mktemp("runs")
    shapes = {"base": (3.0, 0.05), "gated": (2.9, 0.05), "e-exoformer": (2.7, 0.05),
              "dynamic-e-exoformer": (2.58, 0.04)}
    for seed, shift in ((42, 0.0), (1337, 0.03)):
        for model, (final, slope) in shapes.items():
            run = make_run(root, f"{model}-s{seed}", preset="smoke", accuracies=uniform(0.4),
                           curve=_curve(final + shift, slope * (1 + shift)))
            if model in ("gated", "e-exoformer"):
                _sink(run, (0.30 if model == "gated" else 0.12) + shift)
    return root


def _claims_cells(root: Path, capsys, *preset: str) -> dict[str, float]:
    assert main(["claims", *preset, "--runs-dir", str(root)]) == 0
    out = capsys.readouterr().out
    cells = {}
    for claim_id, metric in (("data efficiency: base", "tokens_to_base_loss_ratio"),
                             ("data efficiency: Gated", "tokens_to_gated_loss_ratio"),
                             ("attention sink", "attention_sink_ratio_vs_gated")):
        line = next(ln for ln in out.splitlines() if ln.startswith(f"| {claim_id}"))
        cells[metric] = float(re.match(r"[\d.]+", line.split("|")[3].strip()).group())
    return cells


def _table_cells(root: Path, capsys, *preset: str) -> dict[tuple[str, str], str]:
    assert main(["table", "claims", *preset, "--runs-dir", str(root), "--format", "long"]) == 0
    import csv
    import io

    rows = csv.DictReader(io.StringIO(capsys.readouterr().out))
    return {(r["row"], r["column"]): r["reproduced"] for r in rows if r["source"] == "ours"}


def test_claims_table_claims_and_the_report_print_the_same_numbers(smoke_root, tmp_path, capsys):
    reg = Registry()
    claims = _claims_cells(smoke_root, capsys)
    for preset in ((), ("--preset", "smoke")):
        assert _claims_cells(smoke_root, capsys, *preset) == claims
        table = _table_cells(smoke_root, capsys, *preset)
        for metric, ours in claims.items():
            row = "exoformer" if metric.startswith("attention") else "dynamic-e-exoformer"
            assert table[(row, metric)] != "", f"table claims {preset}: {metric} not run"
            assert round(float(table[(row, metric)]), 2) == pytest.approx(ours, abs=0.0051), metric
    assert main(["report", "claims", "--runs-dir", str(smoke_root), "--out", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "index.html").read_text()
    for metric, ours in claims.items():
        row = "exoformer" if metric.startswith("attention") else "dynamic-e-exoformer"
        found = re.search(rf'data-row="{row}" data-column="{metric}" data-ours="([^"]*)"', page)
        assert found and float(found.group(1)) == pytest.approx(float(table[(row, metric)]), rel=1e-12), metric
    # seed pairing (s42 with s42, s1337 with s1337): the cell is the ratio of the paired seeds' means
    gated, exo = (0.30, 0.30 + 0.03), (0.12, 0.12 + 0.03)
    assert float(table[("exoformer", "attention_sink_ratio_vs_gated")]) == pytest.approx(sum(gated) / sum(exo))
    # and the val-loss figure's title prints the claims table's value
    lines = figures.efficiency_title_lines(Selection.of_root(reg, smoke_root, preset="smoke"),
                                           reg.figures["val-loss-table1"], lambda n: style.label_of(reg, n))
    assert f"ours {float(table[('dynamic-e-exoformer', 'tokens_to_base_loss_ratio')]):.2f}x" in lines[0]


def test_a_derived_metric_naming_a_missing_reference_row_is_a_one_line_error(tmp_path):
    import shutil

    from exoformer.registry.registry import REPO_ROOT

    directory = tmp_path / "experiments"
    shutil.copytree(REPO_ROOT / "experiments", directory)
    tables = directory / "tables.yaml"
    text = tables.read_text()
    old = "reference: {table: table1, row: base}"
    assert old in text
    tables.write_text(text.replace(old, "reference: {table: table1, row: bse}", 1))
    with pytest.raises(UserError) as err:
        check_claims(Registry(directory))
    assert "metric tokens_to_base_loss_ratio: table 'table1' has no row 'bse'" in str(err.value)
    assert "tables.yaml:" in str(err.value) and "\n" not in str(err.value)


def test_the_figure_ratios_file_holds_the_same_seed_paired_values(smoke_root, tmp_path):
    reg = Registry()
    figures.draw(reg, "val-loss-table1", runs_root=smoke_root, out_dir=tmp_path, preset="smoke")
    ratios = json.loads((tmp_path / "val-loss-table1.ratios.json").read_text())
    selection = Selection.of_root(reg, smoke_root, preset="smoke")
    built = __import__("exoformer.report.tables.build", fromlist=["build_table"]).build_table(
        reg, "claims", preset="smoke", selection=selection)
    rows = {r.id: r for r in built.table.rows}
    cell = built.cell(rows["dynamic-e-exoformer"], "tokens_to_gated_loss_ratio")
    assert ratios["gated"]["Dynamic E-ExoFormer"] == pytest.approx(cell.value)


def test_a_set_variant_is_read_after_its_reference_was_resolved(tmp_path, capsys):
    make_run(tmp_path, "gated-s42", ppl=15.0)
    make_run(tmp_path, "gated-s42", ppl=14.0, overrides=("train.steps=30",))
    selection = Selection.of_root(registry(), tmp_path, overrides=("train.steps=30",))
    assert selection.reference("gated-s42").train.steps != 30  # resolved first, without --set
    assert selection.spec("gated-s42").train.steps == 30
    assert selection.pick("gated-s42").rows.query("metric == 'ppl'")["value"].iloc[0] == 14.0
    assert main(["table", "table1", "--set", "train.steps=30", "--runs-dir", str(tmp_path)]) == 0
    assert "| Gated Attention | 14.00" in capsys.readouterr().out
