"""The declared sequential design (exoformer/report/stats/sequential.py): simulations with known truth (issue 43
item 4) and the design file's refusals (item 2).

Table 1's three claims share the dynamic-e-exoformer row: avg6 against gated (+1.47) and base (+2.13), val_ppl
against gated (-0.55), as experiments/claims.yaml states them. Each row's per-seed value is its true effect plus
its own seed scatter (a data order shared by every row cancels in a paired difference). Spreads: "smoke", the
avg6 seed sd measured on smoke runs (dynamic-e-exoformer 3.02, the others 0.36 as resformer's), and "assumed",
1.0 per row; val_ppl's sd 0.18 per row in both (not measured: assumed). Truths: no effect, half the paper's,
the paper's. Every generator is seeded; `pytest -s` prints the tables.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from exoformer.errors import UserError
from exoformer.report.stats import budget_allocation as ba
from exoformer.report.stats import replication as rep
from exoformer.report.stats import sequential as sq

NULL_REPS = 20_000
"""Null replicates per cell: MC SE of a 5% family rate sqrt(.05 * .95 / 20000) = 0.0015."""
POWER_REPS = 8_000
"""Replicates per cell under an effect: MC SE of a power near 0.9 at most 0.0034 (0.0056 at 0.5)."""
PPL = {"dyn": 0.18, "gated": 0.18, "base": 0.18}
ROW_SD = {"smoke": {"avg6": {"dyn": 3.02, "gated": 0.36, "base": 0.36}, "val_ppl": PPL},
          "assumed": {"avg6": {"dyn": 1.0, "gated": 1.0, "base": 1.0}, "val_ppl": PPL}}
CLAIMS = [("avg6 dyn - gated", "dyn", "gated", "avg6", 1.47), ("avg6 dyn - base", "dyn", "base", "avg6", 2.13),
          ("val_ppl dyn - gated", "dyn", "gated", "val_ppl", -0.55)]
ROWS = ("dyn", "gated", "base")


def plan_claims(spread: str) -> list[sq.PlanClaim]:
    sds = ROW_SD[spread]
    return [sq.PlanClaim(label=label, minuend=a, subtrahend=b, column=col, paper=paper,
                         sd=float(math.hypot(sds[col][a], sds[col][b]))) for label, a, b, col, paper in CLAIMS]


def planned_seeds(claims: list[sq.PlanClaim], power: float = 0.9) -> int:
    """Seeds per row (every row alike) that give each claim `power` in the fixed design, as `power TABLE`."""
    return max(ba.seeds_for_power(ba.BudgetClaim(label=c.label, minuend=c.minuend, subtrahend=c.subtrahend,
                                                 effect=c.paper, sd=c.sd), m=len(claims), power=power)
               for c in claims)


def simulate(spread: str, scale: float, seeds: int, reps: int, rng: np.random.Generator, *,
             tails: str = "normal") -> list[np.ndarray]:
    """Per-claim paired differences (reps, seeds) with the true effect `scale` times the paper's."""
    values = {}
    for col, sds in ROW_SD[spread].items():
        for row in ROWS:
            if tails == "normal":
                noise = rng.standard_normal((reps, seeds))
            else:  # Student t with 3 df scaled to unit sd: heavy tails break the t test's normality
                noise = rng.standard_t(3, (reps, seeds)) / math.sqrt(3.0)
            values[col, row] = sds[row] * noise
    return [values[col, a] - values[col, b] + scale * paper for _, a, b, col, paper in CLAIMS]


def naive_rate(diffs: list[np.ndarray], pairs: list[int], alpha: float = 0.05) -> float:
    """Before: Holm at alpha after every batch, stopping at the first significant claim (no spending)."""
    hit = np.zeros(diffs[0].shape[0], dtype=bool)
    for n in pairs:
        p = np.stack([rep.seed_statistics(d[:, :n]).p for d in diffs], axis=1)
        hit |= np.any(rep.holm(p) < alpha, axis=1)
    return float(hit.mean())


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 0.25 / n) / n)


def test_family_wise_false_verdicts_under_no_effect_stay_at_five_percent():
    """Under no effect, every look taken (futility ignored) or futility followed: at most 5% within 3 MC SE."""
    rng = np.random.default_rng(43)
    print(f"\nfamily-wise false-verdict rate, no effect, 3 claims (Holm), {NULL_REPS} replicates per cell "
          f"(MC SE 0.0015)")
    print(f"{'spread':8} {'tails':7} {'spending':15} {'looks':>5} {'seeds/row':>12} {'naive':>7} "
          f"{'all looks':>9} {'futility':>9}")
    rates = []
    cells = [("assumed", "normal", "obrien-fleming", 3), ("assumed", "normal", "pocock", 3),
             ("assumed", "normal", "obrien-fleming", 5), ("smoke", "normal", "obrien-fleming", 3),
             ("smoke", "normal", "pocock", 4), ("assumed", "t3", "obrien-fleming", 3), ("smoke", "t3", "pocock", 3)]
    for spread, tails, spending, looks in cells:
        claims = plan_claims(spread)
        n = planned_seeds(claims)
        design = sq.make_design("table1", claims, dict.fromkeys(ROWS, n), looks=looks, spending=spending)
        diffs = simulate(spread, 0.0, n, NULL_REPS, rng, tails=tails)
        every = sq.sequential_verdicts(design, diffs, futility=False)
        stopping = sq.sequential_verdicts(design, diffs)
        r_all = float(np.any(every.state == sq.DECIDED, axis=1).mean())
        r_fut = float(np.any(stopping.state == sq.DECIDED, axis=1).mean())
        naive = naive_rate(diffs, design.claims[0].pairs)
        print(f"{spread:8} {tails:7} {spending:15} {looks:>5} {str(design.seeds['dyn']):>12} {naive:7.4f} "
              f"{r_all:9.4f} {r_fut:9.4f}")
        rates.append((tails, naive, r_all, r_fut))
    for tails, naive, r_all, r_fut in rates:
        assert r_fut <= r_all + 1e-12  # non-binding futility only ever removes verdicts
        assert r_all <= 0.05 + 3 * 0.0015
    assert max(naive for _, naive, _, _ in rates) > 0.07  # looking without spending inflates the rate


def _fixed_equal_power(spread: str, target: float, seeds_max: int, rng: np.random.Generator) -> tuple[int, float]:
    """The smallest equal seeds per row whose fixed design (one look, Holm) decides at least `target` claims the
    paper's way in expectation, and what it decides."""
    claims = plan_claims(spread)
    diffs = simulate(spread, 1.0, seeds_max, POWER_REPS, rng)
    signs = np.sign([c.paper for c in claims])
    for n in range(3, seeds_max + 1):
        fixed = sq.make_design("table1", claims, dict.fromkeys(ROWS, n), looks=1)
        out = sq.sequential_verdicts(fixed, [d[:, :n] for d in diffs])
        decided = float(((out.state == sq.DECIDED) & (out.sign == signs)).sum(axis=1).mean())
        if decided >= target:
            return n, decided
    raise AssertionError("no fixed design within the seeds simulated reaches the target")


def test_power_and_expected_seeds_against_the_fixed_design_of_equal_power():
    """Power at least the design's minus 2 points; at the paper's effects at least 20% fewer expected seeds than
    the fixed design that decides as many claims."""
    rng = np.random.default_rng(4343)
    print(f"\nsequential design at 90% planned power per claim, {POWER_REPS} replicates per cell "
          "(power MC SE <= 0.0056)")
    print(f"{'spread':8} {'spending':15} {'truth':>6} {'planned':>20} {'power (same sign)':>22} "
          f"{'E seeds':>8} {'max':>4} {'fixed equal power':>18} {'saved':>6}")
    for spread, spending, looks in [("assumed", "obrien-fleming", 3), ("assumed", "pocock", 3),
                                    ("smoke", "obrien-fleming", 3), ("smoke", "pocock", 3)]:
        claims = plan_claims(spread)
        n = planned_seeds(claims)
        design = sq.make_design("table1", claims, dict.fromkeys(ROWS, n), looks=looks, spending=spending)
        planned = np.array([c.planned_power for c in design.claims])
        signs = np.sign([c.paper for c in claims])
        for scale in (1.0, 0.5):
            out = sq.sequential_verdicts(design, simulate(spread, scale, n, POWER_REPS, rng))
            power = ((out.state == sq.DECIDED) & (out.sign == signs)).mean(axis=0)
            seeds = float(out.seeds_used(design).mean())
            row = (f"{spread:8} {spending:15} {scale:6.1f} {str(np.round(planned, 3)):>20} "
                   f"{str(np.round(power, 3)):>22} {seeds:8.1f} {3 * n:4d}")
            if scale == 1.0:
                for p, target in zip(power, planned, strict=True):
                    assert p >= target - 0.02 - 3 * _se(p, POWER_REPS)
                n_fixed, _ = _fixed_equal_power(spread, float(power.sum()), int(1.3 * n) + 2, rng)
                saved = 1.0 - seeds / (3 * n_fixed)
                row += f" {3 * n_fixed:10d} ({n_fixed}/row) {saved:6.0%}"
                assert saved >= 0.20
            print(row)


def test_boundaries_spend_the_declared_alpha_on_fresh_null_paths():
    """Each look's crossing probability on null paths other than the calibration's: the spending function's
    share within MC error; and the t boundaries exceed the normal ones at few seeds."""
    pairs = (3, 6, 9)
    bounds = sq.boundaries(pairs, (0.05,), spending="obrien-fleming", sided=2)[0]
    stat = np.abs(sq._null_t(pairs, 400_000, seed=7))
    alive = np.ones(stat.shape[0], dtype=bool)
    shares = np.diff(np.concatenate([[0.0], sq.spent("obrien-fleming", 0.05, np.array(pairs) / 9)]))
    print(f"\nlook crossing on 400000 fresh null paths, pairs {pairs}, O'Brien-Fleming at 0.05")
    for k, share in enumerate(shares):
        crossed = alive & (stat[:, k] >= bounds[k])
        rate = float(crossed.mean())
        print(f"look {k + 1}: boundary t {bounds[k]:.3f}, spent {share:.5f}, crossed {rate:.5f}")
        assert abs(rate - share) <= 4 * math.sqrt(share / 400_000) + 1e-5
        alive &= ~crossed
    large = sq.boundaries((200, 400, 600), (0.05,), spending="obrien-fleming", sided=2)[0]
    assert np.allclose(large, [3.471, 2.454, 2.004], atol=0.05)  # Lan-DeMets O'Brien-Fleming, normal limit
    assert np.all(bounds[1:] > large[1:])


def test_equivalence_claim_false_equivalence_at_the_margin():
    """An equivalence claim (TOST at the boundary) whose truth sits on the margin: "equivalent" at most alpha."""
    rng = np.random.default_rng(5)
    claim = sq.PlanClaim(label="no loss", minuend="a", subtrahend="b", column="avg6", paper=0.0, sd=1.0, margin=1.0)
    design = sq.make_design("t", [claim], {"a": 24, "b": 24}, looks=3)
    d = rng.standard_normal((NULL_REPS, 24)) + 1.0
    rate = float((sq.sequential_verdicts(design, [d], futility=False).state == sq.DECIDED).mean())
    good = rng.standard_normal((POWER_REPS, 24))
    power = float((sq.sequential_verdicts(design, [good]).state == sq.DECIDED).mean())
    print(f"\nequivalence within +-1 sd, 24 seeds in 3 looks: false equivalence {rate:.4f} ({NULL_REPS} reps), "
          f"power at 0 {power:.3f} (planned {design.claims[0].planned_power:.3f})")
    assert rate <= 0.05 + 3 * 0.0015
    assert power >= design.claims[0].planned_power - 0.02 - 3 * _se(power, POWER_REPS)


# ------------------------------------------------------------------------------------------------ the file

class _Registry:
    """The little of a registry table_has_results reads."""

    def __init__(self):
        row = type("Row", (), {"specs": ("dyn-s42", "dyn-s1337")})()
        self.tables = {"table1": type("Table", (), {"rows": (row,)})()}


def _design() -> sq.Design:
    return sq.make_design("table1", plan_claims("assumed"), dict.fromkeys(ROWS, 9), looks=3, budget_gpu_hours=500.0,
                          hours_per_run=dict.fromkeys(ROWS, 10.0))


def test_design_file_round_trips_and_refuses_edits_and_late_designs(tmp_path):
    design = _design()
    path = sq.write_design(design, tmp_path, has_results=False)
    assert path == tmp_path / "designs" / "table1.yaml"
    back = sq.read_design(tmp_path, "table1")
    assert back.digest == design.digest and back.content() == design.content()
    assert sq.read_design(tmp_path, "table2") is None
    text = path.read_text()
    path.write_text(text.replace("obrien-fleming", "pocock"))
    with pytest.raises(UserError, match="edited after it was written") as err:
        sq.read_design(tmp_path, "table1")
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="already has results"):
        sq.write_design(design, tmp_path, has_results=True)


def test_table_has_results_sees_any_run_with_a_result(tmp_path):
    registry = _Registry()
    run = tmp_path / "dyn-s1337" / "0123456789ab"
    (run / "eval").mkdir(parents=True)
    assert not sq.table_has_results(registry, tmp_path, "table1")
    (run / "eval" / "validation.json").write_text("{}")
    assert sq.table_has_results(registry, tmp_path, "table1")


def test_verdict_uses_only_the_declared_seeds_and_boundaries():
    """Seeds beyond a look's declared count change nothing; the boundary printed is the declared one."""
    rng = np.random.default_rng(11)
    design = _design()
    diffs = simulate("assumed", 1.0, 9, 1, rng)
    out = sq.sequential_verdicts(design, [d[:, :6] for d in diffs])
    assert out.looks_taken == 2
    extra = sq.sequential_verdicts(design, [np.concatenate([d[:, :6], [[1e6]]], axis=1) for d in diffs])
    assert extra.looks_taken == 2 and np.array_equal(extra.state, out.state)
    left = len(design.claims) - int(np.sum(out.state == sq.DECIDED))
    for i, c in enumerate(design.claims):
        if out.state[0, i] == sq.OPEN:
            declared = 2 * stats.t.sf(c.boundaries[left - 1][1], c.pairs[1] - 1)
            assert math.isclose(float(out.boundary_p[0, i]), declared, rel_tol=1e-9)
    lines = [sq.verdict_line(design, out, i) for i in range(3)]
    assert all(line.startswith("look 2 of 3: p ") for line in lines), lines
    with pytest.raises(UserError, match="fewer are run"):
        sq.sequential_verdicts(design, [d[:, :6] for d in diffs], looks=3)


def test_holm_passes_level_to_the_open_claims():
    """A claim decided raises the others' level: a claim just short of alpha/3's boundary but past alpha/2's is
    decided once another claim is."""
    design = sq.make_design("t", plan_claims("assumed"), dict.fromkeys(ROWS, 12), looks=1)
    b = design.boundary_table()[:, :, 0]  # (claims, levels)
    n = design.claims[0].pairs[0]
    base = np.linspace(-1, 1, n)
    base = base / base.std(ddof=1)  # sd 1, mean 0
    t_between = 0.5 * (b[1, 1] + b[1, 2])  # between the alpha/2 and alpha/3 boundaries of claim 1
    diffs = [base[None, :] + 100.0, base[None, :] + t_between / math.sqrt(n), base[None, :]]
    out = sq.sequential_verdicts(design, diffs)
    assert out.state[0, 0] == sq.DECIDED and out.state[0, 1] == sq.DECIDED and out.state[0, 2] == sq.OPEN
    alone = sq.sequential_verdicts(design, [base[None, :], diffs[1], base[None, :]])
    assert alone.state[0, 1] == sq.OPEN


def test_bad_designs_are_one_line():
    with pytest.raises(UserError, match="looks need at least"):
        sq.look_seeds(3, 3)
    with pytest.raises(UserError, match="spending"):
        sq.make_design("t", plan_claims("assumed"), dict.fromkeys(ROWS, 9), looks=3, spending="linear")


def test_expected_use_falls_with_the_effect():
    """The design's simulated expected GPU-hours: below the maximum at the paper's effects, near it at none."""
    design = sq.make_design("table1", plan_claims("assumed"), dict.fromkeys(ROWS, 16), looks=3,
                            hours_per_run=dict.fromkeys(ROWS, 10.0))
    paper = sq.expected_use(design, scale=1.0)[1]
    none = sq.expected_use(design, scale=0.0)[1]
    assert paper < 0.85 * design.max_gpu_hours() and paper < none <= design.max_gpu_hours()


def test_lines_name_the_look_the_boundary_and_the_stop():
    """A claim far on the paper's side stops decided; one against the paper's small effect stops futile, saying
    what it would need; the others continue."""
    design = sq.make_design("table1", plan_claims("assumed"), dict.fromkeys(ROWS, 12), looks=3)
    n = design.claims[0].pairs[0]
    wiggle = np.linspace(-1, 1, n)[None, :]
    diffs = [wiggle * 4.0 - 1.0, wiggle + 0.5, wiggle * 0.01 - 5.0]  # futile, open, decided the paper's way
    out = sq.sequential_verdicts(design, diffs)
    lines = [sq.verdict_line(design, out, i) for i in range(3)]
    print("\n" + "\n".join(lines))
    assert lines[0].startswith("look 1 of 3: p ") and "stop: futile (conditional power" in lines[0]
    assert "would need" in lines[0] or "no seed count" in lines[0]
    assert "continue to look 2" in lines[1]
    assert "stop: decided at look 1, same direction as the paper" in lines[2]
