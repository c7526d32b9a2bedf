"""A table forecast from its ladder: per row the loss law L(N, D) (report/forecast/law.py), per task the loss ->
accuracy curve pooled over the rows (report/forecast/accuracy.py), every cell at the target preset with a 95%
interval for one run there, beside the paper's value and our own run's where they are comparable; the effective
compute multiplier of each row against each reference row of the table's claims; the forecast verdicts
(report/forecast/verdicts.py). docs/forecast.md says how each number is made.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from exoformer.eval.task_facts import TASK_FACTS
from exoformer.registry.registry import Registry
from exoformer.registry.reported import load_reported
from exoformer.report.tables.compose import compose
from exoformer.report.forecast.accuracy import (MAXIMUM, AccuracyFit, binomial_variance, fit_accuracy, run_excess,
                                                uninformative)
from exoformer.report.forecast.ladder import Ladder, Target, read_ladder, targets
from exoformer.report.forecast.verdicts import VerdictForecast, forecast_verdict
from exoformer.report.forecast.law import LawFit, fit_law, tokens_to_reach
from exoformer.report.reading.selection import Selection
from exoformer.report.tables.build import AVERAGE, PERPLEXITY, TASKS
from exoformer.report.tables.verdicts import PaperDifference, paper_differences

LEVEL = 0.95


@dataclass(slots=True)
class CellForecast:
    row: str
    column: str
    value: float | None = None
    lo: float | None = None
    hi: float | None = None
    """The 95% interval for one run at the target (law and curve uncertainty plus one run's scatter)."""
    why: str = ""
    """Why there is no number (then value is None)."""
    replicates: np.ndarray | None = None
    """Bootstrap replicates of the expected value (no run scatter): the forecast's own uncertainty."""
    scatter: float | None = None
    """sd of one run about the expected value, as the ladder measures it."""
    scatter_dof: float | None = None
    paper: float | None = None
    ours: float | None = None
    """Our run's value at the target preset, when it ran."""

    def inside(self, value: float | None) -> bool | None:
        if value is None or self.value is None:
            return None
        return bool(self.lo <= value <= self.hi)


@dataclass(frozen=True, slots=True)
class Multiplier:
    row: str
    reference: str
    value: float
    lo: float
    hi: float
    """95% interval (log scale: t with both laws' residual dof x the bootstrap sd)."""
    why: str = ""
    """Why there is no number (a degenerate law of the row or the reference); then value is NaN."""


@dataclass(frozen=True, slots=True)
class ClaimForecast:
    claim: PaperDifference
    diff: float | None
    diff_se: float | None
    seed_sd: float | None
    seed_dof: float | None
    verdict: VerdictForecast | None
    why: str = ""


@dataclass(slots=True)
class TableForecast:
    table: str
    group: str
    preset: str
    ladder: Ladder
    laws: dict[str, LawFit]
    targets: dict[str, Target]
    cells: dict[tuple[str, str], CellForecast]
    accuracy: dict[str, AccuracyFit | str]
    comparable: str
    """Empty when the ladder and the target share data, vocabulary and suite; else the line every cell carries."""
    paper_scale: bool
    """The target is the preset of the paper's runs, so the paper's values are compared."""
    multipliers: list[Multiplier] = field(default_factory=list)
    claims: list[ClaimForecast] = field(default_factory=list)
    pooled_sigma: float = math.nan
    pooled_dof: int = 0

    def hit_rate(self, source: str) -> tuple[int, int]:
        """(inside, known) over the cells with a forecast and a `source` value ('paper' or 'ours')."""
        if self.comparable or (source == "paper" and not self.paper_scale):
            return 0, 0
        hits = [c.inside(getattr(c, source)) for c in self.cells.values()]
        known = [h for h in hits if h is not None]
        return sum(known), len(known)


def _half(level: float, dof: float) -> float:
    return float(stats.t.ppf(0.5 + level / 2, dof))


def _comparable(ladder: Ladder, target_spec, preset: str) -> str:
    if not ladder.specs:
        return ""
    ladder_spec = next(iter(ladder.specs.values()))
    same = (ladder_spec.train.data == target_spec.train.data and ladder_spec.model.vocab_size ==
            target_spec.model.vocab_size and ladder_spec.eval.suite == target_spec.eval.suite)
    if same:
        return ""
    return f"not comparable: a {'/'.join(sorted(ladder.presets))} ladder says nothing about {preset.upper()}"


def forecast_table(registry: Registry, runs_root: str | os.PathLike, table_id: str, group: str, *, preset: str,
                   bootstrap: int = 1000, seed: int = 0, seeds: int = 3,
                   hours_per_run: dict[str, float | None] | None = None) -> TableForecast:
    """The forecast of every cell of `table_id` at `preset` from the ladder `group` (module docstring)."""
    table = registry.tables[table_id]
    ladder = read_ladder(registry, runs_root, table_id, group)
    laws = {row: fit_law([r.params for r in runs], [r.tokens for r in runs], [r.loss for r in runs],
                         bootstrap=bootstrap, seed=seed, where=f"ladder {group}, row {row}")
            for row, runs in ladder.runs.items()}
    resolver = Selection(registry=registry)
    aims = targets(resolver, registry, table_id, preset)
    first = table.rows[0].specs[0]
    comparable = _comparable(ladder, resolver.spec(first, preset), preset)
    paper_scale = resolver.reference(first).preset == preset
    reported = load_reported(registry)
    ours = {}
    if not comparable:
        built = compose(registry, runs_root, tables=[table_id], preset=preset).tables[table_id].built
        ours = {key: cell.value for key, cell in built.cells.items()}
    all_runs = [r for runs in ladder.runs.values() for r in runs]
    accuracy = {task: fit_accuracy(task, [r.loss for r in all_runs], [r.values.get(task, math.nan) for r in all_runs],
                                   chance=100.0 / TASK_FACTS[task].choices, bootstrap=min(200, max(50, bootstrap // 4)),
                                   documents=[r.documents.get(task, math.nan) for r in all_runs], seed=seed)
                for task in TASKS if task in table.columns or AVERAGE in table.columns}
    out = TableForecast(table=table_id, group=group, preset=preset, ladder=ladder, laws=laws, targets=aims, cells={},
                        accuracy=accuracy, comparable=comparable, paper_scale=paper_scale)
    sound = [f for f in laws.values() if not f.degenerate()]
    out.pooled_dof = sum(f.dof for f in sound)
    out.pooled_sigma = (math.sqrt(sum(f.sigma ** 2 * f.dof for f in sound) / out.pooled_dof) if out.pooled_dof
                        else math.nan)
    avg_excess, avg_dof = _average_scatter(accuracy, all_runs)
    for row in table.rows:
        fit, aim = laws[row.id], aims[row.id]
        loss = float(fit.predict(aim.params, aim.tokens)[0])
        loss_reps = fit.replicates(aim.params, aim.tokens)[:, 0]
        for column in table.columns:
            cell = (CellForecast(row=row.id, column=column, why=fit.degenerate()) if fit.degenerate() else
                    _cell(row.id, column, fit, loss, loss_reps, accuracy, avg_excess, avg_dof, aim))
            rep_cell = reported.get((table_id, row.id, column))
            cell.paper = None if rep_cell is None else rep_cell.value
            cell.ours = ours.get((row.id, column))
            out.cells[(row.id, column)] = cell
    out.multipliers = [multiplier(fit, aims[row], laws[ref], aims[ref], row=row, reference=ref)
                       for ref in references(registry, table_id) for row, fit in laws.items()]
    out.claims = _claims(registry, table_id, out, seeds=seeds, seed=seed)
    return out


def _cell(row: str, column: str, fit: LawFit, loss: float, loss_reps: np.ndarray,
          accuracy: dict[str, AccuracyFit | str], avg_excess: float, avg_dof: float, aim: Target) -> CellForecast:
    cell = CellForecast(row=row, column=column)
    if column == PERPLEXITY:
        lo, hi = fit.interval(aim.params, aim.tokens, level=LEVEL, one_run=True)
        cell.value, cell.lo, cell.hi = math.exp(loss), max(1.0, math.exp(lo[0])), math.exp(hi[0])  # loss >= 0
        cell.replicates = np.exp(loss_reps)
        cell.scatter, cell.scatter_dof = math.exp(loss) * fit.sigma, fit.dof
        return cell
    if column in TASKS or column == AVERAGE:
        tasks = [column] if column in TASKS else list(TASKS)
        fits = [accuracy.get(t, "no accuracy fit") for t in tasks]
        why = next((f for f in fits if isinstance(f, str)), None)
        if why is not None:
            cell.why = why if column in TASKS else f"{why} (a task of {AVERAGE})"
            return cell
        centre = float(np.mean([f.predict(loss) for f in fits]))
        length = min(len(f.boot) for f in fits)
        reps = np.mean([f.replicates(loss_reps)[:length] for f in fits], axis=0)
        slope = float(np.mean([f.slope(loss) for f in fits]))
        # one run at the target: its own scatter about the curve plus its documents' sampling (accuracy.py)
        if column in TASKS:
            sigma, dof = fits[0].one_run_sd(loss, aim.documents.get(column)), fits[0].dof
        else:
            sigma, dof = math.sqrt(avg_excess ** 2 + _average_binomial(fits, loss, aim.documents)), avg_dof
        scatter = math.sqrt(sigma ** 2 + (slope * fit.sigma) ** 2)
        half = _half(LEVEL, dof) * math.sqrt(float(np.var(reps, ddof=1)) + scatter ** 2)
        # the law's misfit floor on the loss, carried through the curve's slope (independent of the rest)
        half = math.hypot(half, slope * float(fit.misfit_half(aim.params, aim.tokens)[0]))
        chance = float(np.mean([f.chance for f in fits]))
        lo, hi = max(0.0, centre - half), min(MAXIMUM, centre + half)  # accuracy in %
        cell.why = uninformative(lo, hi, chance)
        if cell.why:
            return cell
        cell.value, cell.lo, cell.hi = centre, lo, hi
        cell.replicates, cell.scatter, cell.scatter_dof = reps, scatter, dof
        return cell
    cell.why = f"no forecast for {column}: only {PERPLEXITY} and task accuracies follow from the loss"
    return cell


def _average_binomial(fits: list[AccuracyFit], loss: float, documents: dict[str, int]) -> float:
    """Binomial variance (%^2) of the mean of the task accuracies at `loss` with those documents; 0 where unknown."""
    parts = [binomial_variance(float(f.predict(loss)[()]), documents[t]) if documents.get(t) else 0.0
             for t, f in zip(TASKS, fits)]
    return float(np.sum(parts)) / len(fits) ** 2


def _average_scatter(accuracy: dict[str, AccuracyFit | str], runs) -> tuple[float, float]:
    """sd of the ladder's avg6 about the mean of the task curves beyond its documents' binomial sampling
    (accuracy.py `run_excess`), with n - 3 dof; NaN without every curve."""
    fits = [accuracy.get(t) for t in TASKS]
    if any(not isinstance(f, AccuracyFit) for f in fits):
        return math.nan, math.nan
    kept = [r for r in runs if AVERAGE in r.values]
    resid = [r.values[AVERAGE] - float(np.mean([f.predict(r.loss) for f in fits])) for r in kept]
    dof = len(resid) - 3
    if dof < 1:
        return math.nan, math.nan
    binomial = np.array([_average_binomial(fits, r.loss, r.documents) for r in kept])
    return run_excess(float(np.sum(np.square(resid))) / dof, binomial), float(dof)


def references(registry: Registry, table_id: str) -> list[str]:
    """The reference rows of a table: the rows its paper differences subtract (experiments/claims.yaml)."""
    return list(dict.fromkeys(c.subtrahend for c in paper_differences(registry) if c.table == table_id))


def multiplier(fit: LawFit, aim: Target, ref_fit: LawFit, ref_aim: Target, *, row: str = "", reference: str = ""
               ) -> Multiplier:
    """The reference's tokens (so its compute, at its own target size) to reach the row's forecast loss, over the
    target's tokens: D_ref(L_row) / D_target, replicate r of the row paired with replicate r of the reference; the
    95% interval is t (the two laws' residual dof together: two independent fits) x the replicates' sd of its log
    (coverage measured in tests/report/forecast/test_ladder_forecast.py). No number when either law is degenerate."""
    why = fit.degenerate() or ref_fit.degenerate()
    if why:
        return Multiplier(row=row, reference=reference, value=math.nan, lo=math.nan, hi=math.nan,
                          why=why if fit.degenerate() else f"the reference {reference}: {why}")
    loss = float(fit.predict(aim.params, aim.tokens)[0])
    reps = np.resize(fit.replicates(aim.params, aim.tokens)[:, 0], len(ref_fit.boot))
    point, boot = tokens_to_reach(ref_fit, ref_aim.params, loss, reps)
    ratio = point / ref_aim.tokens
    if not math.isfinite(ratio):
        return Multiplier(row=row, reference=reference, value=math.inf, lo=math.nan, hi=math.inf)
    logs = np.log(boot / ref_aim.tokens)
    finite = np.isfinite(logs)
    half = _half(LEVEL, fit.dof + ref_fit.dof) * float(np.std(logs[finite], ddof=1))
    upper = math.inf if np.mean(~finite) > (1 - LEVEL) / 2 else ratio * math.exp(half)
    return Multiplier(row=row, reference=reference, value=ratio, lo=ratio * math.exp(-half), hi=upper)


def _claims(registry: Registry, table_id: str, out: TableForecast, *, seeds: int, seed: int) -> list[ClaimForecast]:
    claims = [c for c in paper_differences(registry) if c.table == table_id]
    result = []
    for claim in claims:
        a, b = out.cells.get((claim.minuend, claim.column)), out.cells.get((claim.subtrahend, claim.column))
        if a is None or b is None or a.value is None or b.value is None:
            result.append(ClaimForecast(claim=claim, diff=None, diff_se=None, seed_sd=None, seed_dof=None,
                                        verdict=None, why=(a.why if a is not None and a.why else
                                                           b.why if b is not None else "no forecast")))
            continue
        n = min(len(a.replicates), len(b.replicates))
        diff = a.value - b.value
        diff_se = float(np.std(a.replicates[:n] - b.replicates[:n], ddof=1))
        if claim.column == PERPLEXITY:  # the law residuals pooled over the rows, in perplexity units
            seed_sd = math.sqrt(2.0) * out.pooled_sigma * (a.value + b.value) / 2
            seed_dof = float(out.pooled_dof)
        else:
            seed_sd = math.sqrt(a.scatter ** 2 + b.scatter ** 2)
            seed_dof = float(min(a.scatter_dof, b.scatter_dof))
        why = "an equivalence claim: no forecast verdict" if claim.margin is not None else ""
        verdict = None if why else forecast_verdict(diff, diff_se, seed_sd, seed_dof, claim.value, seeds=seeds,
                                                    family=len(claims), seed=seed)
        result.append(ClaimForecast(claim=claim, diff=diff, diff_se=diff_se, seed_sd=seed_sd, seed_dof=seed_dof,
                                    verdict=verdict, why=why))
    return result
