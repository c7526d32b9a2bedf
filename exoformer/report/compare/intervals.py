"""The 95% interval of each difference `compare` prints (a later run minus the first), by the rules `diff` uses
for the same rows, reused from their modules, never copied:
- items: both runs kept lm-eval's per-document scores (eval/samples.json) for every task the metric reads: the
  documents both scored, paired by (task, doc) and weighed as the table weighs avg6's tasks
  (replication.paired_items), the item-sampling percentile interval of replication.compare (`--bootstrap`
  resamples, within the tasks, generator seed verdicts.RESAMPLE_SEED: the same runs give the same interval);
- seeds: with two or more paired seeds per side, replication's t interval over the seeds (a `compare` operand is
  one run, so one seed: this rule is named only when it applies);
- stderr: otherwise, for an accuracy or avg6 whose runs both recorded lm-eval's stderr, the difference +- diff's
  tolerance (diff.tolerance: Z x sqrt(se_A^2 + se_B^2), avg6's stderr combined over its tasks as the table does,
  build.seed_cell);
- none: a validation metric or the last curve point (one number per run; diff's val_ppl rule is a relative
  tolerance against the paper, not an interval), or a run without stderr or samples.
Torch-free (numpy/scipy for the item sampling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from exoformer.errors import UserError
from exoformer.registry.tables import DEFAULT_CONVENTION, TASKS, Table
from exoformer.report.compare.operands import Compared
from exoformer.report.tables.build import AVERAGE, Cell, run_values, seed_cell

ITEMS, SEEDS, STDERR, NONE = "items", "seeds", "stderr", "none"
RULES = (ITEMS, SEEDS, STDERR, NONE)
PLACEHOLDER_PAPER = 1.0
"""replication.compare judges a claim against the paper's value; `compare` reads only its intervals, never the
verdict, so any non-zero value serves."""
_TABLE = Table(id="compare", title="compare", paper_ref="", columns=(*TASKS, AVERAGE), rows=(),
               convention=dict(DEFAULT_CONVENTION), source="compare")
"""seed_cell's table: the default metric convention compare reads (its id only names an error's source)."""


@dataclass(frozen=True, slots=True)
class Interval:
    """One difference's 95% interval (None bounds under rule NONE) and how it was computed."""

    low: float | None
    high: float | None
    rule: str
    """One of RULES."""
    method: str

    def text(self, decimals: int) -> str:
        if self.low is None or self.high is None:
            return ""
        return f"[{self.low:+.{decimals}f}, {self.high:+.{decimals}f}] {self.rule}"

    def as_json(self) -> dict:
        return {"low": self.low, "high": self.high, "rule": self.rule, "method": self.method}


def tasks_of(key: str) -> tuple[str, ...]:
    """The tasks a metric of compare reads: all six for avg6, its own for a task, none for the others."""
    return TASKS if key == AVERAGE else (key,) if key in TASKS else ()


def difference_interval(first: Compared, other: Compared, key: str, *, n_boot: int) -> Interval:
    """The interval of other - first in metric `key` (side_by_side.METRICS), by the first rule that applies."""
    tasks = tasks_of(key)
    if not tasks:
        return Interval(None, None, NONE, "one number per run: no per-item scores, no stderr")
    got = _item_interval(first, other, tasks, n_boot=n_boot)
    if got is not None:
        return got
    return _stderr_interval(first, other, key)


def _item_interval(first: Compared, other: Compared, tasks: tuple[str, ...], *, n_boot: int) -> Interval | None:
    from exoformer.report.stats import replication as rep
    from exoformer.report.tables.verdicts import RESAMPLE_SEED, _per_sample

    a_items = _per_sample(str(other.picked.path), tasks, DEFAULT_CONVENTION)
    b_items = _per_sample(str(first.picked.path), tasks, DEFAULT_CONVENTION)
    if a_items is None or b_items is None:
        return None
    try:
        a, b, strata = rep.paired_items([a_items], [b_items], tasks=list(tasks))
        c = rep.compare(a, b, PLACEHOLDER_PAPER, kind="accuracy", item_resamples=n_boot, item_strata=strata,
                        resample_seed=RESAMPLE_SEED)
    except UserError:  # no document both scored: the stderr rule
        return None
    if c.ci is not None:  # several paired seeds: the seed rule, as diff's verdicts
        return Interval(c.ci[0], c.ci[1], SEEDS, c.ci_method)
    if c.item_ci is None:
        return None
    return Interval(c.item_ci[0], c.item_ci[1], ITEMS,
                    f"{c.item_method}; generator seed {RESAMPLE_SEED}; {c.ci_method}; difference "
                    f"{c.estimate:+.2f} on the paired documents")


def _stderr_interval(first: Compared, other: Compared, key: str) -> Interval:
    from exoformer.report.tables.diff import Z, tolerance

    cells = []
    for c in (other, first):
        try:
            got = seed_cell(run_values(c.picked.rows), key, DEFAULT_CONVENTION, c.identity.spec, _TABLE)
        except UserError:
            got = None
        if got is None or got[1] is None or not math.isfinite(got[1]):
            return Interval(None, None, NONE, f"{c.letter} recorded no lm-eval stderr for {key} and no per-document "
                                              "scores (eval/samples.json)")
        cells.append(Cell(row=c.letter, column=key, value=got[0], stderr=got[1]))
    half = tolerance(cells[0], cells[1])
    if half is None:
        return Interval(None, None, NONE, "no stderr")
    delta = cells[0].value - cells[1].value
    return Interval(delta - half, delta + half, STDERR,
                    f"difference +- diff's tolerance {Z:g} x sqrt(se_{other.letter}^2 + se_{first.letter}^2) of "
                    "lm-eval's stderr (one seed each; no per-document scores in both runs)")


def rule_text(rule: str, n_boot: int) -> str:
    """What a rule tag of compare's table means (the line under it; --json's interval_rules)."""
    from exoformer.report.tables.diff import Z
    from exoformer.report.tables.verdicts import RESAMPLE_SEED

    return {ITEMS: f"{ITEMS} = item sampling (diff's verdicts): the documents both runs scored (eval/samples.json), "
                   f"{n_boot} resamples within their tasks (--bootstrap), generator seed {RESAMPLE_SEED}, "
                   "percentile interval",
            SEEDS: f"{SEEDS} = t interval over the paired seeds (diff's verdicts)",
            STDERR: f"{STDERR} = the difference +- {Z:g} x sqrt(se1^2 + se2^2), the two runs' lm-eval stderr "
                    "(diff's tolerance; used where the two runs do not both have per-document scores)",
            NONE: "one number per run: no per-document scores, no stderr; diff's val_ppl rule is a tolerance "
                  "against the paper, not an interval"}[rule]
