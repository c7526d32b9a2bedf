"""The ladder law: it recovers a known law, its intervals cover the truth at an extrapolated point at their stated
rate on ladders drawn with noise, and a ladder that cannot carry a law is refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.report.forecast.law import fit_law

TRUE = dict(E=1.69, A=406.4, alpha=0.34, B=410.7, beta=0.28)
"""The Chinchilla fit (Hoffmann et al. 2022, approach 3) as a known truth."""
SIZES = np.array([20e6, 40e6, 80e6, 160e6])
BUDGETS = np.array([0.4e9, 0.8e9, 1.6e9, 3.2e9])
TARGET = (450e6, 10e9)
"""The paper's 450M / 10B-token cell: 3x the largest size and budget of the ladder, ~9x its compute."""


def law(params, tokens, p=TRUE):
    return p["E"] + p["A"] / np.asarray(params) ** p["alpha"] + p["B"] / np.asarray(tokens) ** p["beta"]


def ladder():
    params, tokens = (a.ravel() for a in np.meshgrid(SIZES, BUDGETS))
    return params, tokens


def test_a_noise_free_ladder_gives_back_the_law():
    params, tokens = ladder()
    fit = fit_law(params, tokens, law(params, tokens), bootstrap=50)
    got = dict(E=fit.E, A=fit.A, alpha=fit.alpha, B=fit.B, beta=fit.beta)
    assert got == pytest.approx(TRUE, rel=1e-6)
    assert fit.predict(*TARGET)[0] == pytest.approx(law(*TARGET), abs=1e-9)


def test_a_noisy_ladder_recovers_the_exponents_on_average():
    params, tokens = ladder()
    rng = np.random.default_rng(11)
    fits = [fit_law(params, tokens, law(params, tokens) + rng.normal(0, 0.003, len(params)), bootstrap=50, seed=i)
            for i in range(40)]
    assert np.median([f.alpha for f in fits]) == pytest.approx(TRUE["alpha"], rel=0.1)
    assert np.median([f.beta for f in fits]) == pytest.approx(TRUE["beta"], rel=0.1)
    assert np.median([f.E for f in fits]) == pytest.approx(TRUE["E"], rel=0.05)


def _coverage(sigma: float, replicates: int, seed: int) -> tuple[float, float, float]:
    """Coverage of the bootstrap's law interval alone, of the law interval with the misfit floor, and of the
    one-run interval (floored) for a fresh noisy run."""
    params, tokens = ladder()
    rng = np.random.default_rng(seed)
    truth = law(*TARGET)
    boot_hits = law_hits = run_hits = 0
    for i in range(replicates):
        fit = fit_law(params, tokens, law(params, tokens) + rng.normal(0, sigma, len(params)), bootstrap=100, seed=i)
        lo, hi = fit.interval(*TARGET, misfit=False)
        boot_hits += bool(lo[0] <= truth <= hi[0])
        lo, hi = fit.interval(*TARGET)
        law_hits += bool(lo[0] <= truth <= hi[0])
        run_lo, run_hi = fit.interval(*TARGET, one_run=True)
        run_hits += bool(run_lo[0] <= truth + rng.normal(0, sigma) <= run_hi[0])
    return boot_hits / replicates, law_hits / replicates, run_hits / replicates


@pytest.mark.slow
def test_intervals_cover_the_truth_at_an_extrapolated_point():
    # 500 ladders drawn from the fitted form: the Monte Carlo standard error of a 95% coverage is 1.0 point. The
    # bootstrap alone: 93-97% (+-2 SE); measured 95.0%. The misfit floor (docs/forecast.md) may only widen it, and
    # under the fitted form not far: measured 97.2% for the law, 96.6% for one run.
    boot_cover, law_cover, run_cover = _coverage(sigma=0.01, replicates=500, seed=3)
    assert 0.93 <= boot_cover <= 0.97, boot_cover
    assert boot_cover <= law_cover <= 0.985, law_cover
    assert 0.93 <= run_cover <= 0.985, run_cover


def test_the_expected_loss_interval_is_inside_the_one_run_interval():
    params, tokens = ladder()
    loss = law(params, tokens) + np.random.default_rng(0).normal(0, 0.01, len(params))
    fit = fit_law(params, tokens, loss, bootstrap=200)
    lo, hi = fit.interval(*TARGET)
    run_lo, run_hi = fit.interval(*TARGET, one_run=True)
    assert run_lo[0] < lo[0] < fit.predict(*TARGET)[0] < hi[0] < run_hi[0]


@pytest.mark.parametrize("case, problem", [
    ("one size", "one model size only"),
    ("one budget", "one token budget only"),
    ("five points", "needs at least 6"),
    ("rising with params", "does not fall with parameters"),
    ("a nan loss", "non-finite"),
])
def test_a_ladder_that_cannot_carry_a_law_is_refused(case, problem):
    params, tokens = ladder()
    loss = law(params, tokens)
    if case == "one size":
        params = np.full_like(params, 20e6)
    elif case == "one budget":
        tokens = np.full_like(tokens, 1e9)
    elif case == "five points":
        params, tokens, loss = params[[0, 1, 4, 5, 10]], tokens[[0, 1, 4, 5, 10]], loss[[0, 1, 4, 5, 10]]
    elif case == "rising with params":
        loss = 5.0 - law(params, np.full_like(tokens, 1e30)) + law(np.full_like(params, 1e30), tokens)
    else:
        loss = loss.copy()
        loss[3] = np.nan
    with pytest.raises(UserError, match=problem):
        fit_law(params, tokens, loss, bootstrap=50)


def _write_ladder(path, *, groups: bool) -> None:
    params, tokens = ladder()
    rng = np.random.default_rng(5)
    lines = ["params,tokens,loss" + (",group" if groups else "")]
    for name, shift in ((("base", 0.0), ("exo", -0.05)) if groups else ((None, 0.0),)):
        loss = law(params, tokens) + shift + rng.normal(0, 0.005, len(params))
        lines += [f"{p:g},{t:g},{x:.6f}" + (f",{name}" if groups else "") for p, t, x in zip(params, tokens, loss)]
    path.write_text("\n".join(lines) + "\n")


class _Done:
    def __init__(self, returncode: int, captured) -> None:
        self.returncode, self.stdout, self.stderr = returncode, captured.out, captured.err


@pytest.fixture
def _predict(capsys):
    def run(*args):
        code = main(["predict", *args])
        return _Done(code, capsys.readouterr())
    return run


def test_predict_points_json_has_one_row_per_group_and_point(tmp_path, _predict):
    csv_file = tmp_path / "ladder.csv"
    _write_ladder(csv_file, groups=True)
    done = _predict("--points", str(csv_file), "--at", "450M:10B", "--at", "1e9:2e10", "--json", "--bootstrap", "200")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["group"], r["params"], r["tokens"]) for r in rows] == [
        ("base", 450e6, 10e9), ("base", 1e9, 2e10), ("exo", 450e6, 10e9), ("exo", 1e9, 2e10)]
    assert all(set(r) == {"group", "params", "tokens", "loss", "lo", "hi", "run_lo", "run_hi", "why"} for r in rows)
    assert all(r["run_lo"] < r["lo"] < r["loss"] < r["hi"] < r["run_hi"] and r["why"] is None for r in rows)
    base, exo = rows[0]["loss"], rows[2]["loss"]
    assert base - exo == pytest.approx(0.05, abs=0.03)


@pytest.mark.parametrize("content, where, words", [
    ("params,tokens\n1,2\n", ":1", "missing ['loss']"),
    ("params,tokens,loss\n20M,1B,abc\n", ":2", "not a finite number"),
    ("params,tokens,loss\n-5,1B,3.0\n", ":2", "not a positive count"),
])
def test_a_bad_points_file_is_one_error_line(tmp_path, _predict, content, where, words):
    csv_file = tmp_path / "ladder.csv"
    csv_file.write_text(content)
    done = _predict("--points", str(csv_file), "--at", "450M:10B")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")
    assert f"{csv_file}{where}" in done.stderr and words in done.stderr


def test_a_points_file_that_is_not_a_regular_file_is_refused(tmp_path, _predict):
    done = _predict("--points", str(tmp_path), "--at", "450M:10B")
    assert done.returncode == 2 and "not a regular file" in done.stderr


def test_a_bad_at_or_bootstrap_is_refused(tmp_path, _predict):
    csv_file = tmp_path / "ladder.csv"
    _write_ladder(csv_file, groups=False)
    assert "PARAMS:TOKENS" in _predict("--points", str(csv_file), "--at", "450M").stderr
    done = _predict("--points", str(csv_file), "--at", "450M:10B", "--bootstrap", "1000000000")
    assert done.returncode == 2 and "bootstrap" in done.stderr


def test_a_law_the_ladder_pins_down_has_no_weak_spots():
    params, tokens = ladder()
    rng = np.random.default_rng(5)
    fits = [fit_law(params, tokens, law(params, tokens) + rng.normal(0, 0.003, len(params)), bootstrap=50, seed=i)
            for i in range(20)]
    assert [f.weak_spots() for f in fits] == [[]] * 20


def test_a_ladder_far_from_the_law_names_its_weak_spots():
    # 3 sizes x 2 budgets whose loss halves between budgets (early training): the fit holds E at 0, needs a
    # steep token exponent and keeps one residual dof, as the CPU smoke ladder does (docs/forecast.md).
    params, tokens = (a.ravel() for a in np.meshgrid([2e5, 3.3e5, 6e5], [92e3, 184e3]))
    loss = np.array([1.72, 1.63, 1.55, 0.86, 0.83, 0.80]) * np.array([1.0, 1.0, 1.0, 1.0, 1.01, 0.99])
    fit = fit_law(params, tokens, loss, bootstrap=50)
    spots = fit.weak_spots()
    assert "1 residual dof (needs >= 3)" in spots
    assert any(spot.startswith(("the floor E", "alpha", "beta")) for spot in spots)
    assert fit.degenerate().startswith("no forecast: ") and "needs >= 3 sizes x 3 budgets" in fit.degenerate()
    assert "this one: 3 sizes x 2 budgets, 6 runs" in fit.degenerate()


@pytest.mark.parametrize("sizes, budgets, words", [
    ([20e6, 40e6], [0.4e9, 0.8e9, 1.6e9, 3.2e9], "cannot leave out its largest size (too few runs left to refit)"),
    ([20e6, 40e6, 80e6, 160e6], [0.4e9, 0.8e9], "cannot leave out its longest budgets (too few runs left"),
])
def test_a_ladder_that_cannot_leave_one_out_prints_no_interval(sizes, budgets, words):
    """Without a size or a budget to leave out, the misfit is not measured: no number, and why."""
    params, tokens = (a.ravel() for a in np.meshgrid(sizes, budgets))
    fit = fit_law(params, tokens, law(params, tokens) + np.random.default_rng(2).normal(0, 0.003, len(params)),
                  bootstrap=50)
    assert np.isnan(fit.misfit) and words in fit.degenerate()


def test_the_misfit_floor_widens_the_interval_by_the_out_of_sample_error_times_the_distance():
    """A ladder from another law (the size exponent falls to 0.24 above 80M): the law without its largest size misses
    it, and the floor is that error per e-fold times the target's e-folds outside the ladder."""
    params, tokens = ladder()
    knee = 80e6
    size = np.where(params < knee, TRUE["A"] / params ** TRUE["alpha"],
                    TRUE["A"] / knee ** TRUE["alpha"] * (knee / params) ** 0.24)
    loss = TRUE["E"] + size + TRUE["B"] / tokens ** TRUE["beta"]
    fit = fit_law(params, tokens, loss, bootstrap=100)
    assert fit.misfit > 1e-3 and not fit.degenerate()
    distance = np.log(TARGET[0] / SIZES[-1]) + np.log(TARGET[1] / BUDGETS[-1])
    assert fit.misfit_half(*TARGET)[0] == pytest.approx(fit.misfit * distance * fit.predict(*TARGET)[0])
    assert fit.misfit_half(SIZES[1], BUDGETS[2])[0] == 0.0  # inside the ladder: no extrapolation, no floor
    lo, hi = fit.interval(*TARGET)
    lo0, hi0 = fit.interval(*TARGET, misfit=False)
    assert (hi - lo)[0] / 2 == pytest.approx(max((hi0 - lo0)[0] / 2, fit.misfit_half(*TARGET)[0]))


def test_a_target_outside_the_ladder_says_how_far():
    params, tokens = ladder()
    fit = fit_law(params, tokens, law(params, tokens), bootstrap=50)
    assert fit.outside(80e6, 1.6e9) == []
    assert fit.outside(*TARGET) == ["compute 6ND 2.7e+19 is 8.79x the ladder's largest"]
    assert fit.outside(20e6, 20e9) == ["tokens per parameter 1e+03 is 6.25x the ladder's largest"]


# ------------------------------------------------------------------ the interaction term gamma (short runs)

N_REF = 80e6


def interacting(params, tokens, gamma=0.3, p=TRUE):
    """A law where a larger model draws more from each token: the data term falls with D (N / N_REF)^gamma."""
    params, tokens = np.asarray(params), np.asarray(tokens)
    return p["E"] + p["A"] / params ** p["alpha"] + p["B"] / (tokens * (params / N_REF) ** gamma) ** p["beta"]


def test_an_interacting_ladder_gives_back_gamma_and_its_forecast():
    params, tokens = ladder()
    fit = fit_law(params, tokens, interacting(params, tokens), bootstrap=50)
    assert fit.k == 6 and fit.interaction_p < 1e-6
    assert fit.gamma == pytest.approx(0.3, rel=1e-4)
    assert fit.predict(*TARGET)[0] == pytest.approx(interacting(*TARGET), rel=1e-6)
    assert "(D N^0.300)^" in fit.formula()


def test_tokens_to_reach_inverts_the_interacting_law():
    from exoformer.report.forecast.law import tokens_to_reach

    params, tokens = ladder()
    fit = fit_law(params, tokens, interacting(params, tokens) + np.random.default_rng(4).normal(0, 0.002, 16),
                  bootstrap=50)
    assert fit.k == 6
    point, boot = tokens_to_reach(fit, TARGET[0], float(fit.predict(*TARGET)[0]))
    assert point == pytest.approx(TARGET[1], rel=1e-6)
    assert np.median(boot) == pytest.approx(TARGET[1], rel=0.2)


def test_a_ladder_with_one_budget_per_size_keeps_the_five_parameter_law():
    """One budget per size (10-40 tokens per parameter) cannot tell gamma from the size term: it is not tried."""
    params = np.geomspace(20e6, 640e6, 8)
    tokens = params * np.array([10, 40, 20, 15, 30, 25, 12, 35])
    fit = fit_law(params, tokens, interacting(params, tokens), bootstrap=50)
    assert fit.k == 5 and np.isnan(fit.interaction_p) and fit.gamma == 0.0


@pytest.mark.slow
def test_gamma_is_kept_at_the_f_tests_rate_and_found_when_it_is_there():
    # 200 ladders per truth, noise sd 0.003 (MC se 1.5 points at 5%). Under the Chinchilla form gamma = 0 is
    # true and the F test keeps gamma at about its level, 5%; under gamma = 0.3 it keeps it nearly always, and
    # the law's interval at the extrapolated target then covers the truth near its 95%.
    params, tokens = ladder()
    rng = np.random.default_rng(21)
    kept = {"chinchilla": 0, "gamma": 0}
    cover = 0
    truth = interacting(*TARGET)
    for i in range(200):
        plain = fit_law(params, tokens, law(params, tokens) + rng.normal(0, 0.003, 16), bootstrap=50, seed=i)
        kept["chinchilla"] += plain.k == 6
        wide = fit_law(params, tokens, interacting(params, tokens) + rng.normal(0, 0.003, 16), bootstrap=100, seed=i)
        kept["gamma"] += wide.k == 6
        lo, hi = wide.interval(*TARGET)
        cover += bool(lo[0] <= truth <= hi[0])
    print(f"\ngamma kept: {kept['chinchilla'] / 2:.1f}% under Chinchilla, {kept['gamma'] / 2:.1f}% under gamma = 0.3; "
          f"coverage at the target {cover / 2:.1f}%")
    assert kept["chinchilla"] <= 18  # 9%: the level plus 2.7 MC se
    assert kept["gamma"] >= 190
    assert 0.91 <= cover / 200 <= 0.995


def test_an_alpha_that_only_bends_the_smallest_size_is_no_weak_spot():
    """Short runs: a larger model's gain shows through gamma, and the smallest size alone falls off the law (a steep
    size term, alpha at its bound). Its term is below the runs' scatter from the largest size on, so a target past
    the ladder forecasts through the other terms: the law prints a number and says why alpha is where it is."""
    from exoformer.report.forecast.law import pinned

    params, tokens = ladder()
    bend = 0.05 * (SIZES[0] / params) ** 12
    noise = np.random.default_rng(8).normal(0, 0.002, len(params))
    fit = fit_law(params, tokens, interacting(params, tokens, p=dict(TRUE, A=1e-9)) + bend + noise, bootstrap=50)
    assert fit.k == 6 and fit.alpha >= 2.5, (fit.alpha, fit.formula())
    assert fit.size_negligible and not fit.degenerate()
    assert any(s.startswith("alpha") for s in pinned(fit.E, fit.alpha, fit.beta, fit.gamma))
    assert fit.predict(*TARGET)[0] == pytest.approx(interacting(*TARGET, p=dict(TRUE, A=1e-9)), rel=0.01)
