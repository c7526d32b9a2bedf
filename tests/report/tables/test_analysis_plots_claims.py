"""The `claims` verb: the paper's mechanistic claims (experiments/claims.yaml) beside the runs' analysis rows."""

import json
from dataclasses import replace

import pytest

from exoformer.cli import main
from exoformer.registry.registry import Registry
from exoformer.report.reading.selection import Selection
from exoformer.report.tables import claims
from exoformer.runs.rundirs import identity_for

from synthetic import run_dir_of


@pytest.fixture(scope="module")
def registry():
    return Registry()


def new_run(registry, root, name, hash12=None, preset="smoke"):
    """A run directory with its spec file and identity, as a launch leaves it (`hash12`: another hash)."""
    run = run_dir_of(root, name, hash12 or registry.resolve(name, preset="smoke").hash12)
    run.analysis_dir.mkdir(parents=True)
    run.spec_file.write_text(f"name: {name}\npreset: {preset}\n")
    identity = identity_for(registry, registry.resolve(name, preset=preset))
    run.write_identity(replace(identity, hash12=run.path.name))
    return run


def write_rows(registry, root, name, hash12=None, preset="smoke", **metrics):
    # hash12 given: a run made with --set overrides, at another hash
    run = new_run(registry, root, name, hash12, preset)
    rows = [{"task": "analysis", "metric": k, "value": v, "stderr": None, "n": 1024} for k, v in metrics.items()]
    run.analysis_rows.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_claims_compare_runs_with_the_paper(registry, tmp_path):
    write_rows(registry, tmp_path, "gated-s42", first_token_attention_layer_mean=0.5)
    write_rows(registry, tmp_path, "e-exoformer-s42", first_token_attention_layer_mean=0.2, token_similarity_max=0.9,
               pca_final_anchor_removed=30, pca_mean_self_removed=40.5)
    write_rows(registry, tmp_path, "e-exoformer-s1337", "aaaaaaaaaaaa", first_token_attention_layer_mean=0.3,
               token_similarity_max=0.8)
    write_rows(registry, tmp_path, "e-nuresformer-s42", "bbbbbbbbbbbb", preset="450m", pca_final_anchor_removed=9)
    built = claims.build_claims(registry, selection=Selection.of_root(registry, tmp_path, preset="smoke"))
    table = {c.claim.split(":")[0]: c for c in built}
    sink = table["attention sink"]  # seed k against gated's seed k: e-exoformer-s1337 has no gated-s1337 to pair with
    assert sink.paper == "~2x" and sink.ours == "2.5x (one seed: no interval)" and sink.runs == "ExoFormer: e-exoformer-s42"
    assert table["over-smoothing"].ours == "85.0%" and table["over-smoothing"].paper == "~95%"
    pca = [c for c in table.values() if c.claim.startswith("PCA")]
    assert [c.paper for c in pca] == ["321 vs 181", "822 vs 611"]
    assert [c.ours for c in pca] == ["30 vs not run", "40.5 vs not run"]
    assert "NuResFormer: not run" in pca[0].runs  # its only run is of another preset


def test_claims_verb_prints_not_run_without_runs(tmp_path, capsys):
    assert main(["claims", "--preset", "smoke", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("| not run |") == 4 and out.count("not run vs not run") == 2
    assert "| ~2x |" in out and "| 321 vs 181 |" in out


def test_a_broken_row_file_is_a_one_line_error(registry, tmp_path, capsys):
    run = new_run(registry, tmp_path, "gated-s42")
    run.analysis_rows.write_text("{not json\n")
    assert main(["claims", "--preset", "smoke", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "long.jsonl:1: not a JSON line" in err and err.count("\n") == 1
