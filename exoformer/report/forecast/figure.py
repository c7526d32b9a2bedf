"""The ladder figure of `predict TABLE --from LADDER --figure PATH`: loss against training compute per row, on log
axes: the ladder's runs, each row's fitted law at its target size, the forecast with its 95% interval for one run,
our run and the paper's value where comparable. A row whose law is degenerate (LawFit.degenerate) is not drawn:
its reason is printed instead (docs/forecast.md). Each row keeps its colour (report/figures/style.py) and gets its own
line style and marker, so the figure reads in grey too. Compute is the real training FLOPs per token (budget/cost.py)
times the tokens.
"""

from __future__ import annotations

import math
import os

import numpy as np

from exoformer.registry.registry import Registry
from exoformer.report.figures.canvas import pyplot, write
from exoformer.report.forecast.table_forecast import TableForecast
from exoformer.report.figures.style import style_of
from exoformer.report.tables.build import PERPLEXITY

LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)), (0, (8, 3)),
               (0, (3, 3, 1, 3, 1, 3)))
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "<", ">")


def draw_forecast(f: TableForecast, path: str | os.PathLike, registry: Registry | None = None) -> bool:
    """Write the figure to `path` (PNG, atomically); False, writing nothing, when no row has a law to draw."""
    if all(law.degenerate() for law in f.laws.values()):
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.0, 5.2))
    registry = registry or Registry()
    # a lower bound at or below zero loss has no place on a log axis: bars are cut at half the lowest loss shown
    floor = 0.5 * min([r.loss for runs in f.ladder.runs.values() for r in runs if r.loss > 0]
                      + [math.log(c.value) for c in f.cells.values() if c.value is not None and c.value > 1
                         and c.column == PERPLEXITY], default=1.0)
    skipped = [row for row, law in f.laws.items() if law.degenerate()]
    drawn = set()  # the marks the key explains: only those on the figure
    for i, (row, law) in enumerate(f.laws.items()):
        if row in skipped:
            continue
        style = style_of(registry, row)
        line, marker = LINE_STYLES[i % len(LINE_STYLES)], MARKERS[i % len(MARKERS)]
        aim = f.targets[row]
        runs = f.ladder.runs[row]
        ax.scatter([r.flops_per_token * r.tokens for r in runs], [r.loss for r in runs], marker=marker,
                   color=style.colour, s=22, alpha=0.8, zorder=3)
        tokens = np.geomspace(min(r.tokens for r in runs) / 1.5, aim.tokens * 1.2, 80)
        curve = law.predict(aim.params, tokens)
        ax.plot(aim.flops_per_token * tokens, np.where(curve > 0, curve, np.nan), linestyle=line, color=style.colour,
                lw=1.4, label=style.label)
        cell = f.cells.get((row, PERPLEXITY))
        x = aim.flops_per_token * aim.tokens
        if cell is not None and cell.value is not None and cell.value > 1:  # a loss > 0 only can sit on a log axis
            loss, lo, hi = math.log(cell.value), max(math.log(max(cell.lo, 1.0 + 1e-12)), floor), math.log(cell.hi)
            ax.errorbar([x], [loss], yerr=[[loss - lo], [hi - loss]], fmt=marker, color=style.colour, ms=7,
                        mfc="white", mew=1.5, capsize=3, zorder=4)
            drawn.add("forecast")
            if not f.comparable and cell.ours is not None:
                ax.scatter([x], [math.log(cell.ours)], marker="x", color=style.colour, s=50, zorder=5)
                drawn.add("ours")
            if not f.comparable and f.paper_scale and cell.paper is not None:
                ax.scatter([x], [math.log(cell.paper)], marker="*", color=style.colour, s=90, edgecolors="black",
                           linewidths=0.5, zorder=5)
                drawn.add("paper")
    ax.set_xscale("log")
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:.3g}")
    ax.yaxis.set_major_formatter(plain)
    low, high = ax.get_ylim()
    ax.yaxis.set_minor_formatter(plain if high / low < 10 else NullFormatter())  # label minor ticks in one decade
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xlabel("training compute (FLOPs: real FLOPs per token x tokens)")
    ax.set_ylabel("validation loss, ln(val_ppl)")
    ax.set_title(f"{f.table}: ladder {f.group} -> preset {f.preset}", fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    handles, labels = ax.get_legend_handles_labels()
    marks = {"forecast": dict(marker="o", mfc="white", ms=7, label="forecast, 95% for one run"),
             "ours": dict(marker="x", ms=7, label=f"our {f.preset} run"),
             "paper": dict(marker="*", mec="black", ms=9, label="paper")}
    key = [plt.Line2D([], [], color="0.3", marker="o", ls="none", ms=5, label="ladder run")]
    key += [plt.Line2D([], [], color="0.3", ls="none", **mark) for name, mark in marks.items() if name in drawn]
    ax.legend(handles + key, labels + [k.get_label() for k in key], fontsize=7, loc="center left",
              bbox_to_anchor=(1.01, 0.5), frameon=False)
    note = f.comparable or ("lines: each row's law at its target size, up to the target's tokens; interval bars cut "
                            "at half the lowest loss shown")
    if skipped:
        note += f"; not drawn: {len(skipped)} row(s) without a law the ladder supports (the text says why)"
    fig.text(0.01, 0.005, note, fontsize=7, color="firebrick" if f.comparable else "0.3")
    write(fig, path, "png")
    plt.close(fig)
    return True
