"""The one way a figure is finished and written: text stacked below what is drawn, then PNG + PDF.

Every figure kind (exoformer/report/figures/draw.py, exoformer/report/figures/analysis_plots.py) ends in `save`. Text under
a figure (a legend below its panels, notes on models without a line, the data-efficiency ratios, which models
a subset figure shows, the red "not comparable with the paper" footnote) is placed by `below`, which measures
what the renderer has drawn so far, so no two of them overlap however many lines each has. `notes` holds the
subset note and the comparability footnote of the figure being drawn; `save` writes them last, lowest.
`variant` names the files of a variant reading (`figure --preset P --set K=V`): every file a figure writes is
named by `file_name`, so a variant's figure never overwrites the default reading's.
matplotlib only (Agg); never imports torch.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exoformer.io import atomic_write_bytes

GAP_POINTS = 6.0
"""Space between two stacked blocks of text under a figure."""
DPI = 150
FORMATS = ("png", "pdf")
NOTE_COLOUR = "0.3"
FOOTNOTE_COLOUR = "firebrick"


@dataclass(kw_only=True, slots=True, frozen=True)
class FigureNotes:
    """What `save` writes under the figure being drawn: which models it shows, and why it is not comparable."""

    shown: str = ""
    footnote: str = ""


_NOTES: contextvars.ContextVar[FigureNotes] = contextvars.ContextVar("figure_notes", default=FigureNotes())
_VARIANT: contextvars.ContextVar[str] = contextvars.ContextVar("figure_variant", default="")


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def notes(*, shown: str = "", footnote: str = "") -> Iterator[None]:
    """Every figure saved inside carries these notes under it."""
    token = _NOTES.set(FigureNotes(shown=shown, footnote=footnote))
    try:
        yield
    finally:
        _NOTES.reset(token)


@contextlib.contextmanager
def variant(suffix: str) -> Iterator[None]:
    """Every file written inside is named `stem` + `suffix` + its extension (`suffix`: tables.build.variant_suffix
    of the reading's --preset and --set, the rule `table --out` names its files by; "" for the default reading)."""
    token = _VARIANT.set(suffix)
    try:
        yield
    finally:
        _VARIANT.reset(token)


def file_name(stem: str, extension: str) -> str:
    """The name of a figure's file: `stem`, the variant's suffix (see `variant`), `.extension`."""
    return f"{stem}{_VARIANT.get()}.{extension}"


def below(fig: Any) -> float:
    """Where the next block under the figure starts (its top), as a figure fraction: one gap below everything
    drawn so far (axes with their tick labels, legends, texts)."""
    fig.canvas.draw()
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    return box.y0 / fig.get_figheight() - GAP_POINTS / 72.0 / fig.get_figheight()


def add_below(fig: Any, text: str, *, fontsize: float = 7, color: str = NOTE_COLOUR) -> Any:
    """`text` under everything drawn so far, left-aligned; returns the Text artist (None for no text)."""
    if not text:
        return None
    return fig.text(0.01, below(fig), text, fontsize=fontsize, color=color, va="top", ha="left")


def write(fig: Any, path: str | os.PathLike, fmt: str) -> Path:
    """`fig` as one `fmt` file at `path`, written atomically (a reader never sees half a figure)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=DPI, bbox_inches="tight")
    return atomic_write_bytes(path, buffer.getvalue())


def save(fig: Any, out_dir: str | os.PathLike, stem: str) -> list[Path]:
    """Write the current notes under `fig`, then `stem`.png and `stem`.pdf into out_dir."""
    current = _NOTES.get()
    add_below(fig, current.shown)
    add_below(fig, current.footnote, fontsize=6, color=FOOTNOTE_COLOUR)
    written = [write(fig, Path(out_dir) / file_name(stem, fmt), fmt) for fmt in FORMATS]
    pyplot().close(fig)
    return written
