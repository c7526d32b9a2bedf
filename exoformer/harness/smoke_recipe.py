"""The smoke run's recipe, read from the registry's `smoke` preset (experiments/presets.yaml), its one home.

`python -m exoformer.train --shape smoke` and `reproduce.py run --preset smoke` must train the same thing, so
the CLI reads the preset through the registry's strict loader instead of keeping numbers of its own. Torch-free.
"""

from __future__ import annotations

import os

from exoformer.errors import UserError
from exoformer.harness.registry import Registry

SMOKE_PRESET = "smoke"


def smoke_train_fields(registry: str | os.PathLike | None = None) -> dict:
    """TrainConfig fields the smoke preset sets (a fresh dict); `registry` as for Registry (default: experiments/)."""
    reg = Registry(registry)
    preset = reg.presets.get(SMOKE_PRESET)
    if preset is None:
        raise UserError(f"the registry has no {SMOKE_PRESET!r} preset", where=str(reg.directory),
                        fix="add a `smoke:` preset to its presets.yaml (or unset $EXOFORMER_REGISTRY)")
    return {key.split(".", 1)[1]: entry.value for key, entry in preset.layer.items() if key.startswith("train.")}
