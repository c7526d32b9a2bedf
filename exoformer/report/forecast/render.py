"""A table forecast (report/forecast/table_forecast.py) as the lines `predict TABLE --from LADDER` prints, and as JSON."""

from __future__ import annotations

import math

from exoformer.report.forecast.accuracy import AccuracyFit
from exoformer.report.forecast.law import INTERACTION_P, N_PARAMS, pinned
from exoformer.report.forecast.table_forecast import CellForecast, TableForecast
from exoformer.report.tables.build import PERPLEXITY


def count(value: float) -> str:
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _mark(cell: CellForecast, value: float | None) -> str:
    inside = cell.inside(value)
    return "" if inside is None else (" (in)" if inside else " (OUT)")


def _cell_line(f: TableForecast, cell: CellForecast, width: int) -> str:
    head = f"{cell.row:<{width}} {cell.column:<14}"
    if cell.value is None:
        return f"{head} {cell.why}" + (f"  {f.comparable}" if f.comparable else "")
    text = f"{head} {cell.value:>8.2f} [{cell.lo:.2f}, {cell.hi:.2f}]"
    if f.comparable:
        return f"{text}  {f.comparable}"
    paper = f"paper {_num(cell.paper)}{_mark(cell, cell.paper)}" if f.paper_scale else "paper: other scale"
    return f"{text}  {paper}  ours {_num(cell.ours)}{_mark(cell, cell.ours)}"


def _rate(f: TableForecast, source: str, what: str) -> str:
    inside, known = f.hit_rate(source)
    if f.comparable:
        return f"hit rate vs {what}: not computed ({f.comparable})"
    if source == "paper" and not f.paper_scale:
        return f"hit rate vs {what}: not computed (the paper ran at another preset)"
    if not known:
        return f"hit rate vs {what}: no known cell"
    return f"hit rate vs {what}: {inside}/{known} cells inside their 95% interval ({100 * inside / known:.0f}%)"


def render_forecast(f: TableForecast, prices: dict[str, tuple[str, float]]) -> str:
    runs = sum(len(r) for r in f.ladder.runs.values())
    aim = next(iter(f.targets.values()))
    lines = [f"predict {f.table} from ladder {f.group} ({runs} runs, preset {'/'.join(sorted(f.ladder.presets))}) "
             f"at preset {f.preset}: D = {count(aim.tokens)} tokens, N per row below"]
    if f.comparable:
        lines.append(f"{f.comparable} (its data, vocabulary or suite differ from {f.preset}'s): the numbers below "
                     "extrapolate the ladder's own law")
    width = max(len(r) for r in f.laws)
    lines.append("loss law per row, L = ln(val_ppl) = E + A/N^alpha + B/(D N^gamma)^beta (gamma 0 unless an F test "
                 "keeps it):")
    for row, law in f.laws.items():
        t = f.targets[row]
        if law.degenerate():
            continue  # no number: its one line, with the reason and the fix, is in the cells below
        lines.append(f"  {row:<{width}} E {law.E:.3f}  A {law.A:.4g}  alpha {law.alpha:.3f}  B {law.B:.4g}  "
                     f"beta {law.beta:.3f}  gamma {law.gamma:.3f}{_kept(law)}{_faded(law)}  (n={law.n}, residual sd "
                     f"{law.sigma:.3g}, {law.dof} dof, out-of-sample misfit {100 * law.misfit:.2g}% per e-fold; "
                     f"target N {count(t.params)})")
    for row, law in f.laws.items():
        t = f.targets[row]
        if not law.degenerate() and (outside := law.outside(t.params, t.tokens)):
            lines.append(f"warning: {row} at {f.preset}: {', '.join(outside)}: the forecast extrapolates the law "
                         "outside its runs")
    lines.append("loss -> accuracy (%), pooled over the ladder's rows: "
                 "chance + (top - chance) / (1 + exp(k (L - L0))):")
    for task, fit in f.accuracy.items():
        if isinstance(fit, AccuracyFit):
            top, k, l0 = fit.params
            lines.append(f"  {task:<14} chance {fit.chance:.0f}  top {top:.1f}  k {k:.3g}  L0 {l0:.3f}  "
                         f"(n={fit.n}, residual sd {fit.sigma:.3g})")
        else:
            lines.append(f"  {task:<14} {fit}")
    lines.append(f"{'ROW':<{width}} {'COLUMN':<14} FORECAST [95% for one run]")
    said = set()
    for cell in f.cells.values():
        if f.laws[cell.row].degenerate():  # one line per row: the reason and the ladder that would fix it
            if cell.row not in said:
                said.add(cell.row)
                lines.append(f"{cell.row:<{width}} {'(every column)':<14} {cell.why}"
                             + (f"  {f.comparable}" if f.comparable else ""))
            continue
        lines.append(_cell_line(f, cell, width))
    lines.append(_rate(f, "paper", "the paper"))
    lines.append(_rate(f, "ours", f"our {f.preset} runs"))
    lines += _multiplier_lines(f)
    lines += _claim_lines(f, prices)
    lines.append("intervals: 95% for one run at the target: the law's residual bootstrap (t with n-k dof, k its 5 or 6 parameters), or its "
                 "out-of-sample misfit x the distance outside the ladder if wider, plus one run's scatter; accuracies "
                 "add the loss->accuracy curve's bootstrap and residual spread (docs/forecast.md)")
    lines += f.ladder.notes
    return "\n".join(lines)


def _multiplier_lines(f: TableForecast) -> list[str]:
    if not f.multipliers:
        return ["effective compute multiplier: the table's claims name no reference row"]
    out = []
    for ref in dict.fromkeys(m.reference for m in f.multipliers):
        if f.laws[ref].degenerate():
            out.append(f"effective compute multiplier vs {ref}: none, {ref} has no law the ladder supports (above)")
            continue
        out.append(f"effective compute multiplier vs {ref}: the reference's tokens (at its own size) to reach each "
                   f"row's forecast loss / the target's tokens [95%]" + (f"  {f.comparable}" if f.comparable else ""))
        for m in (m for m in f.multipliers if m.reference == ref):
            mark = f"  {f.comparable}" if f.comparable else ""
            if m.why:
                out.append(f"  {m.row}: none, no law the ladder supports (above){mark}")
            elif not math.isfinite(m.value):
                out.append(f"  {m.row}: unreachable (the forecast loss is below the reference's floor at its "
                           f"size){mark}")
            else:
                hi = "inf" if not math.isfinite(m.hi) else f"{m.hi:.3g}"
                out.append(f"  {m.row}: {m.value:.3g}x [{m.lo:.3g}, {hi}]{mark}")
    return out


def _claim_lines(f: TableForecast, prices: dict[str, tuple[str, float]]) -> list[str]:
    if not f.claims:
        return ["forecast verdicts: the table has no paper difference (experiments/claims.yaml)"]
    pooled = (f"sd {f.pooled_sigma:.3g} in ln ppl with {f.pooled_dof} dof" if f.pooled_dof else
              "none: no row has a law the ladder supports")
    out = [f"forecast verdicts at {f.preset} (P of `replicates`, t test at alpha/{len(f.claims)}; seed sd from the "
           f"ladder: {PERPLEXITY} from the law residuals pooled over rows, {pooled}; accuracies from the curves' "
           f"residuals)" + (f"  {f.comparable}" if f.comparable else "")]
    for c in f.claims:
        claim = c.claim
        head = f"  {claim.minuend} - {claim.subtrahend}, {claim.column} (paper {claim.value:+g})"
        mark = f"  {f.comparable}" if f.comparable else ""
        if c.verdict is None:
            out.append(f"{head}: {c.why}{mark}")
            continue
        v = c.verdict
        need = (f"K = {v.seeds_for_80} seeds per row for 80%" if v.seeds_for_80 is not None else
                f"no K <= 40 reaches 80% (best {100 * v.best[1]:.0f}% at K = {v.best[0]})")
        cost = ""
        rows = (claim.minuend, claim.subtrahend)
        if v.seeds_for_80 is not None and all(r in prices for r in rows):
            cost = f" ({v.seeds_for_80 * sum(prices[r][1] for r in rows):,.1f} {prices[rows[0]][0]})"
        out.append(f"{head}: forecast {c.diff:+.3g} (se {c.diff_se:.2g}), seed sd {c.seed_sd:.2g} "
                   f"({c.seed_dof:g} dof): P(replicates) {100 * v.probability:.0f}% with {v.seeds} seeds; {need}{cost}"
                   f"{mark}")
    return out


def _faded(law) -> str:
    """A word on an alpha its runs do not place, where that is allowed (law.LawFit.size_negligible)."""
    if law.size_negligible and "alpha" in " ".join(pinned(law.E, law.alpha, law.beta)):
        return " (alpha at its bound: the size term is below the runs' scatter from the largest size on)"
    return ""


def _kept(law) -> str:
    """Why gamma is what it is, in a few words."""
    p = law.interaction_p
    if not math.isfinite(p):
        return " (not tested: the ladder cannot tell it from the size term)"
    if law.k > N_PARAMS:
        return f" (F test p {p:.2g})"
    if p < INTERACTION_P:
        return f" (F test p {p:.2g}, kept at 0: with gamma the fit pins another parameter at an edge)"
    return f" (F test p {p:.2g}: kept at 0)"


def _law_numbers(law) -> dict:
    """The law's numbers, or None for each when it is degenerate: such a law prints no number, in JSON too."""
    names = ("E", "A", "alpha", "B", "beta", "gamma", "sigma")
    numbers = {name: None if law.degenerate() else getattr(law, name) for name in names}
    p = law.interaction_p
    return {**numbers, "gamma_f_test_p": p if math.isfinite(p) else None}


def forecast_json(f: TableForecast, prices: dict[str, tuple[str, float]]) -> dict:
    def num(x):
        return None if x is None or not math.isfinite(x) else x

    return {"table": f.table, "ladder": f.group, "preset": f.preset, "comparable": not f.comparable,
            "not_comparable": f.comparable or None,
            "laws": {row: {**_law_numbers(law), "n": law.n, "params": f.targets[row].params,
                           "tokens": f.targets[row].tokens,
                           "weak_spots": law.weak_spots(), "degenerate": law.degenerate() or None,
                           "misfit_per_efold": num(law.misfit),
                           "outside": law.outside(f.targets[row].params, f.targets[row].tokens)}
                     for row, law in f.laws.items()},
            "interval": "95% for one run at the target",
            "cells": [{"row": c.row, "column": c.column, "forecast": c.value, "lo": c.lo, "hi": c.hi,
                       "why": c.why or None, "paper": c.paper, "ours": c.ours} for c in f.cells.values()],
            "hit_rate": {"paper": f.hit_rate("paper"), "ours": f.hit_rate("ours")},
            "multipliers": [{"row": m.row, "reference": m.reference, "value": num(m.value), "lo": num(m.lo),
                             "hi": num(m.hi), "why": m.why or None} for m in f.multipliers],
            "verdicts": [{"claim": f"{c.claim.minuend} - {c.claim.subtrahend}", "column": c.claim.column,
                          "paper": c.claim.value, "forecast": c.diff, "se": c.diff_se, "seed_sd": c.seed_sd,
                          "seed_dof": c.seed_dof, "why": c.why or None,
                          "p_replicates": None if c.verdict is None else c.verdict.probability,
                          "seeds": None if c.verdict is None else c.verdict.seeds,
                          "seeds_for_80": None if c.verdict is None else c.verdict.seeds_for_80}
                         for c in f.claims],
            "prices": {row: {"unit": unit, "per_run": cost} for row, (unit, cost) in prices.items()}}
