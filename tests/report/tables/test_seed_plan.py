"""`power`: seeds per row for 80% power at each claim's effect, from the seed spread of the runs we have (a TABLE) or
given (--effect), priced by the cost model or by hand; one planner (report/tables/seed_plan.py) calling the verdict's
own power (report/stats/replication.py: seeds_for_direction, seeds_for_size), proved by simulation in
tests/report/stats/test_verdict_simulations.py. A measured spread is planned over its uncertainty (K - 1 df); one
measured at another preset than the one priced gets no GPU-hours."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from exoformer.cli import main
from exoformer.report.stats import replication as rep
from exoformer.errors import UserError
from exoformer.report.tables.seed_plan import ClaimSpread, measured_spreads, plan_claims

from synthetic import registry
from test_verdicts import seeded_rows

ACCS = {"dynamic-e-exoformer": [0.515, 0.52, 0.53], "gated": [0.50, 0.505, 0.51], "base": [0.50, 0.51, 0.50]}
PPLS = {"dynamic-e-exoformer": [14.0, 14.1, 13.9], "gated": [14.5, 14.7, 14.5], "base": [14.9, 14.8, 14.9]}


def three_seeds(root: Path) -> None:
    for row in ACCS:
        seeded_rows(root, row, ACCS[row], PPLS[row])


def test_the_spread_is_the_claims_own_paired_seeds_and_planned_at_holms_level(tmp_path):
    three_seeds(tmp_path)
    spreads = {(s.claim.subtrahend, s.claim.column): s for s in measured_spreads(registry(), tmp_path, "table1")}
    gain = spreads[("gated", "avg6")]
    d = 100 * (np.array(ACCS["dynamic-e-exoformer"]) - np.array(ACCS["gated"]))  # per seed, in %
    assert gain.seeds == 3 and gain.sd == pytest.approx(np.std(d, ddof=1)) and gain.df == 2
    plans, total = plan_claims(list(spreads.values()), hours_per_run={"dynamic-e-exoformer": 10.0, "gated": 20.0,
                                                                      "base": 30.0})
    planned = {(p.spread.claim.subtrahend, p.spread.claim.column): p for p in plans}
    k = rep.seeds_for_direction(1.47, sd=gain.sd, family=3, sd_df=2.0)  # over the 3-seed spread's uncertainty
    assert planned[("gated", "avg6")].seeds_per_row == k and planned[("gated", "avg6")].gpu_hours == k * 30.0
    need = {}
    for p in plans:
        for row in (p.spread.minuend, p.spread.subtrahend):
            need[row] = max(need.get(row, 0), p.seeds_per_row)
    assert total == pytest.approx(need["dynamic-e-exoformer"] * 10 + need["gated"] * 20 + need["base"] * 30)


def test_given_spreads_are_priced_per_claim_and_each_row_to_its_largest_count() -> None:
    """Two claims sharing a row at Holm's level alpha / 2; a row without a price, or a claim without a count,
    leaves the total unknown."""
    spreads = [ClaimSpread(minuend="dyn", subtrahend="gated", effect=1.47, sd=1.0),
               ClaimSpread(minuend="dyn", subtrahend="base", effect=2.13, sd=1.0)]
    prices = {"dyn": 10.0, "gated": 20.0, "base": 30.0}
    plans, total = plan_claims(spreads, hours_per_run=prices)
    k0, k1 = (p.seeds_per_row for p in plans)
    assert k0 == rep.seeds_for_direction(1.47, sd=1.0, family=2) and k1 == rep.seeds_for_direction(2.13, sd=1.0,
                                                                                                   family=2)
    assert plans[0].gpu_hours == k0 * 30.0 and plans[1].gpu_hours == k1 * 40.0
    assert total == max(k0, k1) * 10.0 + k0 * 20.0 + k1 * 30.0
    assert plan_claims(spreads, hours_per_run=prices, holm=False)[0][0].seeds_per_row == rep.seeds_for_direction(
        1.47, sd=1.0)
    assert plan_claims(spreads, hours_per_run={"dyn": 10.0, "gated": 20.0})[1] is None
    assert plan_claims([*spreads, ClaimSpread(minuend="a", subtrahend="b", effect=0.0, sd=1.0)],
                       hours_per_run=prices)[1] is None
    with pytest.raises(UserError):
        plan_claims(spreads, hours_per_run=prices, alpha=0.7)


def test_power_and_the_verdict_name_the_same_seed_count(tmp_path):
    from exoformer.report.reading.selection import read
    from exoformer.report.tables.build import build_table
    from exoformer.report.tables.verdicts import table_verdicts

    three_seeds(tmp_path)
    reg = registry()
    selection = read(reg, tmp_path, reg.tables["table1"].spec_names(), what="table table1")
    built = build_table(reg, "table1", preset=selection.preset, runs_root=tmp_path, selection=selection)
    verdicts = {(v.claim.subtrahend, v.claim.column): v.comparison.seeds_needed
                for v in table_verdicts(reg, built, n_boot=400)}
    plans = {(p.spread.claim.subtrahend, p.spread.claim.column): p.seeds_per_row
             for p in plan_claims(measured_spreads(reg, tmp_path, "table1"), hours_per_run={})[0]}
    assert plans == verdicts


def test_one_seed_is_not_a_measured_spread_and_a_given_one_plans_it(tmp_path, capsys):
    for row in ACCS:
        seeded_rows(tmp_path, row, ACCS[row][:1], PPLS[row][:1])
    assert main(["power", "table1", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("one seed: the seed spread is not measured") == 3
    assert "table total: not known" in out and "or give it: --seed-sd avg6=SD --seed-sd val_ppl=SD" in out
    assert main(["power", "table1", "--runs-dir", str(tmp_path), "--seed-sd", "avg6=0.8", "--seed-sd", "val_ppl=0.8",
                 "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    gain = next(c for c in got["claims"] if c["claim"] == "dynamic-e-exoformer - gated" and c["column"] == "avg6")
    assert gain["seeds_per_row"] == rep.seeds_for_direction(1.47, sd=0.8, family=3) and gain["gpu_hours"] > 0
    assert gain["power_at"] == 1.47 and gain["size_beyond_our_seeds"] and got["unpriced"] is None
    assert got["priced_preset"] == "450m" and got["profile"] == "h100" and got["gpu_hours_total"] > 0


@pytest.mark.parametrize("argv, words", [
    (["power", "nonexistent"], "unknown table"),
    (["power", "table1", "--effect", "x=1"], "not both"),
    (["power"], "nothing to plan"),
    (["power", "table1", "--seed-sd", "-1"], "--seed-sd"),
    (["power", "table1", "--hours-per-run", "5"], "--hours-per-run applies to --effect claims only"),
])
def test_bad_power_input_is_one_line(tmp_path, capsys, argv, words):
    assert main([*argv, "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and words in err


def test_a_spread_measured_at_another_preset_prices_no_gpu_hours(tmp_path, capsys):
    """Seeds counted from a spread of smoke runs say nothing of the seed noise at 450m: no GPU-hours and no total,
    and why; a spread given by --seed-sd (taken to be the target's) is priced."""
    three_seeds(tmp_path)
    spreads = measured_spreads(registry(), tmp_path, "table1")
    read_preset = spreads[0].measured_at
    assert read_preset == "450m" and spreads[0].preset is None  # each spec's own: 450m
    prices = {"dynamic-e-exoformer": 10.0, "gated": 20.0, "base": 30.0}
    plans, total = plan_claims(spreads, hours_per_run=prices, priced_preset=read_preset)
    assert total is not None and all(p.gpu_hours is not None for p in plans)
    plans, total = plan_claims(spreads, hours_per_run=prices, priced_preset="elsewhere")
    assert total is None and all(p.gpu_hours is None and "not elsewhere" in p.unpriced for p in plans)
    assert all(p.seeds_per_row is not None for p in plans)  # the counts still stand, at the measured preset
    given = plan_claims(spreads, hours_per_run=prices, priced_preset="elsewhere",
                        seed_sd={"avg6": 0.5, "val_ppl": 0.2})
    assert given[1] is not None and not any(p.unpriced for p in given[0])
    assert main(["power", "table1", "--runs-dir", str(tmp_path)]) == 0  # measured and priced at 450m
    out = capsys.readouterr().out
    assert "GPU-hours, each row run to the largest count" in out and "no GPU-hours" not in out
    assert "for 80% power at the paper's effect (+1.47)" in out and "planned over its uncertainty" in out
    assert main(["power", "table1", "--runs-dir", str(tmp_path), "--to", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "table total: no GPU-hours: the spread was measured on preset 450m, not smoke" in out
    assert "GPU-hours, each row" not in out and "GPU-hours;" not in out
    assert main(["power", "table1", "--runs-dir", str(tmp_path), "--to", "smoke", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["gpu_hours_total"] is None and got["unpriced"].startswith("the spread was measured on preset 450m")
    assert all(c["gpu_hours"] is None and c["seeds_per_row"] for c in got["claims"])
