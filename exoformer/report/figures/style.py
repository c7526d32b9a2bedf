"""One look per model (label, colour, line style, marker), shared by every figure and the HTML report, as the
registry declares it.

A model is named by its table row id or by a spec name without its seed suffix (`e-exoformer-s1337` ->
`e-exoformer`): Table 1's row ids are the spec stems, so the same model looks the same in the loss curves, the
accuracy bars, the per-layer probes, the similarity matrices and the heatmaps. A row declares its model's label
and colour with `figure: {label, colour}` (experiments/tables.yaml); its line style and marker follow from its
place among the declared models, so nine curves differ in colour AND in (line style, marker), which also tells
them apart in greyscale print. Models without a declaration get a stable look from their name (never one that
depends on which other models are drawn); `model_styles` makes the looks of one figure's models distinct.
`series_styles(n)` gives n distinct looks for series that are not models. Seeds of one model are drawn as their
mean with its 95% Student t interval (`seed_interval`, `seed_half_width`), as the verdicts compute theirs.
"""

from __future__ import annotations

import functools
import re
import textwrap
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

NEUTRAL_RATIO = 1.0
"""The λ ratio (anchor / self) drawn in the neutral colour of a diverging map: both terms weigh the same."""
DIVERGING_MAP = "RdBu_r"
"""Diverging colour map for ratios around NEUTRAL_RATIO (white at the centre)."""
SEQUENTIAL_MAP = "viridis"
"""Perceptually uniform map for quantities without a neutral value (similarities)."""
MISSING_COLOUR = "0.8"
"""Cells with no value in a heatmap (NaN): light grey, outside every colour map used here."""

LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*", "h")
"""Line styles and markers, assigned in turn: len(LINESTYLES) and len(MARKERS) are coprime, so the first 44
models get 44 different (line style, marker) pairs."""
CATEGORICAL = ("#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B", "#E377C2", "#BCBD22", "#17BECF")
"""matplotlib's tab10 without its grey: 9 colours, coprime with the 4 line styles, so series_styles gives 36
different (colour, line style) pairs."""
_FALLBACK = ("#7F7F7F", "#BCBD22", "#17BECF", "#8C564B", "#9467BD", "#2CA02C", "#D62728", "#AEC7E8")
_SEED = re.compile(r"-s\d+$")


@dataclass(kw_only=True, slots=True, frozen=True)
class ModelStyle:
    label: str
    colour: str
    linestyle: str = "-"
    marker: str = "o"

    def line(self) -> dict[str, str]:
        """Keyword arguments of Axes.plot for this look (label not included)."""
        return {"color": self.colour, "linestyle": self.linestyle, "marker": self.marker}


def model_id(name: str) -> str:
    """The model of a spec name or row id: the name without a trailing seed (`-s42`)."""
    return _SEED.sub("", name)


def _nth(index: int, label: str, colour: str) -> ModelStyle:
    return ModelStyle(label=label, colour=colour, linestyle=LINESTYLES[index % len(LINESTYLES)],
                      marker=MARKERS[index % len(MARKERS)])


@functools.lru_cache(maxsize=8)
def models(registry: Any) -> dict[str, ModelStyle]:
    """Model id -> its look, from the rows that declare `figure:` (the first declaration wins); the n-th declared
    model gets the n-th line style and marker."""
    out: dict[str, ModelStyle] = {}
    for table in registry.tables.values():
        for row in table.rows:
            if row.colour and row.id not in out:
                out[row.id] = _nth(len(out), row.figure_label or row.label, row.colour)
    return out


def style_of(registry: Any, name: str, default_label: str | None = None) -> ModelStyle:
    """The look of the model of `name` (a spec name or row id).

    Undeclared models keep `default_label` (e.g. their table row label) or their id, and a colour, line style
    and marker chosen by a hash of the id, so they do not change with the set of models in a figure.
    """
    key = model_id(name)
    declared = models(registry).get(key)
    if declared is not None:
        return declared
    return _nth(zlib.crc32(key.encode()), default_label or key, fallback_colour(key))


def model_styles(registry: Any, names: Iterable[str], labels: Mapping[str, str] | None = None
                 ) -> dict[str, ModelStyle]:
    """name -> look for the models one figure draws, no two models alike: names of one model (its seeds) share a
    look; an undeclared model whose (colour, line style) another model of the figure already has moves on to the
    next line style and marker (declared models never collide: their colours differ, tests check it)."""
    labels = labels or {}
    out: dict[str, ModelStyle] = {}
    taken: dict[tuple[str, str], str] = {}
    by_model: dict[str, ModelStyle] = {}
    for name in names:
        key = model_id(name)
        if key not in by_model:
            look = style_of(registry, name, labels.get(name))
            step = LINESTYLES.index(look.linestyle)
            for shift in range(len(LINESTYLES)):
                candidate = (look.colour.lower(), LINESTYLES[(step + shift) % len(LINESTYLES)])
                if candidate not in taken:
                    break
            if shift:
                look = replace(look, linestyle=candidate[1],
                               marker=MARKERS[(MARKERS.index(look.marker) + shift) % len(MARKERS)])
            taken.setdefault((look.colour.lower(), look.linestyle), key)
            by_model[key] = look
        out[name] = by_model[key]
    return out


def series_styles(count: int) -> list[ModelStyle]:
    """`count` distinct looks (label empty) for series that are not models, e.g. the rungs of a ladder: colour,
    line style and marker each change from one series to the next, and no two of the first 36 share a
    (colour, line style) pair."""
    return [ModelStyle(label="", colour=CATEGORICAL[i % len(CATEGORICAL)], linestyle=LINESTYLES[i % len(LINESTYLES)],
                       marker=MARKERS[i % len(MARKERS)]) for i in range(count)]


def fallback_colour(name: str) -> str:
    """The colour of an undeclared model: chosen by a hash of its id."""
    key = model_id(name)
    return _FALLBACK[zlib.crc32(key.encode()) % len(_FALLBACK)]


def label_of(registry: Any, name: str, default_label: str | None = None) -> str:
    return style_of(registry, name, default_label).label


def colour_of(registry: Any, name: str) -> str:
    return style_of(registry, name).colour


NO_DATA_GID = "no-data"
"""The gid of the text that says why a panel has nothing to draw (tests find it by it)."""


def explain_empty(ax: Any, why: str, *, width: int = 60) -> Any:
    """Write `why` (what is missing and what produces it) in the middle of an axes that has nothing to draw, and
    hide its ticks: a figure never shows an empty frame without saying why. Returns the Text artist."""
    ax.set_xticks([])
    ax.set_yticks([])
    text = "\n".join(textwrap.fill(part, width=width) for part in why.split("\n"))
    artist = ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=8, color="0.25",
                     wrap=False)
    artist.set_gid(NO_DATA_GID)
    return artist


def count_label(value: float, _position: Any = None) -> str:
    """A token or step count as a short tick label: 0, 950, 61k, 1.5M, 10B."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def count_axis(axis: Any) -> None:
    """Tick labels of a count axis (e.g. ax.xaxis of training tokens) in k / M / B, so long numbers never run
    into each other."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(count_label))


# ------------------------------------------------------------------------------------------ seeds

SEED_LEVEL = 0.95
"""The confidence of the band drawn around a mean over seeds: a Student t interval, as the verdicts use."""


def seed_interval(values: Iterable[float], level: float = SEED_LEVEL) -> tuple[float, float, float] | None:
    """(mean, low, high) of the values of several seeds: the mean and its two-sided `level` Student t interval
    (mean ± t(1 - (1 - level) / 2, n - 1) · sd / √n); None for fewer than two finite values (one seed: no band)."""
    import math

    from scipy import stats

    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    if len(finite) < 2:
        return None
    n = len(finite)
    mean = sum(finite) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in finite) / (n - 1))
    half = float(stats.t.ppf(1.0 - (1.0 - level) / 2.0, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def seed_half_width(sd: float | None, n: int, level: float = SEED_LEVEL) -> float | None:
    """The half-width of the `level` Student t interval of a mean of `n` seeds whose sample std is `sd`; None for one
    seed or no std."""
    import math

    from scipy import stats

    if sd is None or n < 2 or not math.isfinite(sd):
        return None
    return float(stats.t.ppf(1.0 - (1.0 - level) / 2.0, n - 1)) * sd / math.sqrt(n)


def seed_count(counts: Iterable[int]) -> str:
    """How many seeds a figure's models have, for its legend or caption: "1 seed", "3 seeds", "1-3 seeds per
    model"."""
    found = sorted({int(c) for c in counts if c})
    if not found:
        return "no seed"
    if len(found) == 1:
        return "1 seed" if found[0] == 1 else f"{found[0]} seeds"
    return f"{found[0]}-{found[-1]} seeds per model"


def band_label(level: float = SEED_LEVEL) -> str:
    """What a band around a mean over seeds is, in a legend or caption."""
    return f"band: {level:.0%} t interval over seeds"
