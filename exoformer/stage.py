"""What every stage of a run gets (docs/architecture.md "Runs"): one typed context, shared by the pipeline that
calls the stages and the packages that implement them (train, eval, analysis) without an import cycle.

The context's spec is typed by protocols of what the stages read, not by exoformer.registry.spec.Spec itself:
the registry imports eval (its suites and scoring precisions), whose stages import this module.
exoformer.registry.spec.Spec and exoformer.checkpoint_import.checkpoint_run.CheckpointSpec satisfy them
(tests/test_stage_context.py checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from exoformer.model.config import ModelConfig
from exoformer.run_identity import OURS
from exoformer.rundir import RunDir
from exoformer.train.config import TrainConfig


@runtime_checkable
class EvalSettings(Protocol):
    """The spec's `eval` section (exoformer.registry.spec.EvalConfig)."""

    @property
    def suite(self) -> str: ...
    @property
    def num_fewshot(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def limit(self) -> int | None: ...
    @property
    def precision(self) -> str: ...


@runtime_checkable
class AnalysisSettings(Protocol):
    """The spec's `analysis` section (exoformer.registry.spec.AnalysisConfig)."""

    @property
    def enabled(self) -> bool: ...
    @property
    def probes(self) -> tuple[str, ...]: ...
    @property
    def ablations(self) -> tuple[str, ...]: ...
    @property
    def n_sequences(self) -> int: ...
    @property
    def seq_len(self) -> int | None: ...


@runtime_checkable
class RunSpec(Protocol):
    """A run's resolved spec as its stages read it."""

    @property
    def name(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def variant(self) -> str: ...
    @property
    def shape(self) -> str: ...
    @property
    def hash12(self) -> str: ...
    @property
    def model(self) -> ModelConfig: ...
    @property
    def train(self) -> TrainConfig: ...
    @property
    def eval(self) -> EvalSettings: ...
    @property
    def analysis(self) -> AnalysisSettings: ...

    def semantic(self) -> dict[str, Any]: ...

    def stage_functions(self) -> dict[str, StageFunction]: ...


def run_source(spec: RunSpec) -> str:
    """Where the run's weights come from (exoformer.run_identity.SOURCES), as the spec's hashed payload declares
    it: `checkpoint` for a given checkpoint evaluated as a table row, `ours` (no `source`) for a run we train."""
    return str(spec.semantic().get("source", OURS))


@dataclass(kw_only=True, slots=True)
class StageContext:
    run_dir: Path
    spec: RunSpec
    """The resolved spec of the run."""
    device: str | None = None
    """torch device string, None for the default (the first CUDA GPU, else CPU)."""
    say: Callable[[str], None] = lambda text: None
    """One line to the run's log."""

    @property
    def files(self) -> RunDir:
        return RunDir(self.run_dir)


StageFunction = Callable[[StageContext], dict[str, Any]]
"""A stage: it returns the summary its stage record keeps."""
