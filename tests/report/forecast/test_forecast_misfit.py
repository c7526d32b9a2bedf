"""Forecast intervals that can fail honestly (issue 42 item 5): ladders drawn from laws that are NOT the fitted form.

Each scenario draws ladders of 4 sizes (20M-160M) x 4 budgets at 0.5-2x Chinchilla tokens (10-40 per parameter),
noise sd 0.01, and forecasts two targets: in size (1B at 20 tokens per parameter, 6x the largest size) and in
tokens (640M at 160 per parameter, 4x the size and 8x Chinchilla). Coverage of the law's 95% interval for the true
expected loss, before (the residual bootstrap alone: misfit=False) and after (floored by the ladder's own
out-of-sample misfit, docs/forecast.md). The truths: the fitted form itself (no regression), curvature in log-log,
an interaction term C / (N^a D^b), a break in the size exponent, a break in the data exponent; and two misfits
that a ladder cannot see from inside (strong curvature, a data break whose fitted law agrees one step out but not
at the target): those are printed and asserted only not to get worse.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from exoformer.report.forecast.law import fit_law

CHINCHILLA = dict(E=1.69, A=406.4, alpha=0.34, B=410.7, beta=0.28)
"""Hoffmann et al. (2022), approach 3: the fitted form's truth."""
SIZES = np.array([20e6, 40e6, 80e6, 160e6])
PER_PARAM = np.geomspace(10, 40, 4)
"""Tokens per parameter of the ladder: 0.5-2x Chinchilla's 20."""
TARGETS = {"size": (1e9, 20e9), "tokens": (640e6, 640e6 * 160)}
NOISE = 0.01
REPLICATES = 120
"""Per scenario: the Monte Carlo standard error of a coverage near 95% is 2.0 points, near 90% 2.7."""


def chinchilla(n, d, p=CHINCHILLA):
    return p["E"] + p["A"] / n ** p["alpha"] + p["B"] / d ** p["beta"]


def curved(n, d, bend=0.05):
    """The size term bends in log-log: its local exponent falls by 2 x `bend` per e-fold of N."""
    u = np.log(n / 80e6)
    return CHINCHILLA["E"] + CHINCHILLA["A"] / n ** CHINCHILLA["alpha"] * np.exp(bend * u ** 2) \
        + CHINCHILLA["B"] / d ** CHINCHILLA["beta"]


def interaction(n, d):
    """Another functional form: L = E + A/N^a + B/D^b + C/(N^a D^b)."""
    return chinchilla(n, d) + 3e4 / (n ** CHINCHILLA["alpha"] * d ** CHINCHILLA["beta"])


def broken_size(n, d, knee=80e6, after=0.24):
    """A broken power law: the size exponent falls from 0.34 to `after` above `knee` parameters."""
    size = np.where(n < knee, CHINCHILLA["A"] / n ** CHINCHILLA["alpha"],
                    CHINCHILLA["A"] / knee ** CHINCHILLA["alpha"] * (knee / n) ** after)
    return CHINCHILLA["E"] + size + CHINCHILLA["B"] / d ** CHINCHILLA["beta"]


def broken_data(n, d, knee=2e9, after=0.2):
    """A break in the data exponent: 0.28 below `knee` tokens, `after` above."""
    data = np.where(d < knee, CHINCHILLA["B"] / d ** CHINCHILLA["beta"],
                    CHINCHILLA["B"] / knee ** CHINCHILLA["beta"] * (knee / d) ** after)
    return CHINCHILLA["E"] + CHINCHILLA["A"] / n ** CHINCHILLA["alpha"] + data


SCENARIOS = {"fitted form": chinchilla, "curvature": curved, "interaction": interaction,
             "size exponent break": broken_size, "data exponent break": broken_data,
             "strong curvature": lambda n, d: curved(n, d, bend=0.1),
             "hidden data break": lambda n, d: broken_data(n, d, knee=1e9, after=0.15)}
UNSEEN = ("strong curvature", "hidden data break")
"""Misfits the ladder cannot see from inside: held out one step, the law is still right; at the target it is
2-7% off (docs/forecast.md)."""


def _ladder():
    sizes, per_param = np.meshgrid(SIZES, PER_PARAM)
    return sizes.ravel(), (sizes * per_param).ravel()


def _simulate(truth, seed: int) -> dict[str, dict[str, float]]:
    """Coverage before and after, the median width ratio, and the share of degenerate fits, per target."""
    params, tokens = _ladder()
    rng = np.random.default_rng(seed)
    clean = truth(params, tokens)
    hits = {t: {"before": 0, "after": 0, "widths": [], "errors": []} for t in TARGETS}
    degenerate = 0
    for i in range(REPLICATES):
        fit = fit_law(params, tokens, clean + rng.normal(0, NOISE, len(params)), bootstrap=100, seed=i)
        degenerate += bool(fit.degenerate())
        for name, (n, d) in TARGETS.items():
            true = float(truth(n, d))
            lo0, hi0 = (v[0] for v in fit.interval(n, d, misfit=False))
            lo1, hi1 = (v[0] for v in fit.interval(n, d))
            h = hits[name]
            h["before"] += lo0 <= true <= hi0
            h["after"] += lo1 <= true <= hi1
            h["widths"].append((hi1 - lo1) / (hi0 - lo0))
            h["errors"].append(float(fit.predict(n, d)[0]) / true - 1)
    return {name: {"before": h["before"] / REPLICATES, "after": h["after"] / REPLICATES,
                   "width": float(np.median(h["widths"])), "error": float(np.mean(h["errors"])),
                   "degenerate": degenerate / REPLICATES} for name, h in hits.items()}


@pytest.fixture(scope="module")
def table() -> dict[tuple[str, str], dict[str, float]]:
    out = {}
    for k, (scenario, truth) in enumerate(SCENARIOS.items()):
        for target, cell in _simulate(truth, seed=100 + k).items():
            out[(scenario, target)] = cell
    print(f"\ncoverage of the law's 95% interval, {REPLICATES} ladders per scenario (MC se ~2.0 points at 95%, "
          f"~2.7 at 90%), noise sd {NOISE}; width x: median after / before")
    print(f"{'truth':<20} {'target':<7} {'mean error':>10} {'before':>7} {'after':>7} {'width x':>8} {'no number':>9}")
    for (scenario, target), c in out.items():
        print(f"{scenario:<20} {target:<7} {100 * c['error']:>+9.2f}% {100 * c['before']:>6.1f}% "
              f"{100 * c['after']:>6.1f}% {c['width']:>8.2f} {100 * c['degenerate']:>8.0f}%")
    return out


def _se(p: float) -> float:
    return math.sqrt(p * (1 - p) / REPLICATES)


def test_under_the_fitted_form_coverage_stays_near_95_and_intervals_do_not_blow_up(table):
    for target in TARGETS:
        cell = table[("fitted form", target)]
        assert 0.95 - 2.5 * _se(0.95) <= cell["after"] <= 0.995, (target, cell)
        assert cell["width"] <= 1.6, (target, cell)
        assert cell["degenerate"] == 0.0


def test_where_the_bootstrap_undercovers_the_misfit_floor_restores_coverage(table):
    under = {key: c for key, c in table.items()
             if key[0] not in ("fitted form", *UNSEEN) and c["before"] < 0.9}
    assert len(under) >= 3, table  # the scenarios do break today's intervals
    for key, cell in under.items():
        assert cell["after"] >= 0.9 - 2 * _se(0.9), (key, cell)
    assert np.mean([c["after"] for c in under.values()]) >= 0.9, under


def test_misfits_the_ladder_cannot_see_are_not_made_worse(table):
    for key, cell in table.items():
        assert cell["after"] >= cell["before"], (key, cell)
    assert any(table[(name, target)]["after"] < 0.5 for name in UNSEEN for target in TARGETS)  # the stated limit


# ------------------------------------------------------------------------ degenerate rows and accuracy bounds

def test_a_degenerate_row_prints_one_line_no_number_and_is_not_drawn(monkeypatch, tmp_path):
    """Item 6's degenerate fit: the row whose ladder is 3 sizes x 2 budgets (1 residual dof) prints one line with the
    reason and the ladder that fixes it; no cell, multiplier or JSON number; the figure leaves it out."""
    import json

    from exoformer.registry.registry import Registry
    from exoformer.report.forecast import table_forecast as lf
    from exoformer.report.forecast.figure import draw_forecast
    from exoformer.report.forecast.ladder import Ladder, LadderRun
    from exoformer.report.forecast.render import forecast_json, render_forecast

    def runs(row, sizes, budgets, seed):
        n, d = (a.ravel() for a in np.meshgrid(sizes, budgets))
        loss = chinchilla(n, d) + np.random.default_rng(seed).normal(0, 0.005, len(n))
        return [LadderRun(spec=f"{row}-{i}", params=p, tokens=t, flops_per_token=6 * p, loss=x, values={})
                for i, (p, t, x) in enumerate(zip(n, d, loss))]

    registry = Registry()
    rows = {row.id: runs(row.id, SIZES, SIZES * 20, k) for k, row in enumerate(registry.tables["table1"].rows)}
    rows["gated"] = runs("gated", SIZES[:3], [0.4e9, 0.8e9], 99)
    monkeypatch.setattr(lf, "read_ladder", lambda *a, **k: Ladder(table="table1", group="smoke-ladder", runs=rows))
    got = lf.forecast_table(registry, tmp_path, "table1", "smoke-ladder", preset="smoke", bootstrap=50)
    text = render_forecast(got, {})
    gated = [line for line in text.splitlines() if line.split()[:1] == ["gated"]]
    assert len(gated) == 1 and "(every column) no forecast: 1 residual dof (needs >= 3)" in gated[0], gated
    assert "needs >= 3 sizes x 3 budgets" in gated[0] and "this one: 3 sizes x 2 budgets, 6 runs" in gated[0]
    assert "  gated: none, no law the ladder supports (above)" in text
    assert "effective compute multiplier vs gated: none" in text
    out = forecast_json(got, {})
    assert out["laws"]["gated"]["E"] is None and out["laws"]["gated"]["degenerate"].startswith("no forecast")
    assert all(c["forecast"] is None for c in out["cells"] if c["row"] == "gated")
    assert out["laws"]["base"]["E"] is not None and out["laws"]["base"]["outside"]  # smoke is far below the ladder
    assert "warning: base at smoke: " in text
    assert draw_forecast(got, tmp_path / "f.png", registry) and (tmp_path / "f.png").stat().st_size > 10_000
    from exoformer.report.forecast import figure

    keys = []
    monkeypatch.setattr(figure, "write", lambda fig, *a: keys.extend(
        t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()))
    draw_forecast(got, tmp_path / "key.png", registry)
    assert "ladder run" in keys and "forecast, 95% for one run" in keys
    assert "paper" not in keys and "our smoke run" not in keys  # the key explains only the marks drawn
    for row in rows:  # every row degenerate: no figure at all, rather than empty axes
        rows[row] = runs(row, SIZES[:3], [0.4e9, 0.8e9], 7)
    none = lf.forecast_table(registry, tmp_path, "table1", "smoke-ladder", preset="smoke", bootstrap=50)
    assert not draw_forecast(none, tmp_path / "g.png", registry) and not (tmp_path / "g.png").exists()
    assert "none: no row has a law the ladder supports" in render_forecast(none, {})


def test_the_accuracy_ceiling_stays_between_chance_and_the_task_maximum():
    from exoformer.report.forecast.accuracy import MAXIMUM, AccuracyFit, fit_accuracy, sigmoid

    rng = np.random.default_rng(4)
    loss = np.linspace(2.0, 5.0, 30)
    # a task that saturates: points near 100% pull the ceiling up, but it stops at the maximum
    high = np.minimum(sigmoid(loss, 100.0, 4.0, 3.0, chance=25.0) + rng.normal(0, 3.0, loss.size) + 5, 104.0)
    fit = fit_accuracy("arc_easy", loss, high, chance=25.0, bootstrap=50)
    assert isinstance(fit, AccuracyFit) and 25.0 < fit.params[0] <= MAXIMUM
    assert np.all(fit.boot[:, 0] <= MAXIMUM) and np.all(fit.boot[:, 0] >= 25.0)
    # near chance: the ceiling stays at or above chance
    flat = 25.0 + rng.normal(0, 1.0, loss.size)
    fit = fit_accuracy("arc_easy", loss, flat, chance=25.0, bootstrap=50)
    assert isinstance(fit, str) or fit.params[0] >= 25.0
    with pytest.raises(ValueError, match="chance"):
        fit_accuracy("arc_easy", loss, flat, chance=25.0, maximum=20.0)


def test_an_accuracy_interval_wider_than_half_the_range_is_uninformative():
    """The width is stated in docs/forecast.md: half the range from chance to the maximum (37.5 points at 4 choices)."""
    from exoformer.report.forecast.accuracy import UNINFORMATIVE, uninformative

    assert UNINFORMATIVE == 0.5
    assert uninformative(30.0, 67.5, 25.0) == ""
    why = uninformative(30.0, 67.6, 25.0)
    assert why.startswith("uninformative: the 95% interval [30.0, 67.6] is wider than 37.5 points")
    assert uninformative(50.0, 76.0, 50.0).startswith("uninformative")  # two choices: 25 points


def test_a_table_cell_with_a_wide_accuracy_interval_prints_no_number():
    from exoformer.report.forecast import table_forecast as lf
    from exoformer.report.forecast.accuracy import AccuracyFit
    from exoformer.report.forecast.ladder import Target

    n, d = (a.ravel() for a in np.meshgrid(SIZES, SIZES * 20))
    fit = fit_law(n, d, chinchilla(n, d) + np.random.default_rng(1).normal(0, 0.005, len(n)), bootstrap=50)
    aim = Target(spec="x", preset="p", params=320e6, tokens=6.4e9, flops_per_token=6 * 320e6)
    loss = float(fit.predict(aim.params, aim.tokens)[0])
    reps = fit.replicates(aim.params, aim.tokens)[:, 0]
    params = np.array([70.0, 3.0, loss])
    curve = {"arc_easy": AccuracyFit(chance=25.0, params=params, sigma=1.0, n=40, boot=np.tile(params, (50, 1)))}
    cell = lf._cell("base", "arc_easy", fit, loss, reps, curve, 1.0, 37, aim)
    assert cell.value is not None and cell.hi - cell.lo < 37.5 and not cell.why
    curve["arc_easy"] = AccuracyFit(chance=25.0, params=params, sigma=12.0, n=40, boot=np.tile(params, (50, 1)))
    cell = lf._cell("base", "arc_easy", fit, loss, reps, curve, 1.0, 37, aim)
    assert cell.value is None and cell.why.startswith("uninformative: ")
