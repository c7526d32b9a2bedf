"""`compare`'s differences carry 95% intervals by diff's rules (item sampling over eval/samples.json, else lm-eval's
stderr combined as diff's tolerance, none for a number with neither), each naming its rule, with the bounds in
--json; and `compare --curves` zooms where the runs differ as the validation-loss figure does."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from synthetic import N_DOCS, make_run, registry, uniform, with_samples

from exoformer.cli import main
from exoformer.registry.tables import TASKS
from exoformer.report.compare import curves as compare_figure
from exoformer.report.compare.operands import read_operands
from exoformer.report.stats import replication as rep
from exoformer.report.tables.diff import Z
from exoformer.report.tables.verdicts import RESAMPLE_SEED

SE = 0.02
BOOT = 300


@pytest.fixture()
def runs(tmp_path):
    """base-s42 (58%) and gated-s42 (63%) with per-document scores; resformer-s42 (60%) with lm-eval's stderr only."""
    root = tmp_path / "runs"
    curve = [(1000 * i, 7.0 - 3.0 * (1 - 0.7 ** i)) for i in range(1, 20)]
    base = make_run(root, "base-s42", preset="smoke", accuracies=uniform(0.58), stderr=SE, curve=curve)
    gated = make_run(root, "gated-s42", preset="smoke", accuracies=uniform(0.63), stderr=SE, ppl=14.0,
                     curve=[(t, v - 0.2) for t, v in curve])
    make_run(root, "resformer-s42", preset="smoke", accuracies=uniform(0.60), stderr=SE, ppl=14.5,
             curve=[(t, v - 0.1) for t, v in curve])
    items = {"A": with_samples(base, 0.58), "B": with_samples(gated, 0.63, shift=11)}
    return root, items


def _row(out: str, label: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def _bounds(text: str) -> tuple[float, float, str]:
    low, high, rule = re.fullmatch(r"\[([+-][\d.]+), ([+-][\d.]+)\] (\w+)", text).groups()
    return float(low), float(high), rule


def _expected_items(items, tasks) -> tuple[float, float]:
    """diff's item-sampling interval of B - A, computed by replication directly (what compare must reuse)."""
    a, b, strata = rep.paired_items([items["B"]], [items["A"]], tasks=list(tasks))
    got = rep.compare(a, b, 1.0, kind="accuracy", item_resamples=BOOT, item_strata=strata,
                      resample_seed=RESAMPLE_SEED)
    return got.item_ci


def test_each_difference_prints_its_interval_and_rule(runs, capsys):
    root, items = runs
    assert main(["compare", "base-s42", "gated-s42", "resformer-s42", "--preset", "smoke", "--runs-dir", str(root),
                 "--bootstrap", str(BOOT)]) == 0
    out = capsys.readouterr().out
    # per-document scores in A and B: diff's item-sampling interval, the same draws replication makes
    row = _row(out, "avg6 (%)")
    assert row[4] == "+5.00"  # the difference as before, its interval in the column after it
    low, high, rule = _bounds(row[5])
    assert rule == "items"
    want = _expected_items(items, TASKS)
    assert (low, high) == pytest.approx(want, abs=0.006) and low < 5.0 < high
    low, high, rule = _bounds(_row(out, "piqa acc_norm (%)")[5])
    assert rule == "items" and (low, high) == pytest.approx(_expected_items(items, ("piqa",)), abs=0.006)
    # C has no samples: lm-eval's stderr combined as diff's tolerance, Z x sqrt(se_A^2 + se_C^2)
    low, high, rule = _bounds(_row(out, "piqa acc_norm (%)")[7])
    half = Z * math.sqrt(2) * 100 * SE
    assert rule == "stderr" and (low, high) == pytest.approx((2.0 - half, 2.0 + half), abs=0.006)
    low, high, rule = _bounds(_row(out, "avg6 (%)")[7])
    half = Z * math.sqrt(2) * 100 * math.sqrt(6 * SE**2) / 6  # avg6's stderr combined as the table does
    assert rule == "stderr" and (low, high) == pytest.approx((2.0 - half, 2.0 + half), abs=0.006)
    # a validation number has no interval, and the table says so rather than print a bare difference as certain
    assert _row(out, "val_ppl")[4:] == ["-1.00", "none", "-0.50", "none"]
    assert _row(out, "val_loss")[4:] == ["-", "-", "-", "-"]  # no difference: nothing to bound
    assert re.search(r"^no interval: val_ppl, .*val loss, last curve point \(one number per run", out, re.M)
    assert re.search(rf"^  items = item sampling \(diff's verdicts\).*{BOOT} resamples within their tasks.*generator "
                     rf"seed {RESAMPLE_SEED}", out, re.M)
    assert re.search(r"^  stderr = the difference \+- 2 x sqrt\(se1\^2 \+ se2\^2\)", out, re.M)


def test_the_item_interval_needs_samples_in_both_runs(runs, capsys):
    root, _ = runs
    assert main(["compare", "resformer-s42", "gated-s42", "--preset", "smoke", "--runs-dir", str(root),
                 "--bootstrap", str(BOOT)]) == 0
    out = capsys.readouterr().out
    assert _bounds(_row(out, "avg6 (%)")[4])[2] == "stderr"
    assert "items =" not in out


def test_json_carries_the_bounds_rule_and_method(runs, capsys):
    root, items = runs
    assert main(["compare", "base-s42", "gated-s42", "resformer-s42", "--preset", "smoke", "--runs-dir", str(root),
                 "--bootstrap", str(BOOT), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [r["letter"] for r in got["runs"]] == ["A", "B", "C"]
    metrics = {m["key"]: m for m in got["metrics"]}
    b = metrics["avg6"]["differences"]["B - A"]
    assert b["rule"] == "items" and (b["low"], b["high"]) == pytest.approx(_expected_items(items, TASKS))
    assert b["value"] == pytest.approx(5.0) and "resamples of the 1200 items within their strata" in b["method"]
    c = metrics["avg6"]["differences"]["C - A"]
    half = Z * math.sqrt(2) * 100 * math.sqrt(6 * SE**2) / 6
    assert c["rule"] == "stderr" and (c["low"], c["high"]) == pytest.approx((2.0 - half, 2.0 + half))
    v = metrics["val_ppl"]["differences"]["B - A"]
    assert v["value"] == pytest.approx(-1.0) and v["low"] is None and v["rule"] == "none"
    missing = metrics["val_loss"]["differences"]["B - A"]
    assert missing["value"] is None and metrics["val_loss"]["values"]["A"] == "not recorded"
    assert set(got["interval_rules"]) == {"items", "seeds", "stderr", "none"}


def test_json_and_csv_are_one_output_and_bootstrap_is_bounded(runs, capsys):
    root, _ = runs
    base = ["compare", "base-s42", "gated-s42", "--preset", "smoke", "--runs-dir", str(root)]
    assert main([*base, "--json", "--format", "csv"]) == 2
    assert "error: --json: prints one JSON object" in capsys.readouterr().err
    assert main([*base, "--bootstrap", "5"]) == 2
    assert "--bootstrap: " in capsys.readouterr().err


def test_the_curves_zoom_where_the_runs_differ_and_say_so(runs, monkeypatch, tmp_path):
    root, _ = runs
    drawn = {}
    monkeypatch.setattr(compare_figure, "save", lambda fig, out_dir, stem: drawn.setdefault("fig", fig) and [])
    compared = read_operands(registry(), root, ["base-s42", "gated-s42"], preset="smoke")
    compare_figure.draw_compare(registry(), compared, tmp_path / "x.png")
    [ax] = drawn["fig"].axes
    finals = [line.get_ydata()[-1] for line in ax.get_lines()]
    low, high = ax.get_ylim()
    assert 3.5 < low < min(finals) and max(finals) < high < 4.5  # not 0 to 7: the final gap of 0.2 fills the axes
    assert (max(finals) - min(finals)) / (high - low) > 0.15
    assert ax.get_xlim()[0] >= 0.5 * 19000  # from ZOOM_FROM of the tokens on
    assert "zoom: from 50% of the tokens on; y not from 0" in ax.get_ylabel()
    [whole] = ax.child_axes  # the whole run, uncut, with the zoomed window marked
    assert whole.get_ylim()[0] == 0.0 and len(whole.get_lines()) == 2 and len(whole.patches) == 1
    assert "y from 0" in whole.get_title()


def test_curves_without_any_curve_draw_no_zoom(runs, monkeypatch, tmp_path):
    root, _ = runs
    bare = [make_run(tmp_path / "other", spec, preset="smoke", accuracies=uniform(0.5)) for spec in
            ("base-s42", "gated-s42")]
    drawn = {}
    monkeypatch.setattr(compare_figure, "save", lambda fig, out_dir, stem: drawn.setdefault("fig", fig) and [])
    compare_figure.draw_compare(registry(), read_operands(registry(), root, [str(p) for p in bare]), tmp_path / "x.png")
    [ax] = drawn["fig"].axes
    assert not ax.child_axes and not ax.get_lines()  # a guard: nothing to zoom on, no inset
