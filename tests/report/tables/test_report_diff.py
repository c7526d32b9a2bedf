"""`diff`: tolerances, exit codes, the acc/acc_norm hint, Kendall tau-b, the smoke preset's rank-only view."""

from __future__ import annotations

import math

import pytest
import yaml


from synthetic import make_run, read_table, uniform

from exoformer.cli import main
from exoformer.registry.reported import DEFAULT_REPORTED
from exoformer.report.tables.diff import OUTSIDE, WITHIN, diff_table, exit_code, tolerance
from exoformer.report.stats.rank import kendall_tau_b

PAPER_PPL = {"base": 14.79, "gated": 14.64, "resformer": 14.32, "gated-resformer": 14.25, "e-nuresformer": 14.15,
             "e-exoformer": 14.13, "dynamic-e-exoformer": 14.09}


@pytest.mark.parametrize(("x", "y", "expected"), [
    ([1, 2, 3, 4], [10, 20, 30, 40], 1.0),
    ([1, 2, 3, 4], [4, 3, 2, 1], -1.0),
    ([1, 2, 3], [1, 3, 2], 1 / 3),                       # C=2, D=1, no ties
    ([1, 1, 2], [1, 2, 3], 2 / math.sqrt(2 * 3)),        # C=2, D=0, n0=3, one pair tied in x
    ([1, 1, 2, 2], [1, 2, 2, 3], 3 / math.sqrt(4 * 5)),  # C=3, D=0, n0=6, tied_x=2, tied_y=1
])
def test_kendall_tau_b_hand_computed(x, y, expected):
    assert kendall_tau_b(x, y) == pytest.approx(expected)


def test_kendall_tau_b_undefined_cases():
    assert kendall_tau_b([1], [2]) is None
    assert kendall_tau_b([1, 1, 1], [1, 2, 3]) is None


def _diff(root, reported_file=None, preset=None):
    built = read_table(root, "table1", preset=preset, reported_file=reported_file)
    return diff_table(built)


def test_cells_inside_tolerance_pass_with_exit_0(tmp_path, capsys):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.485), ppl=14.90)
    result = _diff(tmp_path)
    by = {(c.row, c.column): c for c in result.cells}
    assert by[("base", "val_ppl")].status == WITHIN
    assert by[("base", "val_ppl")].tolerance == pytest.approx(0.015 * 14.79)
    avg = by[("base", "avg6")]
    assert avg.status == WITHIN and avg.delta == pytest.approx(48.5 - 48.14)
    assert avg.tolerance == pytest.approx(2 * 100 * math.sqrt(6 * 0.01 ** 2) / 6)  # combined stderr
    assert exit_code(result) == 0
    assert main(["diff", "table1", "--runs-dir", str(tmp_path)]) == 0


def test_cell_outside_tolerance_fails_with_exit_1(tmp_path, capsys):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.485), ppl=14.90)
    make_run(tmp_path, "gated-s42", accuracies=uniform(0.485), ppl=16.0)
    assert main(["diff", "table1", "--runs-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("gated ") and "val_ppl" in ln)
    assert "OUTSIDE" in line and "+1.36" in line
    assert "1 of 4 compared cells outside tolerance" in out


def test_seed_spread_widens_the_tolerance(tmp_path):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.47), ppl=14.8)
    make_run(tmp_path, "base-s1337", accuracies=uniform(0.50), ppl=14.8)
    cell = read_table(tmp_path, "table1").cells[("base", "avg6")]
    assert cell.seed_sd == pytest.approx(math.sqrt(2 * 1.5 ** 2))
    se = 100 * math.sqrt(6 * 0.01 ** 2) / 6 * math.sqrt(2) / 2  # stderr of the two-seed mean
    assert tolerance(cell) == pytest.approx(2 * math.sqrt(se ** 2 + cell.seed_sd ** 2))


def test_acc_acc_norm_swap_is_flagged(tmp_path):
    data = yaml.safe_load(DEFAULT_REPORTED.read_text())
    data["tables"]["table1"]["base"]["arc_easy"] = {"value": 60.0, "source": "WEB", "version": "v4"}
    reported = tmp_path / "reported.yaml"
    reported.write_text(yaml.safe_dump(data))
    runs = tmp_path / "runs"
    make_run(runs, "base-s42", accuracies=uniform(0.60), acc_norm_offset=0.10, ppl=14.79)
    cell = next(c for c in _diff(runs, reported).cells if (c.row, c.column) == ("base", "arc_easy"))
    assert cell.status == OUTSIDE and cell.reproduced == pytest.approx(70.0)
    assert "convention mismatch" in cell.hint and "acc = 60.00" in cell.hint


def test_no_hint_when_neither_metric_matches(tmp_path):
    data = yaml.safe_load(DEFAULT_REPORTED.read_text())
    data["tables"]["table1"]["base"]["arc_easy"] = {"value": 30.0, "source": "WEB", "version": "v4"}
    reported = tmp_path / "reported.yaml"
    reported.write_text(yaml.safe_dump(data))
    runs = tmp_path / "runs"
    make_run(runs, "base-s42", accuracies=uniform(0.60), acc_norm_offset=0.10, ppl=14.79)
    cell = next(c for c in _diff(runs, reported).cells if (c.row, c.column) == ("base", "arc_easy"))
    assert cell.status == OUTSIDE and cell.hint == ""


def test_rank_agreement_over_rows(tmp_path):
    # reproduced perplexities in the paper's order except two swapped rows
    ours = dict(PAPER_PPL, **{"e-nuresformer": 14.13, "e-exoformer": 14.15})
    for row, ppl in ours.items():
        make_run(tmp_path, f"{row}-s42", ppl=ppl + 1.0)
    tau, n = _diff(tmp_path).taus["val_ppl"]
    assert n == 7
    assert tau == pytest.approx((20 - 1) / 21)


def test_smoke_preset_says_not_comparable_and_shows_ranks_only(tmp_path, capsys):
    for row, ppl in PAPER_PPL.items():
        make_run(tmp_path, f"{row}-s42", preset="smoke", accuracies=uniform(0.3), ppl=ppl * 3)
    assert main(["diff", "table1", "--preset", "smoke", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "NOT comparable" in out
    assert "OUTSIDE" not in out and "within" not in out
    assert "val_ppl        tau = +1.00  over 7 rows" in out


@pytest.mark.parametrize("n_rows", [2, 3])
def test_rank_agreement_over_fewer_than_four_rows_carries_no_information(tmp_path, capsys, n_rows):
    """A perfect order of 2 or 3 rows arises by chance 1 time in 2 or 6: no tau is printed as if it meant much."""
    for row, ppl in list(PAPER_PPL.items())[:n_rows]:
        make_run(tmp_path, f"{row}-s42", preset="smoke", accuracies=uniform(0.3), ppl=ppl * 3)
    assert _diff(tmp_path, preset="smoke").taus["val_ppl"] == (None, n_rows)
    assert main(["diff", "table1", "--preset", "smoke", "--runs-dir", str(tmp_path)]) == 1  # nothing judged
    out = capsys.readouterr().out
    assert f"val_ppl        no information over {n_rows} row(s): fewer than 4" in out and "tau = +1.00" not in out
