"""`diff`: tolerances (a prediction interval for the paper's one seed), Holm exit codes, the acc/acc_norm hint,
Kendall tau-b, the smoke preset's rank-only view. The false-alarm simulation: test_diff_false_alarms.py."""

from __future__ import annotations

import math

import pytest
import yaml
from scipy import stats


from synthetic import make_run, read_table, uniform

from exoformer.cli import main
from exoformer.registry.reported import DEFAULT_REPORTED
from exoformer.errors import UserError
from exoformer.report.tables.diff import (OUTSIDE, WITHIN, diff_table, exit_code, prediction_test,
                                          prior_seed_sd, render_diff, task_prior)
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


Z975 = stats.norm.ppf(0.975)
AVG6_PRIOR = sum(task_prior(t) for t in ("arc_challenge", "arc_easy", "hellaswag", "openbookqa", "piqa",
                                         "winogrande")) / 6


def test_one_seed_cells_use_the_stated_prior_and_pass_with_exit_0(tmp_path, capsys):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.485), ppl=14.90)
    result = _diff(tmp_path)
    by = {(c.row, c.column): c for c in result.cells}
    ppl, avg = by[("base", "val_ppl")], by[("base", "avg6")]
    assert ppl.status == WITHIN and ppl.basis == "prior"
    assert ppl.tolerance == pytest.approx(Z975 * math.sqrt(2) * 0.005 * 14.79)  # 0.5% of the value, one seed each
    assert avg.status == WITHIN and avg.delta == pytest.approx(48.5 - 48.14)
    assert task_prior("hellaswag") == pytest.approx(100 * math.sqrt(0.25 / 10042))  # lm-eval's stderr at 50%
    assert avg.tolerance == pytest.approx(Z975 * math.sqrt(2) * AVG6_PRIOR)
    assert avg.p == pytest.approx(2 * stats.norm.sf(0.36 / (math.sqrt(2) * AVG6_PRIOR)))
    assert exit_code(result) == 0
    assert main(["diff", "table1", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "prior seed sd of one-seed cells: val_ppl 0.5% of the value, avg6 1.30 points" in out
    assert "an assumption, not measured" in out and "No lm-eval stderr is added" in out


def test_a_far_cell_is_outside_and_beyond_chance_with_exit_1(tmp_path, capsys):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.485), ppl=14.90)
    make_run(tmp_path, "gated-s42", accuracies=uniform(0.485), ppl=16.0)
    assert main(["diff", "table1", "--runs-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("gated ") and "val_ppl" in ln)
    assert "OUTSIDE beyond chance (Holm p" in line and "+1.36" in line
    assert "1 of 4 compared cells outside their tolerance; about 0.2 of the 4 tested would be by chance" in out
    assert "1 differ beyond chance (Holm over the 4 at 5%)" in out


def test_an_outside_cell_within_chance_keeps_exit_0(tmp_path, capsys):
    """OUTSIDE is per cell at 95%: one such cell among the tested ones is what chance gives, so the exit is 0."""
    make_run(tmp_path, "base-s42", accuracies=uniform(0.485), ppl=14.79 * 1.015)  # 1.5% > +-1.39%, p about 0.034
    result = _diff(tmp_path)
    ppl = next(c for c in result.cells if c.column == "val_ppl")
    assert ppl.status == OUTSIDE and 0.05 / 2 < ppl.p < 0.05 and ppl.p_holm == pytest.approx(2 * ppl.p)
    assert exit_code(result) == 0
    line = next(ln for ln in render_diff(result).splitlines() if ln.startswith("base ") and "val_ppl" in ln)
    assert line.endswith(f"OUTSIDE (Holm p {ppl.p_holm:.2g}: chance)")


def test_seed_spread_sets_a_prediction_interval_for_one_seed(tmp_path):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.47), ppl=14.8)
    make_run(tmp_path, "base-s1337", accuracies=uniform(0.50), ppl=14.9)
    make_run(tmp_path, "base-s2027", accuracies=uniform(0.49), ppl=14.7)
    cells = {(c.row, c.column): c for c in _diff(tmp_path).cells}
    avg = cells[("base", "avg6")]
    s = stats.tstd([47.0, 50.0, 49.0])
    assert avg.sd == pytest.approx(s) and avg.basis == "3 seeds"
    assert avg.tolerance == pytest.approx(stats.t.ppf(0.975, 2) * s * math.sqrt(1 + 1 / 3))  # no stderr added
    t = abs(avg.delta) / (s * math.sqrt(1 + 1 / 3))
    assert avg.p == pytest.approx(2 * stats.t.sf(t, 2))


def test_identical_seeds_give_no_tolerance_and_say_why(tmp_path):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.47), ppl=14.8)
    make_run(tmp_path, "base-s1337", accuracies=uniform(0.50), ppl=14.8)
    ppl = next(c for c in _diff(tmp_path).cells if c.column == "val_ppl")
    assert ppl.status == "no tolerance" and "identical" in ppl.hint and ppl.p is None


def test_prediction_test_matches_the_t_and_normal_formulas():
    half, p = prediction_test([1.0, 1.0], [0.5, 0.5], [3, 1], [1, 1], [2, float("inf")])
    assert half[0] == pytest.approx(stats.t.ppf(0.975, 2) * 0.5 * math.sqrt(4 / 3))
    assert half[1] == pytest.approx(Z975 * 0.5 * math.sqrt(2))
    assert p[1] == pytest.approx(2 * stats.norm.sf(1 / (0.5 * math.sqrt(2))))


def test_a_metric_without_a_prior_gives_no_one_seed_tolerance():
    assert prior_seed_sd("grad_spike_score", 0.05) is None
    assert prior_seed_sd("grad_spike_score", 0.05, {"grad_spike_score": 0.01}) == (0.01, "given")


def test_a_checkpoint_off_the_papers_number_fails_the_evaluation_check(tmp_path, capsys):
    """The paper's own weights on the same items: no seed varies, so 1.5% off in val_ppl is exit 1 by itself."""
    make_run(tmp_path, "base-s42", accuracies=uniform(0.48), ppl=16.0, checkpoint_as=("table1", "base"))
    result = _diff(tmp_path)
    ckpt = next(c for s in result.sections if s.left == "checkpoint" for c in s.cells if c.column == "val_ppl")
    assert ckpt.basis == "same weights" and ckpt.status == OUTSIDE and ckpt.p is None
    assert result.failed_checks == [ckpt] and exit_code(result) == 1
    assert "1 outside the checkpoint's evaluation check" in render_diff(result)


def test_seed_sd_flag_replaces_the_prior_and_is_named(tmp_path, capsys):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.485), ppl=14.90)
    assert main(["diff", "table1", "--runs-dir", str(tmp_path), "--seed-sd", "avg6=0.1"]) == 1  # 0.36 is 2.5 sd
    out = capsys.readouterr().out
    assert "avg6 0.1 (given)" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("base ") and "avg6" in ln)
    assert "given" in line and "OUTSIDE beyond chance" in line


@pytest.mark.parametrize("text", ["avg6", "avg6=0", "avg6=nan", "avg6=x", "nope=1", "avg6=2e6"])
def test_bad_seed_sd_is_a_one_line_error(text):
    from exoformer.cli.options import seed_sds
    from exoformer.report.tables.diff import MAX_PRIOR_SD

    with pytest.raises(UserError, match="--seed-sd"):
        seed_sds([text], high=MAX_PRIOR_SD, bare=False, columns=("val_ppl", "avg6"))
    with pytest.raises(UserError, match="once per metric"):
        seed_sds(["avg6=1", "avg6=2"], high=MAX_PRIOR_SD, bare=False, columns=("val_ppl", "avg6"))


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
