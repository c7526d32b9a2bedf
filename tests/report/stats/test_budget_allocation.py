"""Seeds per row from a fixed budget (exoformer/report/stats/budget_allocation.py), issue 43 items 1 and 4.

Table 1's three claims share dynamic-e-exoformer ("dyn"): avg6 against gated (+1.47) and base (+2.13), val_ppl
against gated (-0.55), experiments/claims.yaml. The sd of a paired difference: "smoke" from the avg6 seed sds
measured on smoke runs (3.02 for dyn, 0.36 for the others: sqrt(3.02^2 + 0.36^2) = 3.04), "assumed" 1.0 per row
(1.41); val_ppl 0.25 in both (assumed). Prices per run: dyn 10, gated 9, base 8 GPU-hours (illustrative). The
simulation's truths: the paper's effects and half of them; it judges each allocation by the fixed design's Holm
verdicts (exoformer/report/stats/sequential.py with one look). Seeded; `pytest -s` prints the table.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.report.stats import budget_allocation as ba
from exoformer.report.stats import power as pw
from exoformer.report.stats import sequential as sq
from exoformer.report.tables.seed_plan import ClaimSpread, plan_claims

REPS = 6_000
"""Simulated tables per cell: MC SE of the expected decisive claims (0-3) at most 0.02."""
HOURS = {"dyn": 10.0, "gated": 9.0, "base": 8.0}
AVG6_SD = {"smoke": math.hypot(3.02, 0.36), "assumed": math.sqrt(2.0)}
ROW_SD = {"smoke": {"dyn": 3.02, "gated": 0.36, "base": 0.36}, "assumed": {"dyn": 1.0, "gated": 1.0, "base": 1.0}}
PPL_ROW_SD = 0.25 / math.sqrt(2.0)


def table1(spread: str) -> list[ba.BudgetClaim]:
    sd = {"dyn-gated": math.hypot(ROW_SD[spread]["dyn"], ROW_SD[spread]["gated"]),
          "dyn-base": math.hypot(ROW_SD[spread]["dyn"], ROW_SD[spread]["base"])}
    return [ba.BudgetClaim(label="avg6 dyn - gated", minuend="dyn", subtrahend="gated", effect=1.47,
                           sd=sd["dyn-gated"]),
            ba.BudgetClaim(label="avg6 dyn - base", minuend="dyn", subtrahend="base", effect=2.13, sd=sd["dyn-base"]),
            ba.BudgetClaim(label="val_ppl dyn - gated", minuend="dyn", subtrahend="gated", effect=-0.55, sd=0.25)]


def simulate_decisive(spread: str, claims: list[ba.BudgetClaim], seeds: dict[str, int], scale: float,
                      rng: np.random.Generator) -> tuple[float, float]:
    """Mean and MC SE of the claims decided the paper's way by the fixed design (one look, Holm) with `seeds`."""
    n = {r: seeds[r] for r in ("dyn", "gated", "base")}
    top = max(n.values())
    avg6 = {r: ROW_SD[spread][r] * rng.standard_normal((REPS, top)) for r in n}
    ppl = {r: PPL_ROW_SD * rng.standard_normal((REPS, top)) for r in n}
    live = [c for c in claims if min(n[c.minuend], n[c.subtrahend]) >= 2]
    if not live:
        return 0.0, 0.0
    diffs = []
    for c in live:
        k = min(n[c.minuend], n[c.subtrahend])
        source = ppl if c.label.startswith("val_ppl") else avg6
        diffs.append(source[c.minuend][:, :k] - source[c.subtrahend][:, :k] + scale * c.effect)
    plan = [sq.PlanClaim(label=c.label, minuend=c.minuend, subtrahend=c.subtrahend, column="x", paper=c.effect,
                         sd=c.sd) for c in live]
    # claims without two seeds are no test; the family is the claims tested (as compare_all counts it)
    design = sq.make_design("t", plan, n, looks=1)
    out = sq.sequential_verdicts(design, diffs)
    decided = ((out.state == sq.DECIDED) & (out.sign == np.sign([c.effect for c in live]))).sum(axis=1)
    return float(decided.mean()), float(decided.std(ddof=1) / math.sqrt(REPS))


def test_power_agrees_with_power_table_for_the_same_seeds():
    """The allocation's power is power.power_at at alpha / m with seeds - 1 df, as seed_plan.plan_claims plans:
    at the seeds `power TABLE` prints each claim reaches 80%, and one seed fewer does not."""
    for spread in ("smoke", "assumed"):
        claims = table1(spread)
        spreads = [ClaimSpread(minuend=c.minuend, subtrahend=c.subtrahend, effect=c.effect, sd=c.sd) for c in claims]
        plans, _ = plan_claims(spreads, hours_per_run=HOURS)
        for c, p in zip(claims, plans, strict=True):
            k = p.seeds_per_row
            seeds = {"dyn": k, "gated": k, "base": k}
            ours = ba.evaluate([c, *[x for x in claims if x is not c]], seeds, HOURS).power[0]
            assert ours == pytest.approx(float(pw.power_at(c.effect, sd=c.sd, seeds=k, df=k - 1, alpha=0.05 / 3)))
            assert ours >= pw.TARGET_POWER
            fewer = ba.evaluate([c, *[x for x in claims if x is not c]], dict.fromkeys(seeds, k - 1), HOURS).power[0]
            assert fewer < pw.TARGET_POWER
            assert ba.seeds_for_power(c, m=3) == k


def test_shared_rows_are_paid_once():
    claims = table1("assumed")
    a = ba.evaluate(claims, {"dyn": 5, "gated": 5, "base": 3}, HOURS)
    assert a.gpu_hours == 5 * 10 + 5 * 9 + 3 * 8
    assert a.power[1] == pytest.approx(float(ba.claim_power(claims[1], 3, level=0.05 / 3)))


def _scaled(claims: list[ba.BudgetClaim], scale: float) -> list[ba.BudgetClaim]:
    return [ba.BudgetClaim(label=c.label, minuend=c.minuend, subtrahend=c.subtrahend, effect=scale * c.effect, sd=c.sd)
            for c in claims]


def test_allocation_is_never_worse_than_equal_seeds_at_equal_cost():
    """Expected decisive claims, analytic (the objective) and simulated (Holm verdicts, known truth), when the
    allocation is planned at the true effect; planned at the paper's effect while the truth is half of it (an
    assumption broken) it may lose: shown, not claimed."""
    rng = np.random.default_rng(431)
    print(f"\nallocation vs equal seeds per row, Table 1, {REPS} simulated tables per cell (MC SE <= 0.02)")
    print(f"{'spread':8} {'budget':>6} {'truth':>5} {'planned at':>10} {'allocation':>34} {'hours':>6} "
          f"{'E decisive':>10} {'simulated':>9} {'equal':>8} {'hours':>6} {'E decisive':>10} {'simulated':>9}")
    for spread, budget in [("assumed", 150), ("assumed", 300), ("assumed", 600), ("smoke", 500), ("smoke", 2000)]:
        for truth, planned in ((1.0, 1.0), (0.5, 0.5), (0.5, 1.0)):
            claims = _scaled(table1(spread), planned)
            best = ba.allocate(claims, HOURS, budget)
            equal = ba.equal_allocation(claims, HOURS, budget)
            assert best.gpu_hours <= budget + 1e-9 and equal.gpu_hours <= budget + 1e-9
            assert best.expected_decisive >= equal.expected_decisive - ba.TIE
            truth_claims = _scaled(table1(spread), truth)
            s_best, se_best = simulate_decisive(spread, truth_claims, best.seeds, 1.0, rng)
            s_equal, se_equal = simulate_decisive(spread, truth_claims, equal.seeds, 1.0, rng)
            print(f"{spread:8} {budget:6d} {truth:5.1f} {planned:10.1f} {str(best.seeds):>34} {best.gpu_hours:6.0f} "
                  f"{best.expected_decisive:10.2f} {s_best:9.2f} {str(equal.seeds['dyn']) + ' each':>8} "
                  f"{equal.gpu_hours:6.0f} {equal.expected_decisive:10.2f} {s_equal:9.2f}")
            if truth == planned:
                assert s_best >= s_equal - 3 * math.hypot(se_best, se_equal)


def test_greedy_search_close_to_exhaustive_on_small_tables():
    """Random tables small enough for both searches: the greedy and local search's value against the optimum."""
    rng = np.random.default_rng(7)
    gaps = []
    for _ in range(12):
        rows = ["a", "b", "c", "d"]
        claims = [ba.BudgetClaim(label=f"{x}-{y}", minuend=x, subtrahend=y, effect=float(rng.uniform(0.5, 2.0)),
                                 sd=float(rng.uniform(0.5, 2.0))) for x, y in itertools.combinations(rows, 2)
                  if rng.random() < 0.6]
        claims = claims or [ba.BudgetClaim(label="a-b", minuend="a", subtrahend="b", effect=1.0, sd=1.0)]
        hours = {r: float(rng.uniform(1, 4)) for r in rows}
        budget = float(rng.uniform(20, 80))
        used = ba.rows_of(claims)
        caps = [int(budget // hours[r]) for r in used]
        table = ba._power_table(claims, max(caps), 0.05)
        exact = ba._exhaustive(claims, used, caps, table, hours, budget)
        greedy = ba._local_search(claims, used, ba._greedy(claims, used, caps, table, hours, budget), caps, table,
                                  hours, budget)
        v_exact = ba.evaluate(claims, dict(zip(used, exact)), hours).expected_decisive
        v_greedy = ba.evaluate(claims, dict(zip(used, greedy)), hours).expected_decisive
        gaps.append(v_exact - v_greedy)
        assert v_greedy <= v_exact + 1e-9
    print(f"\ngreedy + local search vs exhaustive, 12 random tables: largest gap {max(gaps):.3f} expected claims, "
          f"mean {np.mean(gaps):.4f}")
    assert max(gaps) < 0.1


def test_bad_budgets_are_one_line():
    claims = table1("assumed")
    with pytest.raises(UserError, match="positive number of GPU-hours"):
        ba.allocate(claims, HOURS, 0.0)
    with pytest.raises(UserError, match="no positive price"):
        ba.allocate(claims, {"dyn": 1.0, "gated": 1.0}, 100.0)
    with pytest.raises(UserError, match="no positive seed sd"):
        ba.allocate([ba.BudgetClaim(label="x", minuend="a", subtrahend="b", effect=1.0, sd=math.nan)],
                    {"a": 1.0, "b": 1.0}, 100.0)


# ------------------------------------------------------------------------------------------------ the verb

SDS = ["--seed-sd", "avg6=3.04", "--seed-sd", "val_ppl=0.25"]


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    from exoformer.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_budget_verb_agrees_with_power_and_declares_a_design_once(tmp_path, capsys):
    """`budget table1` prints the seeds for 80% that `power table1` prints for the same spread; `--looks 3`
    writes the design, `--next` reads it; a design after results, or edited, is one line."""
    root = str(tmp_path)
    code, out, _ = _cli(capsys, "power", "table1", *SDS, "--profile", "h100", "--runs-dir", root, "--json")
    assert code == 0
    power = {c["claim"] + ", " + c["column"]: c["seeds_per_row"] for c in json.loads(out)["claims"]}
    code, out, _ = _cli(capsys, "budget", "table1", "--gpu-hours", "500", *SDS, "--profile", "h100",
                        "--runs-dir", root, "--json")
    assert code == 0
    got = json.loads(out)
    assert {c["claim"]: c["seeds_for_80"] for c in got["allocation"]["claims"]} == power
    assert got["allocation"]["gpu_hours"] <= 500 and got["twice_budget"]["gpu_hours"] <= 1000
    code, out, _ = _cli(capsys, "budget", "table1", "--gpu-hours", "500", *SDS, "--profile", "h100",
                        "--runs-dir", root, "--looks", "3")
    assert code == 0 and "sequential design written" in out
    code, out, _ = _cli(capsys, "budget", "table1", "--next", "--runs-dir", root)
    assert code == 0 and "look 0 of 3" in out and "reproduce.py run dynamic-e-exoformer-s42" in out
    design = tmp_path / "designs" / "table1.yaml"
    design.write_text(design.read_text().replace("futility_power: 0.1", "futility_power: 0.01"))
    code, _, err = _cli(capsys, "budget", "table1", "--next", "--runs-dir", root)
    assert code == 2 and "edited after it was written" in err and err.count("\n") == 1
    result = tmp_path / "gated-s42" / "0123456789ab" / "eval"
    result.mkdir(parents=True)
    (result / "long.jsonl").write_text("")
    code, _, err = _cli(capsys, "budget", "table1", "--gpu-hours", "500", *SDS, "--profile", "h100",
                        "--runs-dir", root, "--looks", "3")
    assert code == 2 and "already has results" in err and err.count("\n") == 1


@pytest.mark.parametrize("looks", ["0", "11"])
def test_looks_outside_one_to_ten_is_one_line(looks, tmp_path, capsys):
    """--looks 0 once wrote no design and said nothing; now it is refused like any bad number."""
    code = main(["budget", "table1", "--gpu-hours", "500", "--profile", "h100", "--seed-sd", "avg6=1.4",
                 "--seed-sd", "val_ppl=0.25", "--looks", looks, "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--looks" in err[0] and "1 to 10" in err[0], err
    assert not (tmp_path / "designs").exists()
