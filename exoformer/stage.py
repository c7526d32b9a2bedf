"""What every stage of a run gets (docs/architecture.md "Runs"): one typed context, shared by the pipeline that
calls the stages and the packages that implement them (train, eval, analysis) without an import cycle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exoformer.rundir import RunDir


def _quiet(text: str) -> None:
    return None


@dataclass(kw_only=True, slots=True)
class StageContext:
    run_dir: Path
    spec: Any
    """The resolved exoformer.registry.spec.Spec of the run."""
    device: str | None = None
    """torch device string, None for the default (the first CUDA GPU, else CPU)."""
    say: Callable[[str], None] = _quiet
    """One line to the run's log."""

    @property
    def files(self) -> RunDir:
        return RunDir(self.run_dir)
