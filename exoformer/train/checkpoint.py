"""Checkpoints that survive being killed at any moment.

One file per checkpoint, `checkpoints/step_00001234.pt` (the step = updates done), written to a temp file
in the same directory, fsynced, hashed and renamed; then a `step_00001234.pt.sha256` side-car is written
the same way. A checkpoint counts only when its side-car exists and matches, so a torn or partial file is
skipped with a warning and the previous one is used. Older checkpoints are deleted only after a newer one
is complete. Loading uses torch.load(weights_only=True).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from exoformer.errors import UserError
from exoformer.io import atomic_write_text, fsync_dir

NAME = re.compile(r"^step_(\d{8,})\.pt$")

RESUME_TOLERANT_FIELDS = frozenset({"compile", "checkpoint_every", "keep_checkpoints", "final_val_tokens"})
"""TrainConfig fields that may change between a checkpoint and its resumption (they never change the math)."""


def checkpoint_name(step: int) -> str:
    return f"step_{step:08d}.pt"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def save_checkpoint(directory: str | os.PathLike, step: int, state: dict[str, Any], *, keep: int) -> Path:
    """Write `state` as checkpoint `step` atomically with its checksum; keep the newest `keep` checkpoints."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / checkpoint_name(step)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        digest = _sha256(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(directory)
    atomic_write_text(f"{path}.sha256", f"{digest}  {path.name}\n")
    for old in _checkpoints(directory)[keep:]:
        old.unlink(missing_ok=True)
        Path(f"{old}.sha256").unlink(missing_ok=True)
    return path


def _checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files, newest first (by step)."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := NAME.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def verify(path: Path) -> str | None:
    """None when the checkpoint is complete and matches its side-car checksum, else the reason it is not."""
    sidecar = Path(f"{path}.sha256")
    if not sidecar.is_file():
        return "no checksum side-car (partial write)"
    expected = sidecar.read_text().split()[0] if sidecar.read_text().strip() else ""
    actual = _sha256(path)
    return None if actual == expected else f"checksum mismatch (expected {expected[:12]}, got {actual[:12]})"


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """The newest verified checkpoint in `directory`; corrupt or partial files are skipped with a warning."""
    for path in _checkpoints(Path(directory)):
        problem = verify(path)
        if problem is None:
            return path
        warnings.warn(f"skipping checkpoint {path}: {problem}", stacklevel=2)
    return None


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # a foreign or damaged file
        raise UserError(f"cannot read checkpoint ({type(error).__name__}: {str(error).splitlines()[0][:200]})",
                        where=str(path), fix="delete it or point --out at another directory") from None


def check_resumable(state: dict[str, Any], model_config: dict, train_config: dict, *, where: str) -> None:
    """Refuse to resume a checkpoint made for another model or recipe, naming the differing fields."""
    differing = [f"model.{k}" for k in sorted(set(model_config) | set(state["model_config"]))
                 if model_config.get(k) != state["model_config"].get(k)]
    differing += [f"train.{k}" for k in sorted(set(train_config) | set(state["train_config"]))
                  if k not in RESUME_TOLERANT_FIELDS and train_config.get(k) != state["train_config"].get(k)]
    if differing:
        shown = ", ".join(f"{f} (checkpoint {_get(state, f)!r}, requested {_get_req(f, model_config, train_config)!r})"
                          for f in differing[:4]) + (", ..." if len(differing) > 4 else "")
        raise UserError(f"checkpoint was made for a different run: {shown}", where=where,
                        fix="use another --out directory, or the original settings to resume")


def _get(state: dict, field: str):
    section, key = field.split(".", 1)
    return state[f"{section}_config"].get(key)


def _get_req(field: str, model_config: dict, train_config: dict):
    section, key = field.split(".", 1)
    return (model_config if section == "model" else train_config).get(key)


def load_model_from_run(out_dir: str | os.PathLike, *, map_location: str | torch.device = "cpu"):
    """(ExoTransformer, ModelConfig) from the newest verified checkpoint of a run directory, in eval mode."""
    from exoformer.model import ExoTransformer
    from exoformer.model.config import ModelConfig

    path = latest_checkpoint(Path(out_dir) / "checkpoints")
    if path is None:
        raise UserError("no complete checkpoint", where=str(Path(out_dir) / "checkpoints"),
                        fix="train the run first (python -m exoformer.train ...)")
    state = load_checkpoint(path, map_location)
    config = ModelConfig.from_dict(state["model_config"], where=str(path))
    model = ExoTransformer(config)
    model.load_state_dict(state["model"])
    return model.eval(), config
