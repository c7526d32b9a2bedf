"""experiments/claims.yaml: the claims are data, parsed strictly, checked against the tables they read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.registry.claims_schema import check_claims
from exoformer.registry.registry import REPO_ROOT, Registry
from exoformer.report.reading.selection import Selection
from exoformer.report.tables import claims
from exoformer.rundir import RunDir
from exoformer.runs.rundirs import identity_for

SINK = "    paper: [{table: claims, row: exoformer, column: attention_sink_ratio_vs_gated}]\n"


def registry_with(tmp_path: Path, old: str, new: str) -> Path:
    directory = tmp_path / "experiments"
    if not directory.exists():
        shutil.copytree(REPO_ROOT / "experiments", directory)
    path = directory / "claims.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return directory


def line_of(directory: Path, text: str) -> int:
    return next(i for i, line in enumerate((directory / "claims.yaml").read_text().splitlines(), 1) if text in line)


def test_the_declared_claims_are_the_papers_six():
    registry = Registry()
    check_claims(registry)
    mechanistic = [cid for cid, c in registry.claims.items() if c.compare not in ("difference", "column_max")]
    assert mechanistic == ["attention-sink", "over-smoothing", "pca-final-anchor-removed",
                           "pca-mean-self-removed", "data-efficiency-vs-base", "data-efficiency-vs-gated"]
    sink = registry.claims["attention-sink"]  # the claims table's derived ratio (against table1's gated row)
    assert sink.compare == "value" and [(r.table, r.row, r.metric) for r in sink.reads] == [
        ("claims", "exoformer", "attention_sink_ratio_vs_gated")]
    assert registry.metrics["attention_sink_ratio_vs_gated"].derived.row == "gated"


def test_an_unknown_key_is_a_one_line_error_with_file_and_line(tmp_path):
    directory = registry_with(tmp_path, "    approximate: true\n", "    aproximate: true\n")
    with pytest.raises(UserError) as err:
        Registry(directory)
    text = str(err.value)
    assert "unknown key 'aproximate' in claim 'attention-sink'" in text and "did you mean 'approximate'" in text
    assert f"claims.yaml:{line_of(directory, 'aproximate')}:" in text and "\n" not in text


@pytest.mark.parametrize("old, new, message", [
    ("    compare: versus\n", "    compare: quotient\n", "compare must be one of value, ratio, versus"),
    ("    compare: versus\n", "    compare: value\n", "compare value takes 1 reads, got 2"),
    ("    format: percent\n", "    format: percentage\n", "format must be one of number, percent, ratio"),
    ("    approximate: true\n", "    approximate: yes please\n", "approximate must be true or false"),
    (SINK, "    paper: [{table: claims, row: exoformer, col: attention_sink_ratio_vs_gated}]\n", "unknown key 'col'"),
    (SINK, "    paper: [{value: about two}]\n", "value must be a number"),
    ("    compare: difference\n", "    compare: differense\n", "did you mean 'difference'"),
    ("reads: [{table: table1, metric: piqa}]", "reads: [{table: table1, row: base, metric: piqa}]",
     "unknown key 'row'"),
])
def test_malformed_claims_are_one_line_errors(tmp_path, old, new, message):
    with pytest.raises(UserError, match=message) as err:
        Registry(registry_with(tmp_path, old, new))
    assert "claims.yaml:" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("old, new, message", [
    ("row: nuresformer, metric", "row: nuresformr, metric", "table 'appendix-c' has no row 'nuresformr'"),
    ("metric: token_similarity_max, label", "metric: token_similarity_maxx, label", "unknown metric"),
    ("column: attention_sink_ratio_vs_gated", "column: attention_sink", "has no column 'attention_sink'"),
    ("{table: appendix-c, row: nuresformer, metric", "{table: table7, row: nuresformer, metric",
     "unknown table 'table7'"),
    ("row: gated, metric: avg6}", "row: gatd, metric: avg6}", "table 'table1' has no row 'gatd'"),
    ("{table: table1, metric: piqa}", "{table: table1, metric: pqa}", "unknown metric 'pqa'"),
    ("{table: table1, metric: piqa}", "{table: table1, metric: token_similarity_max}",
     "table 'table1' has no column 'token_similarity_max'"),
])
def test_claims_naming_what_does_not_exist_fail_validate_and_the_verb(tmp_path, capsys, old, new, message):
    directory = registry_with(tmp_path, old, new)
    with pytest.raises(UserError, match=message):
        check_claims(Registry(directory))
    assert main(["claims", "--registry", str(directory), "--runs-dir", str(tmp_path / "runs")]) == 2
    assert message in capsys.readouterr().err


def test_validate_checks_the_claims(tmp_path, capsys):
    directory = registry_with(tmp_path, "row: nuresformer, metric", "row: nuresformr, metric")
    assert main(["validate", "--registry", str(directory)]) == 2
    assert "claim 'pca-final-anchor-removed': table 'appendix-c' has no row 'nuresformr'" in capsys.readouterr().err


def test_a_literal_paper_value_and_a_renamed_claim(tmp_path):
    directory = registry_with(tmp_path, SINK, "    paper: [{value: 3.5, source: test}]\n")
    registry_with(tmp_path, "  over-smoothing:\n", "  smoothing:\n")
    registry = Registry(directory)
    spec = registry.resolve("e-exoformer-s42", preset="smoke")
    run = RunDir(tmp_path / "runs" / spec.name / spec.hash12)
    run.analysis_dir.mkdir(parents=True)
    run.spec_file.write_text("name: e-exoformer-s42\npreset: smoke\n")
    run.write_identity(identity_for(registry, spec))
    row = {"task": "analysis", "metric": "token_similarity_max", "value": 0.5}
    run.analysis_rows.write_text(json.dumps(row) + "\n")
    read = Selection.of_root(registry, tmp_path / "runs", preset="smoke")
    table = {c.claim.split(":")[0]: c for c in claims.build_claims(registry, selection=read)}
    assert table["attention sink"].paper == "~3.5x" and table["attention sink"].ours == "not run"
    assert table["over-smoothing"].ours == "50.0%" and table["over-smoothing"].runs == "ExoFormer: e-exoformer-s42"
