"""A loss law in parameters and tokens, L(N, D) = E + A / N^alpha + B / (D N^gamma)^beta, fitted to a ladder of
runs with bootstrap intervals at any point, extrapolated ones included.

With gamma = 0 it is the law OLMo-core's ladders and the Chinchilla analysis fit (docs/forecast.md). gamma lets a
larger model draw more from each token, as short runs do (the loss still falls with the steps, faster the wider
the model). It is fitted only where the ladder varies the tokens within at least two sizes, and kept only where
an F test of the nested fits rejects gamma = 0 at INTERACTION_P; else the law has the five Chinchilla parameters.

The fit works in normalised units (N / N0, D / D0 with N0, D0 the ladder's geometric means) and in the parameters
(E, log A, alpha, log B, beta[, gamma]), so A and B stay positive and the problem is well scaled. It starts from
the best point of a grid over the exponents (E, A and B are linear given them: variable projection), then refines
all of them with Levenberg-Marquardt. The floor E is kept >= 0: the loss is a cross-entropy.

Intervals come from a residual bootstrap: residuals (rescaled by sqrt(n / (n - k)) for the k fitted
parameters) are resampled onto the fitted values and the law refitted from the point estimate, every replicate
at once (a batched Levenberg-Marquardt in numpy). At a point, the interval for the expected loss is the
prediction plus or minus the t quantile with n - k degrees of freedom times the bootstrap standard deviation; the
interval for one run adds the residual variance. tests/report/forecast/test_scaling_law.py measures their coverage on
ladders drawn from a known law.

The bootstrap carries noise, not the law's misfit. So the ladder also forecasts itself: the law refitted without
its largest size forecasts that size, and without each size's longest budget forecasts those runs. The worse of
the two out-of-sample errors, per unit of log extrapolation, times the target's log distance outside the ladder,
is a floor on the half-width (docs/forecast.md; coverage in tests/report/forecast/test_forecast_misfit.py).

Pure numpy/scipy: the report layer reads runs, never trains them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from exoformer.errors import UserError

N_PARAMS = 5
"""E, A, alpha, B, beta: the Chinchilla form."""
MIN_POINTS = N_PARAMS + 1
"""A law with five parameters needs at least one residual degree of freedom."""
INTERACTION_P = 0.05
"""The F test's level for keeping gamma: below it the sixth parameter explains more than noise would."""
GAMMA_BOUNDS = (-1.0, 2.0)
"""The range gamma is searched in; a fit at its edge is a weak spot."""
_GAMMA_GRID = np.linspace(-0.5, 1.5, 17)
MAX_BOOTSTRAP = 100_000
"""Replicates are held in memory at once (points x replicates floats)."""
MAX_BOOTSTRAP_CELLS = 4_000_000
"""Points x replicates of one command: the fit's time and memory grow with their product (4,000,000 take about
10 s and 700 MB; 1,000 points x 100,000 replicates ran out of memory)."""
MIN_DOF = 3
"""Residual degrees of freedom below which a law prints no number: its t quantile (4.3 at 2 dof, 12.7 at 1) and
its residual spread rest on too few runs."""
MORE_POINTS = ">= 3 sizes x 3 budgets"
"""The ladder that lets a law be fitted with MIN_DOF and tested on itself (leave out a size, leave out a budget)."""
LONGER_BUDGETS = "budgets long enough that the loss flattens"
"""What a floor pinned at 0 or an exponent at its bound asks for: the loss still falls too steeply to place them."""
_EXPONENT_GRID = np.geomspace(0.02, 2.5, 48)
_LM_STEPS = 60


@dataclass(frozen=True, slots=True)
class LawFit:
    """A fitted law, its residual spread and its bootstrap replicates (rows of `boot`, in fit units)."""

    E: float
    A: float
    alpha: float
    B: float
    beta: float
    sigma: float
    """Residual standard deviation with n - k degrees of freedom: the spread of one run about the law."""
    n: int
    n0: float
    d0: float
    boot: np.ndarray
    """(replicates, k): E, log A', alpha, log B', beta[, gamma] in normalised units."""
    misfit: float = math.nan
    """The law's out-of-sample relative error per unit of log extrapolation, measured on the ladder itself (the
    worse of leaving out its largest size and its longest budgets); NaN when the ladder cannot leave one out."""
    misfit_why: str = ""
    """Why `misfit` is NaN."""
    seen: tuple[tuple[float, float], ...] = ()
    """The ladder's (min, max) of params, tokens, tokens per parameter and compute 6ND."""
    shape: tuple[int, int] = (0, 0)
    """(sizes, budgets) of the ladder."""
    gamma: float = 0.0
    """How much more a larger model draws from each token (the data term falls with D N^gamma); 0 in the
    Chinchilla form."""
    interaction_p: float = math.nan
    """The F test's p-value for gamma = 0 against the fitted gamma; NaN where the ladder cannot tell them apart."""

    @property
    def k(self) -> int:
        """Fitted parameters: 6 with gamma, 5 without."""
        return self.boot.shape[1]

    @property
    def dof(self) -> int:
        return self.n - self.k

    @property
    def size_negligible(self) -> bool:
        """Whether the size term A / N^alpha is below the runs' scatter from the ladder's largest size on: then an
        alpha at its bound only bends the smallest sizes, and a target at or past the largest size forecasts through
        the other terms (in short runs a larger model's gain shows through gamma)."""
        return self.A / self.seen[0][1] ** self.alpha < self.sigma if self.seen else False

    def formula(self) -> str:
        """The law with its numbers, one line."""
        data = f"(D N^{self.gamma:.3f})" if self.k > N_PARAMS else "D"
        return f"{self.E:.4g} + {self.A:.4g}/N^{self.alpha:.3f} + {self.B:.4g}/{data}^{self.beta:.3f}"

    def weak_spots(self) -> list[str]:
        """Why the ladder does not pin this law down, if it does not: the floor held at zero, an exponent outside
        the range the fit searches, fewer than MIN_DOF residual dof, no size or budget to leave out. Such a law
        prints no number (docs/forecast.md): its forecasts extrapolate a form the runs do not support."""
        spots = pinned(self.E, self.alpha, self.beta, self.gamma if self.k > N_PARAMS else None,
                       size_negligible=self.size_negligible)
        spots += [f"{self.dof} residual dof (needs >= {MIN_DOF})"] if self.dof < MIN_DOF else []
        return spots + ([self.misfit_why] if self.misfit_why else [])

    def degenerate(self) -> str:
        """One line: why this law prints no number and the ladder that would fix it; empty when it may."""
        spots = self.weak_spots()
        if not spots:
            return ""
        fixes = [MORE_POINTS] if self.dof < MIN_DOF or self.misfit_why else []
        fixes += [LONGER_BUDGETS] if any(s.startswith(("the floor", "alpha", "beta", "gamma")) for s in spots) else []
        sizes, budgets = self.shape
        return (f"no forecast: {'; '.join(spots)}; the ladder needs {' and '.join(fixes)} (this one: {sizes} sizes "
                f"x {budgets} budgets, {self.n} runs)")

    def outside(self, params: float, tokens: float) -> list[str]:
        """How far a point's tokens per parameter and compute 6ND lie outside the ladder's range; empty inside."""
        out = []
        for what, value, (low, high) in (("tokens per parameter", tokens / params, self.seen[2]),
                                         ("compute 6ND", 6 * params * tokens, self.seen[3])):
            if value > high * (1 + 1e-9):
                out.append(f"{what} {value:.3g} is {value / high:.3g}x the ladder's largest")
            elif value < low * (1 - 1e-9):
                out.append(f"{what} {value:.3g} is 1/{low / value:.3g} of the ladder's smallest")
        return out

    def misfit_half(self, params, tokens) -> np.ndarray:
        """The misfit floor on the half-width at each point: the ladder's out-of-sample relative error per log
        unit times the point's log distance outside the ladder in parameters plus in tokens, times the loss."""
        params, tokens = np.broadcast_arrays(np.atleast_1d(np.asarray(params, float)),
                                             np.atleast_1d(np.asarray(tokens, float)))
        (n_lo, n_hi), (d_lo, d_hi) = self.seen[0], self.seen[1]
        distance = (np.maximum(0.0, np.maximum(np.log(params / n_hi), np.log(n_lo / params)))
                    + np.maximum(0.0, np.maximum(np.log(tokens / d_hi), np.log(d_lo / tokens))))
        return self.misfit * distance * np.abs(self.predict(params, tokens))

    def predict(self, params, tokens) -> np.ndarray:
        """The law's expected loss at each (params, tokens)."""
        return _law(self._theta()[None, :], *self._units(params, tokens))[0]

    def replicates(self, params, tokens) -> np.ndarray:
        """(replicates, points): the bootstrap laws' expected loss at each point."""
        return _law(self.boot, *self._units(params, tokens))

    def interval(self, params, tokens, *, level: float = 0.95, one_run: bool = False,
                 misfit: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Interval for the expected loss at each point, or (`one_run`) for the loss of one more run there.

        The law's half-width is the wider of the bootstrap's and the misfit floor (`misfit_half`): the bootstrap
        is right when the law's form is, the floor when the form misfits. One run adds its scatter in quadrature
        (independent of both). `misfit=False` gives the bootstrap interval alone."""
        centre = self.predict(params, tokens)
        quantile = stats.t.ppf(0.5 + level / 2, self.dof)
        half = quantile * np.nanstd(self.replicates(params, tokens), axis=0, ddof=1)
        if misfit and np.isfinite(self.misfit):
            half = np.maximum(half, self.misfit_half(params, tokens))
        if one_run:
            half = np.sqrt(half ** 2 + (quantile * self.sigma) ** 2)
        return centre - half, centre + half

    def _units(self, params, tokens) -> tuple[np.ndarray, np.ndarray]:
        return np.broadcast_arrays(np.atleast_1d(np.asarray(params, float)) / self.n0,
                                   np.atleast_1d(np.asarray(tokens, float)) / self.d0)

    def _theta(self) -> np.ndarray:
        # in normalised units the data term is B' / (y x^gamma)^beta with B' = B (d0 n0^gamma)^-beta
        theta = [self.E, np.log(self.A * self.n0 ** -self.alpha), self.alpha,
                 np.log(self.B * (self.d0 * self.n0 ** self.gamma) ** -self.beta), self.beta]
        return np.array(theta + ([self.gamma] if self.k > N_PARAMS else []))


def pinned(e: float, alpha: float, beta: float, gamma: float | None = None, *,
           size_negligible: bool = False) -> list[str]:
    """The parameters a fit holds at an edge of its search (the runs do not place them), in words. alpha is not
    counted when its term is below the runs' scatter from the ladder's largest size on (`size_negligible`)."""
    low, high = float(_EXPONENT_GRID[0]), float(_EXPONENT_GRID[-1])
    spots = ["the floor E pinned at 0"] if e <= 1e-9 else []
    spots += [f"{name} {value:.3g} at or past the searched {low:g}-{high:g}"
              for name, value in (("alpha", alpha), ("beta", beta))
              if not low < value < high and not (name == "alpha" and size_negligible)]
    g_low, g_high = GAMMA_BOUNDS
    if gamma is not None and not g_low + 1e-6 < gamma < g_high - 1e-6:
        spots.append(f"gamma {gamma:.3g} at the searched {g_low:g}-{g_high:g}")
    return spots


def _data_log(theta: np.ndarray, lx: np.ndarray, ly: np.ndarray) -> np.ndarray:
    """(replicates, points) log of the data term's base, ln y + gamma ln x (gamma = 0 in the five-parameter form)."""
    if theta.shape[1] > N_PARAMS:
        return ly[None, :] + theta[:, 5:6] * lx[None, :]
    return np.broadcast_to(ly[None, :], (theta.shape[0], len(ly)))


def _law(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(replicates, points) loss for theta (replicates, 5 or 6) at normalised sizes x and token counts y."""
    lx = np.log(x)
    return (theta[:, 0:1] + np.exp(theta[:, 1:2] - theta[:, 2:3] * lx[None, :])
            + np.exp(theta[:, 3:4] - theta[:, 4:5] * _data_log(theta, lx, np.log(y))))


def _jacobian(theta: np.ndarray, lx: np.ndarray, ly: np.ndarray) -> np.ndarray:
    """(replicates, points, 5 or 6): derivatives of the law with respect to theta."""
    term_a = np.exp(theta[:, 1:2] - theta[:, 2:3] * lx[None, :])
    data_log = _data_log(theta, lx, ly)
    term_b = np.exp(theta[:, 3:4] - theta[:, 4:5] * data_log)
    columns = [np.ones_like(term_a), term_a, -term_a * lx, term_b, -term_b * data_log]
    if theta.shape[1] > N_PARAMS:
        columns.append(-term_b * theta[:, 4:5] * lx[None, :])
    return np.stack(columns, axis=-1)


def _refine(theta: np.ndarray, x: np.ndarray, y: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Levenberg-Marquardt on every replicate at once: theta (R, k), target (R, points); stops when no step moves
    any replicate by more than 1e-10 (relative) or after _LM_STEPS steps."""
    lx, ly = np.log(x), np.log(y)
    damping = np.full(theta.shape[0], 1e-3)
    cost = np.sum((_law(theta, x, y) - target) ** 2, axis=1)
    eye = np.eye(theta.shape[1])
    for _ in range(_LM_STEPS):
        jac = _jacobian(theta, lx, ly)
        resid = _law(theta, x, y) - target
        jac_t = jac.transpose(0, 2, 1)
        jtj = jac_t @ jac
        grad = (jac_t @ resid[..., None])[..., 0]
        scale = np.einsum("rii->ri", jtj) + 1e-12
        step = np.linalg.solve(jtj + damping[:, None, None] * scale[:, :, None] * eye, -grad[..., None])[..., 0]
        trial = theta + step
        trial[:, 0] = np.maximum(trial[:, 0], 0.0)  # a cross-entropy never falls below zero, nor does its floor
        trial[:, 2] = np.clip(trial[:, 2], 1e-3, 10.0)
        trial[:, 4] = np.clip(trial[:, 4], 1e-3, 10.0)
        if trial.shape[1] > N_PARAMS:
            trial[:, 5] = np.clip(trial[:, 5], *GAMMA_BOUNDS)
        with np.errstate(over="ignore", invalid="ignore"):
            trial_cost = np.sum((_law(trial, x, y) - target) ** 2, axis=1)
        better = np.isfinite(trial_cost) & (trial_cost < cost)
        theta = np.where(better[:, None], trial, theta)
        cost = np.where(better, trial_cost, cost)
        damping = np.clip(np.where(better, damping / 3, damping * 4), 1e-9, 1e9)
        if np.max(np.abs(step) / (np.abs(theta) + 1e-3)) < 1e-10:
            break
    return theta


def _grid_start(x: np.ndarray, y: np.ndarray, loss: np.ndarray) -> tuple[np.ndarray, float] | None:
    """The best (alpha, beta) of the grid with E, A, B solved linearly there (A, B > 0 required), and its sum of
    squares; None if none."""
    alpha, beta = (g.ravel() for g in np.meshgrid(_EXPONENT_GRID, _EXPONENT_GRID, indexing="ij"))
    design = np.stack([np.ones((len(alpha), len(x))), np.exp(-alpha[:, None] * np.log(x)[None, :]),
                       np.exp(-beta[:, None] * np.log(y)[None, :])], axis=-1)
    design_t = design.transpose(0, 2, 1)
    gram = design_t @ design  # (grid, 3, 3); matmul, not einsum: the grid start is most of a fit's time
    with np.errstate(all="ignore"):
        coef = np.linalg.solve(gram + 1e-12 * np.eye(3), (design_t @ loss)[..., None])[..., 0]
        # E = 0 where the free floor would be negative (a loss is never below zero): the lower-right 2 x 2 block
        coef0 = np.linalg.solve(gram[:, 1:, 1:] + 1e-12 * np.eye(2), (design_t[:, 1:] @ loss)[..., None])[..., 0]
        coef = np.where((coef[:, 0] < 0)[:, None], np.column_stack([np.zeros(len(coef0)), coef0]), coef)
        cost = np.sum(((design @ coef[..., None])[..., 0] - loss) ** 2, axis=1)
    cost[~((coef[:, 1] > 0) & (coef[:, 2] > 0) & np.isfinite(cost))] = np.inf
    best = int(np.argmin(cost))
    if not np.isfinite(cost[best]):
        return None
    e, a, b = coef[best]
    return np.array([e, np.log(a), alpha[best], np.log(b), beta[best]]), float(cost[best])


def _interaction_start(x: np.ndarray, y: np.ndarray, loss: np.ndarray) -> np.ndarray | None:
    """The grid start with gamma too: for each gamma of its grid the data term's base is y x^gamma."""
    best = None
    for gamma in _GAMMA_GRID:
        got = _grid_start(x, y * x ** gamma, loss)
        if got is not None and (best is None or got[1] < best[1]):
            best = (np.append(got[0], gamma), got[1])
    return None if best is None else best[0]


def can_interact(params: np.ndarray, tokens: np.ndarray) -> bool:
    """Whether the ladder can tell gamma from the size term: at least two sizes each ran two or more budgets, and
    a six-parameter law keeps MIN_DOF residual dof."""
    varied = sum(len(np.unique(tokens[params == p])) >= 2 for p in np.unique(params))
    return varied >= 2 and len(params) - (N_PARAMS + 1) >= MIN_DOF


def check_ladder(params, tokens, loss, *, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ladder as float arrays, or one UserError naming what is missing for a law in N and D."""
    params, tokens, loss = (np.asarray(v, dtype=float).ravel() for v in (params, tokens, loss))
    if not (len(params) == len(tokens) == len(loss)):
        raise UserError("params, tokens and loss differ in length", where=where, fix="give one value of each per run")
    bad = ~(np.isfinite(params) & np.isfinite(tokens) & np.isfinite(loss)) | (params <= 0) | (tokens <= 0)
    if bad.any():
        raise UserError(f"{int(bad.sum())} point(s) with a non-finite loss or a non-positive size or token count",
                        where=where, fix="drop those runs or mend their numbers")
    sizes, budgets = len(np.unique(params)), len(np.unique(tokens))
    if sizes < 2:
        raise UserError("one model size only: a law in parameters needs at least 2 sizes (3 or more to trust it)",
                        where=where, fix="add runs of other widths or depths to the ladder")
    if budgets < 2:
        raise UserError("one token budget only: a law in tokens needs at least 2 budgets",
                        where=where, fix="add runs with another train.tokens to the ladder")
    if len(loss) < MIN_POINTS:
        raise UserError(f"{len(loss)} point(s): a law with {N_PARAMS} parameters needs at least {MIN_POINTS}",
                        where=where, fix="add sizes or token budgets to the ladder")
    # the plane through the runs in (ln N, ln D): its fall across the ladder must stand out of the runs' scatter
    # about it, or the law fits noise (a flat ladder was fitted with a zero-width interval)
    design = np.column_stack([np.ones_like(loss), np.log(params), np.log(tokens)])
    coef = np.linalg.lstsq(design, loss, rcond=None)[0]
    scatter = float(np.sqrt(np.sum((loss - design @ coef) ** 2) / (len(loss) - 3)))
    for slope, values, what in zip(coef[1:], (params, tokens), ("parameters", "tokens")):
        fall = -float(slope) * float(np.ptp(np.log(values)))
        if fall <= max(scatter, 1e-6 * float(np.mean(np.abs(loss)))):
            raise UserError(f"the loss does not fall with {what} on this ladder (slope {slope:+.3g} per e-fold: a "
                            f"fall of {fall:.3g} across it, against a scatter of {scatter:.3g} about a plane)",
                            where=where, fix="check the runs (a diverged or mislabelled run?) or add points")
    return params, tokens, loss


def check_bootstrap(bootstrap: int, *, where: str, points: int = 0, what: str = "points") -> int:
    """`bootstrap` replicates inside 50 to MAX_BOOTSTRAP, and `points` x replicates inside MAX_BOOTSTRAP_CELLS."""
    if not 50 <= bootstrap <= MAX_BOOTSTRAP:
        raise UserError(f"{bootstrap:,} bootstrap replicates out of range", where=where,
                        fix=f"give 50 to {MAX_BOOTSTRAP:,}")
    if points * bootstrap > MAX_BOOTSTRAP_CELLS:
        raise UserError(f"{points:,} {what} x {bootstrap:,} bootstrap replicates is over {MAX_BOOTSTRAP_CELLS:,}",
                        where=where, fix=f"give --bootstrap {max(50, MAX_BOOTSTRAP_CELLS // points):,} or fewer, "
                                         "or fewer points")
    return bootstrap


def _point_fit(params: np.ndarray, tokens: np.ndarray, loss: np.ndarray, *, interaction: bool = False
               ) -> tuple[np.ndarray, float, float] | None:
    """(theta, n0, d0) of the least-squares law in normalised units, or None when no law with A, B > 0 fits;
    `interaction` fits gamma too."""
    n0, d0 = float(np.exp(np.mean(np.log(params)))), float(np.exp(np.mean(np.log(tokens))))
    x, y = params / n0, tokens / d0
    start = _interaction_start(x, y, loss) if interaction else _grid_start(x, y, loss)
    if start is None:
        return None
    start = start if interaction else start[0]
    return _refine(start[None, :], x, y, loss[None, :])[0], n0, d0


def _sum_of_squares(got, params, tokens, loss) -> float:
    theta, n0, d0 = got
    return float(np.sum((_law(theta[None, :], params / n0, tokens / d0)[0] - loss) ** 2))


def choose_form(params: np.ndarray, tokens: np.ndarray, loss: np.ndarray
                ) -> tuple[tuple[np.ndarray, float, float] | None, float]:
    """The five-parameter fit, or the six-parameter one where the ladder can tell gamma apart (`can_interact`),
    the F test of the nested fits rejects gamma = 0 at INTERACTION_P, and the wider fit holds no parameter at an
    edge of its search that the plain one places (`pinned`); and that test's p-value (NaN when not run)."""
    plain = _point_fit(params, tokens, loss)
    if not can_interact(params, tokens):
        return plain, math.nan
    wide = _point_fit(params, tokens, loss, interaction=True)
    if wide is None or not np.isfinite(wide[0]).all():
        return plain, math.nan
    rss_wide = _sum_of_squares(wide, params, tokens, loss)
    rss_plain = _sum_of_squares(plain, params, tokens, loss) if plain is not None else math.inf
    dof = len(loss) - (N_PARAMS + 1)
    if not math.isfinite(rss_plain):
        return wide, 0.0
    if rss_plain - rss_wide <= 1e-12 * float(np.sum(loss ** 2)):
        return plain, 1.0  # gamma explains nothing a rounding error does not
    f = (rss_plain - rss_wide) / max(rss_wide / dof, 1e-300)
    p = float(stats.f.sf(f, 1, dof))
    if p >= INTERACTION_P:
        return plain, p
    e, log_a, alpha, _, beta, gamma = wide[0]
    negligible = math.exp(log_a - alpha * math.log(float(np.max(params)) / wide[1])) < math.sqrt(rss_wide / dof)
    if plain is not None and (len(pinned(e, alpha, beta, gamma, size_negligible=negligible))
                              > len(pinned(*plain[0][[0, 2, 4]]))):
        return plain, p  # gamma bought its fit by running another parameter off to an edge
    return wide, p


def _held_out(params, tokens, loss, drop: np.ndarray, reach: float, *, interaction: bool = False
              ) -> tuple[float, str]:
    """The relative error per log unit of the law refitted without the `drop` runs, forecasting them (their mean
    signed error: a misfit is a bias, noise averages out); `reach` is how far (log units) they lie outside the
    rest. NaN and why when the rest cannot carry a law."""
    keep = ~drop
    if (len(np.unique(params[keep])) < 2 or len(np.unique(tokens[keep])) < 2
            or keep.sum() < MIN_POINTS + int(interaction)):
        return math.nan, "too few runs left to refit"
    got = _point_fit(params[keep], tokens[keep], loss[keep], interaction=interaction)
    if got is None or not np.isfinite(got[0]).all():
        return math.nan, "no law fits the runs left"
    theta, n0, d0 = got
    with np.errstate(all="ignore"):
        forecast = _law(theta[None, :], params[drop] / n0, tokens[drop] / d0)[0]
    error = float(np.mean(forecast / loss[drop] - 1.0))
    return (abs(error) / reach, "") if math.isfinite(error) else (math.nan, "no law fits the runs left")


def ladder_misfit(params, tokens, loss, *, interaction: bool = False) -> tuple[float, str]:
    """The ladder's out-of-sample relative error per log unit of extrapolation: the worse of (a) the law without
    the largest size forecasting it and (b) the law without each size's longest budget forecasting those. The
    worse, not each on its own axis: a misfit need not split into a size part and a token part as the law does.
    The refits take the form the full ladder chose (`interaction`: with gamma). NaN and why when the ladder cannot
    leave one out (docs/forecast.md)."""
    largest = params == params.max()
    longest = np.array([t == tokens[params == p].max() for p, t in zip(params, tokens)])
    rates, whats, whys = [], [], []
    for drop, axis, what in ((largest, params, "its largest size"), (longest, tokens, "its longest budgets")):
        # how far the held-out runs reach past the rest: the ladder's largest (longest) over the largest left
        reach = math.log(axis.max() / axis[~drop].max()) if (~drop).any() else 0.0
        rate, why = _held_out(params, tokens, loss, drop, reach, interaction=interaction)
        rates.append(rate)
        if why:
            whats.append(what)
            whys.append(why)
    if whys:
        return math.nan, f"cannot leave out {' or '.join(whats)} ({'; '.join(dict.fromkeys(whys))})"
    return float(max(rates)), ""


def _seen(params: np.ndarray, tokens: np.ndarray) -> tuple[tuple[float, float], ...]:
    return tuple((float(v.min()), float(v.max())) for v in (params, tokens, tokens / params, 6 * params * tokens))


def fit_law(params, tokens, loss, *, bootstrap: int = 1000, seed: int = 0, where: str = "ladder") -> LawFit:
    """Fit L(N, D) to a ladder in the form it supports (`choose_form`), with `bootstrap` residual-bootstrap
    replicates and the ladder's own out-of-sample misfit (`ladder_misfit`); UserError when it cannot be fitted at
    all."""
    params, tokens, loss = check_ladder(params, tokens, loss, where=where)
    check_bootstrap(bootstrap, where=where, points=len(loss))
    got, interaction_p = choose_form(params, tokens, loss)
    if got is None:
        raise UserError("the loss does not fall with both parameters and tokens on this ladder (no law with A, B > 0 "
                        "fits it)", where=where, fix="check the runs (a diverged or mislabelled run?) or add points")
    theta, n0, d0 = got
    x, y = params / n0, tokens / d0
    fitted = _law(theta[None, :], x, y)[0]
    resid = loss - fitted
    dof = len(loss) - len(theta)
    sigma = float(np.sqrt(np.sum(resid ** 2) / dof))
    if not np.isfinite(theta).all() or not np.isfinite(sigma):
        raise UserError("the law's fit did not converge", where=where, fix="add points or check the runs")
    rng = np.random.default_rng(seed)
    scaled = (resid - resid.mean()) * np.sqrt(len(loss) / dof)
    targets = fitted[None, :] + rng.choice(scaled, size=(bootstrap, len(loss)), replace=True)
    boot = _refine(np.repeat(theta[None, :], bootstrap, axis=0), x, y, targets)
    interaction = len(theta) > N_PARAMS
    misfit, why = ladder_misfit(params, tokens, loss, interaction=interaction)
    e, log_a, alpha, log_b, beta = theta[:N_PARAMS]
    gamma = float(theta[5]) if interaction else 0.0
    return LawFit(E=float(e), A=float(np.exp(log_a) * n0 ** alpha), alpha=float(alpha),
                  B=float(np.exp(log_b) * (d0 * n0 ** gamma) ** beta), beta=float(beta), sigma=sigma, n=len(loss),
                  n0=n0, d0=d0, boot=boot, misfit=misfit, misfit_why=why, seen=_seen(params, tokens),
                  shape=(len(np.unique(params)), len(np.unique(tokens))), gamma=gamma, interaction_p=interaction_p)


def tokens_to_reach(fit: LawFit, params: float, loss: float, loss_replicates=None) -> tuple[float, np.ndarray]:
    """Tokens at which a model of `params` parameters reaches `loss` under the law, and under each bootstrap law
    (replicate r reaching loss_replicates[r], e.g. replicate r of another row's forecast); inf where the law's floor
    at that size, E + A / N^alpha, is not below the loss."""
    theta = np.vstack([fit._theta()[None, :], fit.boot])
    reps = np.full(len(fit.boot), float(loss)) if loss_replicates is None else np.asarray(loss_replicates, float)
    if reps.shape != (len(fit.boot),):
        raise ValueError(f"loss_replicates must hold {len(fit.boot)} values, got shape {reps.shape}")
    target = np.concatenate([[float(loss)], reps])
    log_x = np.log(params / fit.n0)
    gap = target - theta[:, 0] - np.exp(theta[:, 1] - theta[:, 2] * log_x)
    gamma = theta[:, 5] if theta.shape[1] > N_PARAMS else 0.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_y = (theta[:, 3] - np.log(np.where(gap > 0, gap, 1.0))) / theta[:, 4] - gamma * log_x
        tokens = np.where(gap > 0, fit.d0 * np.exp(log_y), np.inf)
    return float(tokens[0]), tokens[1:]
