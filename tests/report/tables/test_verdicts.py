"""Row-difference verdicts through the harness: per-document scores and seeds read from runs, compared by
exoformer/report/stats/replication.py (whose rates tests/report/stats/test_replication.py proves by simulation), printed alike
by `diff`, `claims` and the HTML report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exoformer.cli import main
from exoformer.registry.tables import TASKS
from exoformer.report.stats.replication import (
    CONTRADICTS,
    DIRECTION_HOLDS,
    NOT_POWERED,
    ONE_SEED,
    REPLICATES,
    SIZE_UNDETERMINED,
)
from exoformer.report.reading.selection import read
from exoformer.report.tables.build import build_table
from exoformer.report.tables.verdicts import check_bootstrap, headline, table_verdicts, verdicts_html

from synthetic import N_DOCS, make_run, registry, uniform, with_samples



def seeded_rows(root: Path, row: str, accs: list[float], ppls: list[float]) -> None:
    for k, (acc, ppl) in enumerate(zip(accs, ppls, strict=True)):
        spec = registry().tables["table1"].rows[[r.id for r in registry().tables["table1"].rows].index(row)].specs[k]
        with_samples(make_run(root, spec, accuracies=uniform(acc), ppl=ppl, stderr=0.02), acc, shift=7 * k)


def verdicts_of(root: Path, n_boot: int = 400):
    reg = registry()
    selection = read(reg, root, reg.tables["table1"].spec_names(), what="table table1")
    built = build_table(reg, "table1", preset=selection.preset, runs_root=root, selection=selection)
    return {(v.claim.subtrahend, v.claim.column): v for v in table_verdicts(reg, built, n_boot=n_boot)}


def test_one_seed_speaks_of_these_checkpoints_only(tmp_path):
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.60], [14.0])
    seeded_rows(tmp_path, "gated", [0.50], [14.5])
    got = verdicts_of(tmp_path)
    gain = got[("gated", "avg6")]
    assert gain.ours == pytest.approx(10.0) and gain.seeds == 1 and gain.verdict == ONE_SEED
    c = gain.comparison
    assert c.ci is None and c.item_ci is not None and c.item_ci[0] > 0  # the items alone would call it
    assert "no verdict about the architecture" in c.verdict and "these two trained models" in c.verdict
    assert got[("gated", "val_ppl")].verdict == ONE_SEED and got[("gated", "val_ppl")].comparison.item_ci is None
    assert verdicts_of(tmp_path)[("gated", "avg6")].comparison.item_ci == c.item_ci  # the same runs, the same figure


def test_three_seeds_a_clear_gain_holds_its_direction_says_what_settles_its_size_and_a_loss_contradicts(tmp_path):
    """+1.5, +1.5, +2.0 against the paper's one-seed +1.47: the direction holds, and the size interval holds the
    paper's value but, with t(2) and the paper's own seed noise, cannot rule out 3x it (+4.41): size
    undetermined, with what would settle it (more seeds: 3 leave the spread too uncertain to plan on)."""
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.515, 0.52, 0.53], [14.0, 14.1, 13.9])
    seeded_rows(tmp_path, "gated", [0.50, 0.505, 0.51], [14.5, 14.7, 14.5])
    seeded_rows(tmp_path, "base", [0.55, 0.56, 0.56], [14.9, 14.8, 14.9])
    got = verdicts_of(tmp_path)
    gain_v = got[("gated", "avg6")]
    gain = gain_v.comparison  # +1.5, +1.5, +2.0 points, the paper's +1.47
    assert gain.seeds == 3 and gain.estimate == pytest.approx(5 / 3) and gain.head == SIZE_UNDETERMINED, gain.verdict
    assert gain.ci[0] > 0 and gain.size[0] < 0 < gain.size[1] and "Holm" in gain.verdict
    assert "the direction holds" in gain.verdict and "cannot rule out 3x the paper's (+4.41)" in gain.verdict
    assert "more seeds: they measure our spread, now from 3 seeds (2 df)" in gain.verdict
    assert "ours - paper's +0.197 [" in gain_v.comparison.line()
    # the claim's own paired seeds by default; the figure pooled over the table's rows is only a note
    assert gain.ci_method == "t interval over 3 paired seeds (2 df)" and gain.df == 2
    assert gain_v.note.startswith("if all rows share one spread: sd ") and "pooled over 3 rows (4 df)" in gain_v.note
    assert "largest residuals: " in gain_v.note and gain_v.family == "the 3 claims of 1 table"
    loss = got[("base", "avg6")].comparison  # -3.5 against the paper's +2.13
    assert loss.head == CONTRADICTS and loss.ci[1] < 0
    ppl = got[("gated", "val_ppl")].comparison
    assert ppl.ci is not None and ppl.ci[1] < 0 and ppl.head in DIRECTION_HOLDS


def test_a_tight_gain_replicates_its_size(tmp_path):
    """+1.5, +1.5, +1.6 against +1.47: the size interval holds 0 and rules out 3x the paper's."""
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.515, 0.52, 0.53], [14.0, 14.1, 13.9])
    seeded_rows(tmp_path, "gated", [0.50, 0.505, 0.514], [14.5, 14.7, 14.5])
    gain = verdicts_of(tmp_path)[("gated", "avg6")].comparison
    assert gain.head == REPLICATES, gain.verdict
    assert "same size: ours - paper's holds 0 and rules out 3x the paper's (+4.41)" in gain.verdict
    assert gain.tolerance == pytest.approx(0.147)  # the default: a tenth of the paper's effect
    assert "80% power at the paper's effect (+1.47)" in gain.line()


def test_equal_rows_with_three_seeds_are_not_powered_for_a_small_effect(tmp_path):
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.55, 0.58, 0.52], [14.0, 14.1, 13.9])
    seeded_rows(tmp_path, "gated", [0.56, 0.55, 0.54], [14.0, 14.1, 13.9])
    gain = verdicts_of(tmp_path)[("gated", "avg6")].comparison
    assert gain.head == NOT_POWERED and gain.mde > 1.47 and gain.seeds_needed is not None and gain.seeds_needed > 3
    assert f"{gain.seeds_needed} seeds per row" in gain.verdict


def test_more_items_narrow_the_item_figure(tmp_path):
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.60], [14.0])
    seeded_rows(tmp_path, "gated", [0.50], [14.5])
    wide = verdicts_of(tmp_path)[("gated", "avg6")].comparison
    runs = [run for run in tmp_path.glob("*/*") if not run.parent.name.startswith(".")]  # not the run index
    for run in runs:  # the same scores on four times the documents
        path = run / "eval" / "samples.json"
        data = json.loads(path.read_text())
        for body in data["tasks"].values():
            for key in body:
                body[key] = list(range(4 * N_DOCS)) if key == "doc_id" else body[key] * 4
        path.write_text(json.dumps(data))
        rows_file = run / "eval" / "long.jsonl"  # the rows count the documents the samples hold
        rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
        rows_file.write_text("".join(json.dumps({**r, "n": 4 * N_DOCS}) + "\n" for r in rows))
    narrow = verdicts_of(tmp_path)[("gated", "avg6")].comparison
    assert (narrow.item_ci[1] - narrow.item_ci[0]) < 0.7 * (wide.item_ci[1] - wide.item_ci[0])


@pytest.mark.parametrize("value", ["0", "-3", "many", "1.5", True, "199", "1000000000"])
def test_a_bootstrap_count_must_be_a_bounded_integer(value):
    from exoformer.errors import UserError

    with pytest.raises(UserError) as err:
        check_bootstrap(value)
    assert err.value.where == "--bootstrap" and "integer in [200, 100000]" in err.value.problem
    assert check_bootstrap("250") == 250


def test_the_verbs_refuse_a_bad_bootstrap_count_in_one_line(tmp_path, capsys):
    for verb in (["diff", "table1"], ["claims"]):
        assert main([*verb, "--bootstrap", "0", "--runs-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: --bootstrap:") and "fix: 2000" in err


def test_diff_prints_the_verdicts_and_column_maxima(tmp_path, capsys):
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.60], [14.0])
    seeded_rows(tmp_path, "gated", [0.50], [14.5])
    main(["diff", "table1", "--runs-dir", str(tmp_path), "--bootstrap", "200"])
    out = capsys.readouterr().out
    assert out.startswith("row differences claimed by the paper: 0 of 2 claims replicate (2 one seed); 1 claim not "
                          "run\n")  # the verdicts lead, before the table's cells
    assert out.index("diff table1:") > out.index("verdicts: replicates = ")
    assert "table1: dynamic-e-exoformer - gated, avg6: paper +1.47, ours +10: one seed" in out
    assert "column maxima" in out and "val_ppl        paper 14.09  ours 14.00 (dynamic-e-exoformer)" in out
    main(["claims", "--runs-dir", str(tmp_path), "--bootstrap", "200"])
    out = capsys.readouterr().out
    assert "table1: dynamic-e-exoformer - gated, avg6" in out
    # `claims` prints every table's claims under one headline: one Holm family over all of them, named
    assert out.startswith("row differences claimed by the paper: 0 of 2 claims replicate (2 one seed); 4 claims "
                          "not run; Holm over all 6 claims of 2 tables\n"), out.splitlines()[0]


def test_claims_adjusts_every_claim_it_prints_in_one_family_and_diff_its_table_only(tmp_path, capsys):
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.515, 0.52, 0.53], [14.0, 14.1, 13.9])
    seeded_rows(tmp_path, "gated", [0.50, 0.505, 0.51], [14.5, 14.7, 14.5])
    seeded_rows(tmp_path, "base", [0.55, 0.56, 0.56], [14.9, 14.8, 14.9])
    main(["diff", "table1", "--runs-dir", str(tmp_path), "--bootstrap", "200"])
    out = capsys.readouterr().out
    assert "over 3 claims" in out and "Holm over" not in out.splitlines()[0]
    assert "(note, not the verdict's basis: if all rows share one spread: sd " in out
    main(["claims", "--runs-dir", str(tmp_path), "--bootstrap", "200"])
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith("; 3 claims not run; Holm over all 6 claims of 2 tables"), head


def test_the_html_report_shows_the_claims_verdicts(tmp_path, capsys):
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.60], [14.0])
    seeded_rows(tmp_path, "gated", [0.50], [14.5])
    main(["claims", "--runs-dir", str(tmp_path)])
    line = next(x.strip() for x in capsys.readouterr().out.splitlines()
                if x.strip().startswith("table1: dynamic-e-exoformer - gated, avg6"))
    out = tmp_path.parent / f"{tmp_path.name}-report"  # outside the runs root, which a report never writes into
    assert main(["report", "table1", "--runs-dir", str(tmp_path), "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert 'id="verdicts"' in page and "table1: dynamic-e-exoformer - gated, avg6" in page
    section = page.split('id="verdicts"')[1]
    shown = line.split(": ", 2)[2]  # after the claim's label
    assert shown.startswith("paper +1.47, ours +10: one seed")
    import html
    assert f"<td>{html.escape(shown)}</td>" in section and "0 of 2 claims replicate (2 one seed)" in section


CLAIMED = "{table: table1, row: dynamic-e-exoformer, metric: avg6}, {table: table1, row: gated, metric: avg6}"


@pytest.mark.parametrize("named, message", [
    (CLAIMED.replace("dynamic-e-exoformer", "nonexistent-row"), "table 'table1' has no row 'nonexistent-row'"),
    (CLAIMED.replace("dynamic-e-exoformer, metric: avg6", "dynamic-e-exoformer, metric: avg7"),
     "reads unknown metric 'avg7'"),
])
def test_a_claimed_difference_naming_no_row_or_metric_is_one_line(tmp_path, capsys, named, message):
    import shutil

    from exoformer.registry.registry import REPO_ROOT

    directory = tmp_path / "experiments"
    shutil.copytree(REPO_ROOT / "experiments", directory)
    text = (directory / "claims.yaml").read_text()
    assert CLAIMED in text
    (directory / "claims.yaml").write_text(text.replace(CLAIMED, named, 1))
    seeded_rows(tmp_path / "runs", "gated", [0.5], [14.5])
    assert main(["claims", "--registry", str(directory), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "claim 'avg6-dynamic-e-exoformer-vs-gated'" in err and message in err
    assert "claims.yaml:" in err


def test_claims_reads_every_row_a_paper_difference_names(tmp_path, capsys):
    """`claims` and `diff` show the same verdict for a difference whose row (base) no mechanistic claim reads."""
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.60], [14.0])
    seeded_rows(tmp_path, "base", [0.50], [14.9])
    assert main(["claims", "--runs-dir", str(tmp_path)]) == 0
    line = next(x.strip() for x in capsys.readouterr().out.splitlines()
                if x.strip().startswith("table1: dynamic-e-exoformer - base, avg6"))
    assert "not run" not in line and "ours +10" in line, line


def test_the_headline_counts_the_holm_adjusted_verdicts_and_the_claims_not_run(tmp_path):
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.60], [14.0])
    seeded_rows(tmp_path, "gated", [0.50], [14.5])
    got = list(verdicts_of(tmp_path).values())
    assert headline(got) == "0 of 2 claims replicate (2 one seed); 1 claim not run"
    assert "0 of 2 claims replicate (2 one seed); 1 claim not run" in verdicts_html(got)


def test_a_claim_with_a_margin_reads_equivalent_when_our_interval_is_inside_it(tmp_path, capsys):
    import shutil

    from exoformer.registry.registry import REPO_ROOT, Registry

    directory = tmp_path / "experiments"
    shutil.copytree(REPO_ROOT / "experiments", directory)
    claims = directory / "claims.yaml"
    text = claims.read_text()
    anchor = "  avg6-dynamic-e-exoformer-vs-base:\n"
    assert anchor in text
    claims.write_text(text.replace(anchor, (
        "  avg6-resformer-matches-base:\n"
        '    claim: "table1: resformer - base, avg6 (no loss)"\n'
        "    compare: difference\n"
        "    margin: 2.0\n"
        "    reads: [{table: table1, row: resformer, metric: avg6}, {table: table1, row: base, metric: avg6}]\n"
        "    paper: [{value: 0.0, source: WEB, version: v4}]\n") + anchor, 1))
    runs = tmp_path / "runs"
    seeded_rows(runs, "resformer", [0.500, 0.505, 0.510], [14.0, 14.1, 13.9])
    seeded_rows(runs, "base", [0.500, 0.505, 0.505], [14.0, 14.1, 13.9])
    reg = Registry(directory)
    selection = read(reg, runs, reg.tables["table1"].spec_names(), what="table table1")
    built = build_table(reg, "table1", preset=selection.preset, runs_root=runs, selection=selection)
    got = {v.claim.minuend: v for v in table_verdicts(reg, built, n_boot=400) if v.claim.column == "avg6"}
    match = got["resformer"].comparison
    assert match.margin == 2.0 and match.head == "equivalent", match.verdict
    assert -2.0 < match.equivalence_ci[0] and match.equivalence_ci[1] < 2.0
    bad = text.replace(anchor, "  x:\n    claim: x\n    compare: column_max\n    margin: 1\n"
                               "    reads: [{table: table1, metric: avg6}]\n    paper: [{value: 1, source: WEB}]\n"
                       + anchor, 1)
    claims.write_text(bad)
    assert main(["claims", "--registry", str(directory), "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "margin must be a positive number on a difference claim" in err


def test_a_declared_tolerance_widens_the_size_interval_and_a_bad_one_is_one_line(tmp_path, capsys):
    """claims.yaml `tolerance` (metric units) replaces the default tenth of the paper's effect: the same runs
    that replicate with the default read `size undetermined` once two implementations may differ by 3 points
    (more than 2 x 1.47: no count of our seeds could then rule out 3x the paper's)."""
    import shutil

    from exoformer.registry.registry import REPO_ROOT, Registry

    directory = tmp_path / "experiments"
    shutil.copytree(REPO_ROOT / "experiments", directory)
    claims = directory / "claims.yaml"
    text = claims.read_text()
    anchor = "  avg6-dynamic-e-exoformer-vs-gated:\n    claim: \"table1: dynamic-e-exoformer - gated, avg6\"\n"
    assert anchor in text
    claims.write_text(text.replace(anchor, anchor + "    tolerance: 3.0\n", 1))
    runs = tmp_path / "runs"
    seeded_rows(runs, "dynamic-e-exoformer", [0.515, 0.52, 0.53], [14.0, 14.1, 13.9])
    seeded_rows(runs, "gated", [0.50, 0.505, 0.514], [14.5, 14.7, 14.5])
    reg = Registry(directory)
    assert reg.claims["avg6-dynamic-e-exoformer-vs-gated"].tolerance == 3.0
    selection = read(reg, runs, reg.tables["table1"].spec_names(), what="table table1")
    built = build_table(reg, "table1", preset=selection.preset, runs_root=runs, selection=selection)
    gain = {(v.claim.subtrahend, v.claim.column): v for v in table_verdicts(reg, built, n_boot=400)}[
        ("gated", "avg6")].comparison
    assert gain.tolerance == 3.0 and gain.head == SIZE_UNDETERMINED, gain.verdict
    assert gain.size_beyond and "no count of our seeds would" in gain.verdict
    assert verdicts_of(runs)[("gated", "avg6")].comparison.head == REPLICATES  # the default tolerance
    for bad in ("-0.5", "true", "x"):
        claims.write_text(text.replace(anchor, anchor + f"    tolerance: {bad}\n", 1))
        assert main(["claims", "--registry", str(directory), "--runs-dir", str(runs)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "tolerance must be a number >= 0 on a difference claim" in err, err
