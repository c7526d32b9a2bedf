"""Fixtures shared by the harness tests that drive the real launcher with stages that do no work."""

from __future__ import annotations

import pytest

from exoformer.runs import pipeline
from exoformer.registry.registry import Registry


@pytest.fixture(scope="module")
def smoke_spec():
    """base-s42 under the smoke preset, cut to 2 steps."""
    return Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=2"])


@pytest.fixture()
def fake_stages(monkeypatch):
    """Every stage returns at once and records a result; the final-checkpoint check passes (fakes save none)."""
    for name in pipeline.STAGES:
        monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, name, lambda ctx: {"fake": True})
    monkeypatch.setattr(pipeline, "_final_checkpoint_problem", lambda rd, spec: None)
