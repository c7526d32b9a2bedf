"""A declared group-sequential design for a table's claims: look after each batch of seeds, stop when decided.

Looking at a t test after every batch and stopping when it is significant inflates the false-verdict rate. A
design declared before any result fixes K looks, the paired seeds of each claim at each look, and an
alpha-spending function (Lan-DeMets): the family's alpha is spent over the looks, little early (O'Brien-Fleming
-like, the default) or evenly (Pocock-like). The rules in plain words: docs/replication.md "Spending a fixed
budget".

- Boundaries. At look k a claim's statistic is the paired-seed t of replication.seed_statistics (n_k - 1 df).
  Under "no difference" the joint law of (T_1, ..., T_K) does not depend on the seed sd, so the boundaries are
  calibrated exactly for the declared seed counts by simulating normal seed differences (CALIBRATION_PATHS
  seeded paths): look 1 is an exact t quantile, each later boundary the value that spends the look's share of
  alpha among the paths not yet stopped. With few seeds per look the t boundary is far above the normal one.
- The family: Holm within the spending (the graphical procedure with group-sequential boundaries; the argument
  is in docs/replication.md). With m' claims still undecided each is tested
  against the boundaries of its own design at level alpha / m'; a claim decided at any look passes its level to
  the others, which are then held against the lower boundaries of level alpha / (m' - 1) at every look so far.
  The family-wise rate stays at alpha because each claim's boundaries form a design of its local level, and the
  boundaries fall as that level rises (docs/replication.md).
- Futility is non-binding: the boundaries ignore it, so stopping a claim early for futility or not keeps the
  family-wise rate. A claim is futile when its conditional power at the paper's effect, with the seeds left to
  its last look, is below the design's threshold (10%).
- Equivalence claims (a margin) use two one-sided t tests, each against one-sided boundaries of the same level.

The decision function is `sequential_verdicts`: vectorised over a batch (simulations) and used with a batch of
one for real runs, it calls replication.seed_statistics at each look. Pure numpy/scipy; torch-free.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import yaml
from scipy import stats

from exoformer.errors import UserError
from exoformer.report.stats import power as pw
from exoformer.report.stats import replication as rep

SPENDING = ("obrien-fleming", "pocock")
"""Lan-DeMets spending functions: O'Brien-Fleming-like spends little early; Pocock-like spends evenly."""
FUTILITY_POWER = 0.10
"""A claim whose conditional power at the paper's effect falls below this stops as futile (non-binding)."""
CALIBRATION_PATHS = 200_000
"""Null paths that calibrate the boundaries: a crossing probability's Monte Carlo sd is below 3e-4 at 0.0167."""
CALIBRATION_SEED = 20130101
MIN_EVENTS = 50
"""Below this many expected crossings a look's boundary is the t quantile of its share (conservative)."""
MAX_LOOKS = 10
OPEN, DECIDED, FUTILE = 0, 1, 2
STATE_WORDS = {OPEN: "continue", DECIDED: "decided", FUTILE: "futile"}
DESIGN_VERSION = 1


# ------------------------------------------------------------------------------------------------ boundaries

def spent(spending: str, alpha: float, fractions: np.ndarray) -> np.ndarray:
    """Cumulative alpha spent at each information fraction (the Lan-DeMets forms of docs/replication.md)."""
    t = np.clip(np.asarray(fractions, dtype=float), 1e-12, 1.0)
    if spending == "obrien-fleming":
        return 2.0 * stats.norm.sf(stats.norm.isf(alpha / 2.0) / np.sqrt(t))
    if spending == "pocock":
        return alpha * np.log1p((math.e - 1.0) * t)
    raise UserError(f"unknown spending function {spending!r}", where="spending", fix=" or ".join(SPENDING))


def _null_t(pairs: tuple[int, ...], paths: int, seed: int) -> np.ndarray:
    """(paths, K) paired t statistics at each look of normal seed differences with mean 0 (sd 1: T is free of it)."""
    rng = np.random.default_rng(seed)
    total = np.zeros(paths)
    squares = np.zeros(paths)
    out = np.empty((paths, len(pairs)))
    done = 0
    for k, n in enumerate(pairs):
        draws = rng.standard_normal((paths, n - done))
        total += draws.sum(axis=1)
        squares += (draws**2).sum(axis=1)
        done = n
        mean = total / n
        var = (squares - n * mean**2) / (n - 1)
        out[:, k] = mean / np.sqrt(np.maximum(var, 1e-300) / n)
    return out


@functools.lru_cache(maxsize=256)
def boundaries(pairs: tuple[int, ...], levels: tuple[float, ...], *, spending: str, sided: int,
               paths: int = CALIBRATION_PATHS, seed: int = CALIBRATION_SEED) -> np.ndarray:
    """(levels, K) t boundaries: for each level, reject at look k when the statistic reaches the boundary.

    `sided` 2: |T| for a two-sided test; 1: T for one side (each half of an equivalence test). Calibrated on
    one set of null paths for every level, so the boundaries fall as the level rises."""
    _check_pairs(pairs)
    stat = _null_t(pairs, paths, seed)
    if sided == 2:
        stat = np.abs(stat)
    fractions = np.asarray(pairs, dtype=float) / pairs[-1]
    out = np.empty((len(levels), len(pairs)))
    for i, level in enumerate(levels):
        cumulative = spent(spending, level, fractions)
        alive = np.ones(paths, dtype=bool)
        previous = 0.0
        for k, n in enumerate(pairs):
            share = max(0.0, float(cumulative[k]) - previous)
            previous = float(cumulative[k])
            quantile = float(stats.t.isf(share / sided, n - 1)) if share > 0 else math.inf
            events = int(math.floor(share * paths))
            if k == 0 or events < MIN_EVENTS:
                c = quantile  # exact at look 1; later a bound on the look's share alone (never spends more)
            else:
                survivors = np.sort(stat[alive, k])[::-1]
                c = float(survivors[events - 1]) if events <= survivors.size else 0.0
            out[i, k] = c
            alive &= stat[:, k] < c
    out.setflags(write=False)
    return out


def _check_pairs(pairs: Sequence[int]) -> None:
    if not pairs or len(pairs) > MAX_LOOKS or pairs[0] < 2 or any(b <= a for a, b in zip(pairs, pairs[1:])):
        raise UserError(f"paired seeds per look must rise from at least 2, at most {MAX_LOOKS} looks; got "
                        f"{list(pairs)}", where="looks", fix="fewer looks, or more seeds per row")


def look_seeds(final: int, looks: int) -> list[int]:
    """Seeds per row at each look: the final count split evenly, the first look at least 2."""
    least = 2 if looks == 1 else looks + 1
    if not 1 <= looks <= MAX_LOOKS or final < least:
        raise UserError(f"{looks} looks need at least {least} seeds per row, got {final}", where="--looks",
                        fix="fewer looks, or a budget that buys more seeds")
    seeds = [max(2, math.ceil(final * k / looks)) for k in range(1, looks + 1)]
    _check_pairs(seeds)
    return seeds


# ------------------------------------------------------------------------------------------------ the design

@dataclass(kw_only=True, slots=True)
class PlanClaim:
    """What a design needs of a claim: its rows, the paper's difference, a seed sd, an equivalence margin."""

    label: str
    minuend: str
    subtrahend: str
    column: str
    paper: float
    sd: float
    """The seed sd of a paired difference the design is planned with (power and futility's "would need")."""
    margin: float | None = None


@dataclass(kw_only=True, slots=True)
class DesignClaim(PlanClaim):
    """One claim of a declared design: the PlanClaim, its paired seeds and boundaries at each look."""

    pairs: list[int] = field(default_factory=list)
    """Paired seeds at each look."""
    boundaries: list[list[float]] = field(default_factory=list)
    """[j][k]: the t boundary at look k when j + 1 claims of the family are undecided (level alpha / (j + 1))."""
    planned_power: float = 0.0
    """Fixed-design power at the paper's effect with the last look's seeds, at alpha / m (as `power TABLE`)."""


@dataclass(kw_only=True, slots=True)
class Design:
    """A table's declared sequential design: written once before any result, never chosen after seeing data."""

    table: str
    alpha: float
    looks: int
    spending: str
    futility_power: float
    budget_gpu_hours: float | None
    hours_per_run: dict[str, float | None]
    seeds: dict[str, list[int]]
    """Row -> seeds at each look."""
    claims: list[DesignClaim]
    calibration: dict[str, int] = field(default_factory=lambda: {"paths": CALIBRATION_PATHS,
                                                                  "seed": CALIBRATION_SEED})
    version: int = DESIGN_VERSION

    def content(self) -> dict:
        return asdict(self)

    @property
    def digest(self) -> str:
        """sha256 of the design's content: a design file edited after writing no longer matches it."""
        return _digest(self.content())

    def max_gpu_hours(self) -> float | None:
        """The cost of every look taken (None when a row has no price)."""
        prices = [self.hours_per_run.get(row) for row in self.seeds]
        if None in prices:
            return None
        return float(sum(s[-1] * h for s, h in zip(self.seeds.values(), prices, strict=True)))

    def boundary_table(self) -> np.ndarray:
        """(claims, family levels, looks) boundaries."""
        return np.array([c.boundaries for c in self.claims], dtype=float)


def _digest(content: dict) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True, allow_nan=False).encode()).hexdigest()


def make_design(table: str, claims: Sequence[PlanClaim], seeds_per_row: Mapping[str, int], *, looks: int,
                spending: str = "obrien-fleming", alpha: float = pw.ALPHA, futility_power: float = FUTILITY_POWER,
                budget_gpu_hours: float | None = None,
                hours_per_run: Mapping[str, float | None] | None = None) -> Design:
    """The design of `claims` with `seeds_per_row` at the last look, split evenly over `looks`."""
    alpha = pw.check_alpha(alpha)
    if spending not in SPENDING:
        raise UserError(f"unknown spending function {spending!r}", where="spending", fix=" or ".join(SPENDING))
    if not 0.0 <= futility_power < 1.0:
        raise UserError(f"the futility threshold must lie in [0, 1), got {futility_power!r}", where="futility",
                        fix=f"{FUTILITY_POWER}")
    if not claims:
        raise UserError("a design needs at least one claim", where=table, fix="name a table with paper differences")
    rows = list(dict.fromkeys(r for c in claims for r in (c.minuend, c.subtrahend)))
    missing = [r for r in rows if r not in seeds_per_row]
    if missing:
        raise UserError(f"no seed count for row {missing[0]}", where="seeds_per_row", fix="one count per row")
    seeds = {r: look_seeds(int(seeds_per_row[r]), looks) for r in rows}
    m = len(claims)
    levels = tuple(alpha / (j + 1) for j in range(m))
    out = []
    for c in claims:
        pairs = [min(a, b) for a, b in zip(seeds[c.minuend], seeds[c.subtrahend], strict=True)]
        _check_pairs(pairs)
        sided = 2 if c.margin is None else 1
        bounds = boundaries(tuple(pairs), levels, spending=spending, sided=sided)
        out.append(DesignClaim(label=c.label, minuend=c.minuend, subtrahend=c.subtrahend, column=c.column,
                               paper=float(c.paper), sd=float(c.sd), margin=c.margin, pairs=pairs,
                               boundaries=[[float(x) for x in row] for row in bounds],
                               planned_power=fixed_power(c, pairs[-1], level=alpha / m)))
    hours = {r: (None if hours_per_run is None or hours_per_run.get(r) is None else float(hours_per_run[r]))
             for r in rows}
    return Design(table=table, alpha=alpha, looks=looks, spending=spending, futility_power=float(futility_power),
                  budget_gpu_hours=None if budget_gpu_hours is None else float(budget_gpu_hours),
                  hours_per_run=hours, seeds=seeds, claims=out)


def fixed_power(claim: PlanClaim | DesignClaim, pairs: int, *, level: float) -> float:
    """Power at the paper's effect of one fixed t test with `pairs` seeds at `level` (the verdict's direction
    power, replication.direction_power, as `power TABLE`; the sd taken as known)."""
    if pairs < 2:
        return 0.0
    if claim.margin is None:
        return rep.direction_power(abs(claim.paper), sd=claim.sd, seeds=pairs, alpha=level)
    return pw.equivalence_power(claim.paper, margin=claim.margin, sd=claim.sd, seeds=pairs, df=pairs - 1,
                                alpha=level)


# ------------------------------------------------------------------------------------------------ the file

def design_path(runs_root: str | os.PathLike, table: str) -> Path:
    return Path(runs_root) / "designs" / f"{table}.yaml"


def write_design(design: Design, runs_root: str | os.PathLike, *, has_results: bool) -> Path:
    """Write `<runs root>/designs/<table>.yaml` atomically; refused once any run of the table has results."""
    from exoformer.io import atomic_write_text, check_real_directories

    path = design_path(runs_root, design.table)
    if has_results:
        raise UserError(f"table {design.table} already has results: a design chosen after seeing data is refused",
                        where=str(path), fix="declare the design in a fresh runs root (--runs-dir) before any run")
    check_real_directories([Path(runs_root), path.parent], fix="remove the link and run the command again")
    body = {**design.content(), "digest": design.digest}
    head = ("# Declared sequential design (docs/replication.md \"Spending a fixed budget\"). Do not edit: the\n"
            "# digest covers every field, and a design that does not match it is refused.\n")
    return atomic_write_text(path, head + yaml.safe_dump(body, sort_keys=False, default_flow_style=None, width=110))


def read_design(runs_root: str | os.PathLike, table: str) -> Design | None:
    """The declared design of `table`, None when there is none; refused when its digest does not match."""
    from exoformer.yaml_lines import load_yaml_with_lines

    path = design_path(runs_root, table)
    if not path.exists():
        return None
    data = json.loads(json.dumps(load_yaml_with_lines(path)))  # plain dicts and lists
    if not isinstance(data, dict) or "digest" not in data:
        raise UserError("not a design file (no digest)", where=str(path), fix="write it again with `budget --looks`")
    digest = data.pop("digest")
    if _digest(data) != digest:
        raise UserError("the design was edited after it was written (its digest does not match)", where=str(path),
                        fix="restore the declared design; a new design needs a fresh runs root")
    try:
        claims = [DesignClaim(**c) for c in data.pop("claims")]
        design = Design(**data, claims=claims)
    except TypeError as err:
        raise UserError(f"not a design of this version ({err})", where=str(path),
                        fix="write it again with `budget --looks` in a fresh runs root") from None
    return design


def table_has_results(registry, runs_root: str | os.PathLike, table: str) -> bool:
    """Whether any run of any row's spec (any hash) has an evaluation, validation or analysis result."""
    from exoformer.rundir import run_dirs_of_spec

    for row in registry.tables[table].rows:
        for spec in row.specs:
            for rd in run_dirs_of_spec(runs_root, spec):
                if any(os.path.lexists(p) for p in (rd.eval_rows, rd.validation, rd.analysis_rows)):
                    return True
    return False


# ------------------------------------------------------------------------------------------------ verdicts

@dataclass(kw_only=True, slots=True)
class Outcome:
    """The design's verdicts of a batch after the looks taken (arrays (batch, claims))."""

    state: np.ndarray
    """OPEN, DECIDED or FUTILE."""
    look: np.ndarray
    """0-based look at which the claim stopped; -1 while open."""
    sign: np.ndarray
    """Sign of our estimate when decided (+1/-1); for equivalence +1 means equivalent."""
    p: np.ndarray
    """The verdict's p at the last look taken (seed_statistics), per claim."""
    boundary_p: np.ndarray
    """The nominal p the claim's statistic was held against at that look (its family level then)."""
    power_needed: np.ndarray
    """Conditional power at the paper's effect at the last look taken (NaN where not computed)."""
    sd: np.ndarray
    """sd of one seed's paired difference at the claim's last look."""
    looks_taken: int

    def row_seeds(self, design: Design) -> dict[str, np.ndarray]:
        """Row -> (batch,) seeds it ran: a row stops when every claim on it has stopped."""
        last = np.where(self.state == OPEN, self.looks_taken - 1, self.look)
        out = {}
        for row, counts in design.seeds.items():
            mine = [i for i, c in enumerate(design.claims) if row in (c.minuend, c.subtrahend)]
            out[row] = np.asarray(counts)[last[:, mine].max(axis=1)]
        return out

    def seeds_used(self, design: Design) -> np.ndarray:
        """(batch,) seeds run over all rows."""
        return sum(self.row_seeds(design).values(), np.zeros(self.state.shape[0]))


def _statistic(s: rep.SeedStatistics, margin: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(statistic held against the boundary, its sign, its p) from the verdict's seed statistics."""
    se = s.sd / math.sqrt(s.seeds)
    with np.errstate(divide="ignore", invalid="ignore"):
        if margin is None:
            t = np.where(se > 0, s.estimate / np.where(se > 0, se, 1.0), np.sign(s.estimate) * np.inf)
            return np.abs(t), np.sign(s.estimate), s.p
        lower = (s.estimate + margin) / np.where(se > 0, se, 1.0)
        upper = (margin - s.estimate) / np.where(se > 0, se, 1.0)
        t = np.where(se > 0, np.minimum(lower, upper), np.where(np.abs(s.estimate) < margin, np.inf, -np.inf))
        return t, np.ones_like(t), s.p_equivalence


def _conditional_power(claim: DesignClaim, s: rep.SeedStatistics, final_boundary: np.ndarray) -> np.ndarray:
    """P(the last look decides the claim the paper's way | seeds so far, the truth the paper's effect), with the
    spread taken at its current estimate (normal approximation of the remaining seeds' mean)."""
    n, total = s.seeds, claim.pairs[-1]
    rest = total - n
    sd = np.where(s.sd > 0, s.sd, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        if claim.margin is None:
            side = math.copysign(1.0, claim.paper)
            need = final_boundary * sd * math.sqrt(total) - n * side * s.estimate - rest * abs(claim.paper)
            return stats.norm.sf(need / (sd * math.sqrt(rest)))
        half = claim.margin - final_boundary * sd / math.sqrt(total)
        mean = (n * s.estimate + rest * claim.paper) / total
        tau = sd * math.sqrt(rest) / total
        inside = stats.norm.cdf((half - mean) / tau) - stats.norm.cdf((-half - mean) / tau)
        return np.where(half > 0, inside, 0.0)


def sequential_verdicts(design: Design, diffs: Sequence[np.ndarray], *, looks: int | None = None,
                        futility: bool = True) -> Outcome:
    """The design's verdict of each claim after `looks` looks (default: as many as the seeds given allow).

    `diffs[i]`: claim i's per-seed paired differences (batch, seeds), seeds in the order they were run; look k
    reads the first pairs[k] of them, so a verdict only ever uses the declared seed counts and boundaries. A look
    is taken when every claim still open has its seeds: a claim that stopped needs no more, and once
    every claim has stopped no look follows.
    `futility=False` takes every look whatever the conditional power (the non-binding rule ignored)."""
    arrays, limit = _check_looks(design, diffs, looks)
    m, batch = len(design.claims), arrays[0].shape[0]
    out = Outcome(state=np.full((batch, m), OPEN), look=np.full((batch, m), -1), sign=np.zeros((batch, m)),
                  p=np.full((batch, m), np.nan), boundary_p=np.full((batch, m), np.nan),
                  power_needed=np.full((batch, m), np.nan), sd=np.full((batch, m), np.nan), looks_taken=0)
    stat = np.full((batch, m, design.looks), -np.inf)
    sign = np.zeros((batch, m, design.looks))
    for k in range(limit):
        if not np.any(out.state == OPEN):  # every claim has stopped: no later look
            break
        short = [c.pairs[k] > a.shape[1] for c, a in zip(design.claims, arrays, strict=True)]
        if any(s and bool(np.any(out.state[:, i] == OPEN)) for i, s in enumerate(short)):
            break
        out.looks_taken = k + 1
        measured = []
        for i, (c, d) in enumerate(zip(design.claims, arrays, strict=True)):
            if short[i]:  # stopped before this look: nothing to measure
                measured.append(None)
                continue
            s = rep.seed_statistics(d[:, :c.pairs[k]], alpha=design.alpha, margin=c.margin)
            st, sign[:, i, k], p = _statistic(s, c.margin)
            is_open = out.state[:, i] == OPEN
            stat[:, i, k] = np.where(is_open, st, -np.inf)
            out.p[:, i] = np.where(is_open, p, out.p[:, i])
            out.sd[:, i] = np.where(is_open, s.sd, out.sd[:, i])
            measured.append(s)
        _holm(design, out, stat, sign, k)
        if k < design.looks - 1:
            _futility(design, out, measured, k, stop=futility)
    return out


def _check_looks(design: Design, diffs: Sequence[np.ndarray], looks: int | None) -> tuple[list[np.ndarray], int]:
    """The claims' seed arrays and the last look to try (`looks`, else the design's last); an explicit look
    needs every claim's seeds."""
    m = len(design.claims)
    if len(diffs) != m:
        raise UserError(f"{len(diffs)} claims' seeds for a design of {m} claims", where="diffs",
                        fix="one (batch, seeds) array per claim of the design")
    arrays = [np.atleast_2d(np.asarray(d, dtype=float)) for d in diffs]
    if looks is not None and not 1 <= looks <= design.looks:
        raise UserError(f"the design has looks 1-{design.looks}, not {looks}", where="looks",
                        fix=f"a look in 1-{design.looks}")
    if looks is not None and any(c.pairs[looks - 1] > a.shape[1] for c, a in zip(design.claims, arrays, strict=True)):
        raise UserError(f"look {looks} needs {design.claims[0].pairs[looks - 1]} paired seeds per claim; fewer "
                        "are run", where="looks", fix="run the next look's seeds first (`budget TABLE --next`)")
    return arrays, design.looks if looks is None else looks


def _holm(design: Design, out: Outcome, stat: np.ndarray, sign: np.ndarray, k: int) -> None:
    """Decide at look k: with m' claims undecided each is held against its level alpha / m' boundaries at every
    look so far; each decision raises the others' level, so look again until none is added."""
    table = design.boundary_table()  # (claims, levels, looks)
    m = len(design.claims)
    claims = np.arange(m)[None, :]
    for _ in range(m):
        level = np.clip(m - np.sum(out.state == DECIDED, axis=1) - 1, 0, m - 1)[:, None]  # (batch, 1)
        crossed = stat[:, :, :k + 1] >= table[claims, level, :k + 1]  # (batch, claims, looks so far)
        for i, c in enumerate(design.claims):
            nominal = stats.t.sf(table[i, level[:, 0], k], c.pairs[k] - 1) * (2 if c.margin is None else 1)
            out.boundary_p[:, i] = np.where(out.state[:, i] == OPEN, nominal, out.boundary_p[:, i])
        new = (out.state == OPEN) & crossed.any(axis=2)
        if not new.any():
            return
        first = np.argmax(crossed, axis=2)[..., None]  # the earliest look crossed gives the direction
        out.sign = np.where(new, np.take_along_axis(sign[:, :, :k + 1], first, axis=2)[..., 0], out.sign)
        out.state = np.where(new, DECIDED, out.state)
        out.look = np.where(new, k, out.look)


def _futility(design: Design, out: Outcome, measured: list[rep.SeedStatistics | None], k: int, *,
              stop: bool) -> None:
    """Conditional power of each open claim at the paper's effect; below the threshold it stops as futile."""
    table = design.boundary_table()
    m = len(design.claims)
    level = np.clip(m - np.sum(out.state == DECIDED, axis=1) - 1, 0, m - 1)
    for i, (c, s) in enumerate(zip(design.claims, measured, strict=True)):
        if s is None:  # stopped at an earlier look
            continue
        cp = _conditional_power(c, s, table[i, level, design.looks - 1])
        is_open = out.state[:, i] == OPEN
        out.power_needed[:, i] = np.where(is_open, cp, out.power_needed[:, i])
        if stop:
            futile = is_open & (cp < design.futility_power)
            out.state[:, i] = np.where(futile, FUTILE, out.state[:, i])
            out.look[:, i] = np.where(futile, k, out.look[:, i])


def expected_use(design: Design, *, scale: float, reps: int = 4000, seed: int = 0) -> tuple[float, float | None]:
    """Expected seeds (all rows) and GPU-hours when each claim's truth is `scale` times the paper's, simulated
    with the planned sds (claims drawn independently: the rows they share are not modelled)."""
    rng = np.random.default_rng(seed)
    diffs = [scale * c.paper + c.sd * rng.standard_normal((reps, c.pairs[-1])) for c in design.claims]
    used = {row: float(n.mean()) for row, n in sequential_verdicts(design, diffs).row_seeds(design).items()}
    prices = [design.hours_per_run.get(row) for row in used]
    hours = None if None in prices else sum(n * h for n, h in zip(used.values(), prices, strict=True))
    return sum(used.values()), hours


def verdict_line(design: Design, outcome: Outcome, i: int) -> str:
    """Claim i's line at the current look (batch of one), e.g. "look 2 of 3: p 0.004 < boundary 0.012: stop:
    decided, same direction as the paper"."""
    c = design.claims[i]
    k = outcome.looks_taken
    head = f"look {k} of {design.looks}"
    if k == 0:
        return f"{head}: no look taken yet ({c.pairs[0]} paired seeds needed)"
    state, p, bound = int(outcome.state[0, i]), float(outcome.p[0, i]), float(outcome.boundary_p[0, i])
    test = f"p {p:.2g} {'<' if p <= bound else '>='} boundary {bound:.2g}"
    at = int(outcome.look[0, i]) + 1
    if state != OPEN and at < k:  # the numbers of the look it stopped at, named as such
        test += f" at look {at}"
    if state == DECIDED:
        if c.margin is not None:
            what = f"equivalent within +-{c.margin:g}"
        elif outcome.sign[0, i] == math.copysign(1.0, c.paper):
            what = "same direction as the paper"
        else:
            what = "contradicts the paper's direction"
        return f"{head}: {test}: stop: decided at look {at}, {what}"
    if state == FUTILE:
        level = design.alpha / max(1, len(design.claims) - int(np.sum(outcome.state[0] == DECIDED)))
        sd = float(outcome.sd[0, i])
        need = (rep.seeds_for_direction(abs(c.paper), sd=sd, alpha=level) if c.margin is None and math.isfinite(sd)
                else None)
        words = f"would need {need} seeds per row" if need else "no seed count within reach"
        return (f"{head}: {test}: stop: futile (conditional power {float(outcome.power_needed[0, i]):.0%} at the "
                f"paper's effect; {words})")
    if k == design.looks:
        return f"{head}: {test}: not decided at the last look"
    return f"{head}: {test}: continue to look {k + 1} ({c.pairs[k]} paired seeds)"
