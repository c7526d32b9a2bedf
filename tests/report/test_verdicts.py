"""Row-difference verdicts: our difference with a 95% interval (paired bootstrap over items, t over seeds), the
paper's difference, and replicates / contradicts / inconclusive."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from exoformer.cli import main
from exoformer.registry.tables import TASKS
from exoformer.report.collect import collect
from exoformer.report.tables import build_table
from exoformer.report.verdicts import (
    CONTRADICTS,
    INCONCLUSIVE,
    REPLICATES,
    check_bootstrap,
    judge,
    table_verdicts,
    verdicts_html,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic import make_run, registry, uniform  # noqa: E402

N_DOCS = 200


def with_samples(run: Path, acc: float, *, shift: int = 0) -> None:
    """eval/samples.json whose per-document scores average to `acc` on every task (acc_norm = acc)."""
    ones = round(acc * N_DOCS)
    values = [1.0 if (i + shift) % N_DOCS < ones else 0.0 for i in range(N_DOCS)]
    tasks = {task: {"doc_id": list(range(N_DOCS)), "acc": values,
                    **({} if task == "winogrande" else {"acc_norm": values})} for task in TASKS}
    (run / "eval" / "samples.json").write_text(json.dumps({"format": 1, "tasks": tasks}))
    rows = [json.loads(line) for line in (run / "eval" / "long.jsonl").read_text().splitlines()]
    (run / "eval" / "long.jsonl").write_text("".join(json.dumps({**r, "n": N_DOCS}) + "\n" for r in rows))


def seeded_rows(root: Path, row: str, accs: list[float], ppls: list[float]) -> None:
    for k, (acc, ppl) in enumerate(zip(accs, ppls, strict=True)):
        spec = registry().tables["table1"].rows[[r.id for r in registry().tables["table1"].rows].index(row)].specs[k]
        with_samples(make_run(root, spec, accuracies=uniform(acc), ppl=ppl, stderr=0.02), acc, shift=7 * k)


def verdicts_of(root: Path, n_boot: int = 400):
    reg = registry()
    frame = collect(root, registry=reg)
    built = build_table(reg, "table1", frame, runs_root=root)
    return {(v.claim.subtrahend, v.claim.column): v for v in
            table_verdicts(reg, frame, built, preset=None, n_boot=n_boot)}


def test_judge_is_the_documented_rule():
    assert judge(0.2, 1.9, 1.47) == REPLICATES
    assert judge(-3.0, -0.1, 1.47) == CONTRADICTS
    assert judge(-0.3, 2.0, 1.47) == INCONCLUSIVE
    assert judge(None, None, 1.47) == INCONCLUSIVE
    assert judge(-0.9, -0.2, -0.55) == REPLICATES


def test_a_clear_gain_replicates_and_a_loss_contradicts(tmp_path):
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.60], [14.0])
    seeded_rows(tmp_path, "gated", [0.50], [14.5])
    seeded_rows(tmp_path, "base", [0.70], [14.9])
    got = verdicts_of(tmp_path)
    gain = got[("gated", "avg6")]
    assert gain.ours == pytest.approx(10.0) and gain.low < 10.0 < gain.high and gain.low > 0
    assert gain.verdict == REPLICATES and "paired bootstrap" in gain.method and gain.paper_inside is False
    loss = got[("base", "avg6")]
    assert loss.ours == pytest.approx(-10.0) and loss.high < 0 and loss.verdict == CONTRADICTS
    ppl = got[("gated", "val_ppl")]  # one seed of a metric without items: no interval
    assert ppl.ours == pytest.approx(-0.5) and ppl.low is None and ppl.verdict == INCONCLUSIVE
    assert again_identical(tmp_path, gain)


def again_identical(root: Path, first) -> bool:
    second = verdicts_of(root)[("gated", "avg6")]
    return (second.low, second.high) == (first.low, first.high)


def test_equal_rows_are_inconclusive_and_seeds_give_a_t_interval(tmp_path):
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.55, 0.56, 0.54], [14.0, 14.1, 13.9])
    seeded_rows(tmp_path, "gated", [0.55, 0.55, 0.55], [14.6, 14.7, 14.5])
    got = verdicts_of(tmp_path)
    acc = got[("gated", "avg6")]
    assert acc.seeds == 3 and acc.low < 0 < acc.high and acc.verdict == INCONCLUSIVE and "x 3 seeds" in acc.method
    ppl = got[("gated", "val_ppl")]
    assert ppl.method == "t over 3 seeds" and ppl.high < 0 and ppl.verdict == REPLICATES
    assert "Replication verdicts" in verdicts_html(list(got.values()))


def test_more_items_narrow_the_interval(tmp_path):
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.60], [14.0])
    seeded_rows(tmp_path, "gated", [0.50], [14.5])
    wide = verdicts_of(tmp_path)[("gated", "avg6")]
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
    narrow = verdicts_of(tmp_path)[("gated", "avg6")]
    assert (narrow.high - narrow.low) < 0.7 * (wide.high - wide.low)


@pytest.mark.parametrize("value", ["0", "-3", "many", "1.5", True])
def test_a_bootstrap_count_must_be_a_positive_integer(value):
    from exoformer.errors import UserError

    with pytest.raises(UserError) as err:
        check_bootstrap(value)
    assert err.value.where == "--bootstrap" and "positive integer" in err.value.problem
    assert check_bootstrap("250") == 250


def test_the_verbs_refuse_a_bad_bootstrap_count_in_one_line(tmp_path, capsys):
    for verb in (["diff", "table1"], ["claims"]):
        assert main([*verb, "--bootstrap", "0", "--runs-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: --bootstrap:") and "fix: --bootstrap 1000" in err


def test_diff_prints_the_verdicts_and_column_maxima(tmp_path, capsys):
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.60], [14.0])
    seeded_rows(tmp_path, "gated", [0.50], [14.5])
    main(["diff", "table1", "--runs-dir", str(tmp_path), "--bootstrap", "200"])
    out = capsys.readouterr().out
    assert "row differences claimed by the paper" in out and "replicates" in out and "+1.47 [WEB]" in out
    assert "column maxima" in out and "val_ppl        paper 14.09  ours 14.00 (dynamic-e-exoformer)" in out
    main(["claims", "--runs-dir", str(tmp_path), "--bootstrap", "200"])
    assert "table1: dynamic-e-exoformer - gated, avg6" in capsys.readouterr().out


def test_the_html_report_shows_the_claims_verdicts(tmp_path, capsys):
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.60], [14.0])
    seeded_rows(tmp_path, "gated", [0.50], [14.5])
    main(["claims", "--runs-dir", str(tmp_path)])
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith("table1: dynamic-e-exoformer - gated, avg6"))
    out = tmp_path.parent / f"{tmp_path.name}-report"  # outside the runs root, which a report never writes into
    assert main(["report", "table1", "--runs-dir", str(tmp_path), "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert 'id="verdicts"' in page and "table1: dynamic-e-exoformer - gated, avg6" in page
    section = page.split('id="verdicts"')[1]
    assert "replicates (paper outside)" in line and "<td>replicates (paper outside)</td>" in section


CLAIMED = "table1/dynamic-e-exoformer/avg6, subtrahend: table1/gated/avg6"


@pytest.mark.parametrize("edit, named", [
    (CLAIMED, CLAIMED.replace("dynamic-e-exoformer", "nonexistent-row")),
    (CLAIMED, CLAIMED.replace("dynamic-e-exoformer/avg6", "dynamic-e-exoformer/avg7")),
])
def test_a_claimed_difference_naming_no_row_or_metric_is_one_line(tmp_path, capsys, monkeypatch, edit, named):
    from exoformer.registry.reported import DEFAULT_REPORTED

    text = DEFAULT_REPORTED.read_text()
    assert edit in text
    bad = tmp_path / "reported.yaml"
    bad.write_text(text.replace(edit, named, 1))
    monkeypatch.setenv("EXOFORMER_REPORTED", str(bad))
    seeded_rows(tmp_path / "runs", "gated", [0.5], [14.5])
    assert main(["claims", "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "difference minuend" in err and "names no table cell" in err
    assert "reported.yaml:" in err and "fix: write table/row/column of a declared cell" in err


def test_claims_reads_every_row_a_paper_difference_names(tmp_path, capsys):
    """`claims` and `diff` show the same verdict for a difference whose row (base) no mechanistic claim reads."""
    seeded_rows(tmp_path, "dynamic-e-exoformer", [0.60], [14.0])
    seeded_rows(tmp_path, "base", [0.50], [14.9])
    assert main(["claims", "--runs-dir", str(tmp_path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith("table1: dynamic-e-exoformer - base, avg6"))
    assert "not run" not in line and "+10.00" in line, line
