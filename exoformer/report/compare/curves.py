"""`compare --curves`: the validation-loss curves of the compared runs overlaid on one axes.

Two variants of one spec share its model colour (exoformer/report/figures/style.py), so each run gets its own: the model
colour for the first run of a model, then the first colour of style's fallback palette no run holds yet, and a
linestyle of its own, so runs stay apart in grey print too. Each run has its marker at its validation points
and a line narrower than the one before, so a run that follows another's curve stays visible on it. The legend
names each run by its letter and spec@preset[+overrides]; a run without a curve is named under the plot, never
drawn as a made-up line. The curve is the one Selection.curve reads (RunDir.val_curve, the paper's convention).
The axes zoom where the runs differ as the validation-loss figure does (draw.py zoom_window: from ZOOM_FROM of the
tokens on, y not from 0, said on the y axis), with the whole run, y from 0, in an inset marking the zoomed window.
matplotlib (Agg); torch-free.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

from exoformer.report.figures import style
from exoformer.report.figures.canvas import add_below, notes, pyplot, save
from exoformer.report.compare.side_by_side import comparability_lines
from exoformer.report.compare.operands import Compared

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
"""One per operand, at each validation point: two variants share their curve until they part, and the markers
show both there."""
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (8, 2)), (0, (3, 1, 3, 3)))
"""One per operand (exoformer/report/compare/operands.py MAX_OPERANDS of them)."""
PALETTE = ("#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B", "#E377C2", "#7F7F7F", "#BCBD22",
           "#17BECF")
"""Colours handed out after a model's own is taken (matplotlib's tab10): more than MAX_OPERANDS of them."""
DEFAULT_DIR = "figures"


def default_path(runs: list[Compared]) -> Path:
    """figures/compare-<label>_vs_<label>....png, each label reduced to [A-Za-z0-9._=+-]."""
    names = "_vs_".join(re.sub(r"[^A-Za-z0-9._=+-]+", "-", c.label.replace("@", ".")) for c in runs)
    if len(names) > 150:
        import hashlib

        names = f"{names[:120]}-{hashlib.sha256(names.encode()).hexdigest()[:12]}"
    return Path(DEFAULT_DIR) / f"compare-{names}.png"


def run_styles(registry: Any, runs: list[Compared]) -> list[tuple[str, Any]]:
    """(colour, linestyle) per run, each colour and each linestyle used once."""
    taken: list[str] = []
    out = []
    for k, c in enumerate(runs):
        colour = style.colour_of(registry, c.identity.spec)
        if colour in taken:
            colour = next(p for p in PALETTE if p not in taken)
        taken.append(colour)
        out.append((colour, LINESTYLES[k % len(LINESTYLES)]))
    return out


def _zoom(ax: Any, drawn: list[tuple[list, list, dict]]) -> None:
    """The validation-loss figure's zoom (exoformer/report/figures/draw.py zoom_window): from ZOOM_FROM of the
    longest run's tokens on, y over the loss range the curves cover there, the cut stated on the y axis; the whole
    run in an inset with the zoomed window as a grey box, so nothing is cut without being shown."""
    from matplotlib.patches import Rectangle

    from exoformer.report.figures.draw import ZOOM_FROM, zoom_window

    window = zoom_window([(tokens, losses) for tokens, losses, _ in drawn])
    if window is None:
        return
    x0, x1, y0, y1 = window
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_ylabel(f"validation loss\n(zoom: from {ZOOM_FROM:.0%} of the tokens on; y not from 0)")
    whole = ax.inset_axes((1.13, 0.0, 0.42, 0.42))  # right of the data, under the legend: never over a curve
    for tokens, losses, look in drawn:
        whole.plot(tokens, losses, **(look | {"markersize": 1.5, "linewidth": 0.8}))
    whole.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, facecolor="0.88", edgecolor="0.45", linewidth=0.8,
                              zorder=0))
    whole.set_ylim(bottom=0.0)  # the overview is the uncut axis
    whole.set_title("whole run, y from 0 (grey box: the zoom)", fontsize=6)
    whole.tick_params(labelsize=5)
    style.count_axis(whole.xaxis)
    style.count_axis(ax.xaxis)
    whole.grid(alpha=0.3)


def draw_compare(registry: Any, runs: list[Compared], path: str | Path) -> list[Path]:
    """The overlay as `path` (.png) and the PDF beside it; returns both paths."""
    path = Path(path)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    missing = []
    drawn = []
    for k, (c, (colour, linestyle)) in enumerate(zip(runs, run_styles(registry, runs))):
        tokens, losses = c.selection.curve(c.picked)
        if not tokens:
            missing.append(f"{c.letter} {c.label}")
            continue
        look = dict(color=colour, linestyle=linestyle, linewidth=max(0.8, 2.4 - 0.4 * k),
                    marker=MARKERS[k % len(MARKERS)], markersize=3.5, markerfacecolor="none" if k else colour)
        ax.plot(tokens, losses, label=f"{c.letter} {c.label}", **look)
        drawn.append((list(tokens), list(losses), look))
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss")
    _zoom(ax, drawn)
    ax.set_title(f"validation loss (the paper's convention) of {', '.join(c.letter for c in runs)}", fontsize=9,
                 loc="left")
    ax.grid(alpha=0.3)
    if len(missing) < len(runs):
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False, fontsize=7)
    if missing:
        add_below(fig, "\n".join(textwrap.wrap("no validation curve (not drawn): " + "; ".join(missing), 120)),
                  fontsize=7, color="black")
    footnote = "\n".join(textwrap.wrap("; ".join(comparability_lines(runs)), 130))
    with notes(footnote=footnote):
        return save(fig, path.parent, path.stem)
