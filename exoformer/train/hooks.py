"""The training loop's periodic work as named hooks on one training state (exoformer/train/loop.py runs them).

After each update the loop hands every hook of HOOKS the state and what the update produced; each hook whose
`due` says so runs, in the order of HOOKS. That order is part of what a run writes: the train line of a step
goes to metrics.jsonl before its validation line, and both before its checkpoint, so that a run resumed from
that checkpoint keeps both lines (exoformer.train.state.MetricsLog drops lines after the step resumed from).
A new periodic task is one more Hook in HOOKS.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from exoformer.data.loader import TrainBatches
from exoformer.model.config import ModelConfig
from exoformer.rundir import VAL_CE_KEY, VAL_CURVE_KEY
from exoformer.train import distributed as dist_util
from exoformer.train.checkpoint import save_checkpoint
from exoformer.train.config import TrainConfig
from exoformer.train.finite import check_finite_model
from exoformer.train.progress import Progress
from exoformer.train.schedule import lr_multiplier_for, momentum_for
from exoformer.train.state import MetricsLog, rng_state
from exoformer.train.tensorboard import EventWriter

CHECKPOINT_FORMAT = 1


@dataclass(kw_only=True, slots=True)
class TrainState:
    """One run's training: its configuration and device, the model, optimisers and data order a checkpoint
    saves, the counters, and the writers of what the run shows (metrics.jsonl, progress, TensorBoard; each
    None or disabled on ranks other than 0)."""

    model_config: ModelConfig
    cfg: TrainConfig
    env: dist_util.DistEnv
    device: torch.device
    precision: str
    checkpoints: Path
    model: nn.Module
    muon: torch.optim.Optimizer
    adamw: torch.optim.Optimizer
    loader: TrainBatches
    forward: nn.Module
    """The loss module the update calls: LossForward, wrapped for data parallelism and compiled as configured."""
    autocast: AbstractContextManager[Any]
    accumulation: int
    """Micro-batches per rank and update."""
    validation_losses: Callable[[], dict[str, float]]
    """Both validation conventions (exoformer.train.loss.validation_conventions) of the model as it is now,
    on the run's validation batches; every rank calls it (the batches are split across ranks)."""
    progress: Progress
    metrics: MetricsLog | None = None
    board: EventWriter | None = None
    step: int = 0
    """Updates done."""
    tokens: int = 0
    last_loss: float | None = None

    def checkpoint(self) -> dict[str, Any]:
        """What checkpoint `step` holds: everything an exact resume restores, and the configs it must match."""
        cfg = self.cfg
        return {
            "format": CHECKPOINT_FORMAT, "step": self.step, "tokens": self.tokens, "final_train_loss": self.last_loss,
            "model": self.model.state_dict(), "muon": self.muon.state_dict(), "adamw": self.adamw.state_dict(),
            "schedule": {"lr_multiplier": lr_multiplier_for(cfg, self.step),
                         "muon_momentum": momentum_for(cfg, self.step)},
            "loader": self.loader.state_dict(), "rng": rng_state(), "world_size": self.env.world_size,
            "model_config": self.model_config.to_dict(), "train_config": cfg.to_dict(),
        }

    def close(self) -> None:
        if self.metrics:
            self.metrics.close()
        if self.board:
            self.board.close()


@dataclass(kw_only=True, frozen=True, slots=True)
class Update:
    """What one update produced (the state's counters already count it)."""

    step: int
    tokens: int
    loss: float
    """Mean training loss of the update over every rank's micro-batches."""
    grad_norm: float
    lr: float
    seconds: float
    tokens_per_s: float
    stop: bool
    """Some rank was asked to stop (SIGTERM/SIGUSR2): save now, then return."""


@dataclass(frozen=True, slots=True)
class Hook:
    """One periodic task: it runs after an update when `due(state, update)`."""

    name: str
    due: Callable[[TrainState, Update], bool]
    run: Callable[[TrainState, Update], None]


def every_update(state: TrainState, update: Update) -> bool:
    return True


def log_train(state: TrainState, update: Update) -> None:
    """The update's line of metrics.jsonl (rank 0)."""
    if state.metrics:
        state.metrics.write({"kind": "train", "step": update.step, "tokens": update.tokens, "loss": update.loss,
                             "lr": update.lr, "grad_norm": update.grad_norm, "ms_per_step": 1000 * update.seconds,
                             "tokens_per_s": update.tokens_per_s})


def show_progress(state: TrainState, update: Update) -> None:
    state.progress.update(update.step, loss=update.loss, tokens_per_s=update.tokens_per_s, lr=update.lr)


def board_train(state: TrainState, update: Update) -> None:
    """The update's scalars in the TensorBoard event file, when the run writes one (rank 0)."""
    if state.board:
        state.board.scalars(update.step, {"train/loss": update.loss, "train/lr": update.lr,
                                          "train/grad_norm": update.grad_norm,
                                          "train/tokens_per_s": update.tokens_per_s})


def validation_due(state: TrainState, update: Update) -> bool:
    every = state.cfg.val_every
    return bool(every) and (update.step % every == 0 or update.step == state.cfg.steps)


def validate(state: TrainState, update: Update) -> None:
    """Validation loss on the run's validation batches: its line of metrics.jsonl, a note, TensorBoard."""
    val = state.validation_losses()
    official, ce = val["val_loss"], val["val_loss_ce"]
    if state.metrics:
        state.metrics.write({"kind": "val", "step": update.step, "tokens": update.tokens, VAL_CURVE_KEY: official,
                             VAL_CE_KEY: ce})
    state.progress.note(f"step {update.step}: {VAL_CURVE_KEY} {official:.4f}")
    if state.board:
        state.board.scalars(update.step, {"val/loss_official": official, "val/loss_ce": ce})


def checkpoint_due(state: TrainState, update: Update) -> bool:
    """Every checkpoint_every steps, at a ladder's branch points (keep_every), at the end, and on a stop."""
    cfg = state.cfg
    pinned = bool(cfg.keep_every) and update.step % cfg.keep_every == 0
    return update.step % cfg.checkpoint_every == 0 or pinned or update.step == cfg.steps or update.stop


def save(state: TrainState, update: Update) -> None:
    """Checkpoint `step` (rank 0 writes, every rank waits), after checking the weights are finite."""
    check_finite_model(update.step, state.model)
    if state.env.is_main:
        save_checkpoint(state.checkpoints, update.step, state.checkpoint(), keep=state.cfg.keep_checkpoints,
                        keep_every=state.cfg.keep_every)
    dist_util.barrier()


HOOKS: tuple[Hook, ...] = (
    Hook("log", every_update, log_train),
    Hook("progress", every_update, show_progress),
    Hook("tensorboard", every_update, board_train),
    Hook("validate", validation_due, validate),
    Hook("checkpoint", checkpoint_due, save),
)
"""The periodic work after each update, in order (module docstring)."""


def run_hooks(state: TrainState, update: Update, hooks: tuple[Hook, ...] = HOOKS) -> None:
    for hook in hooks:
        if hook.due(state, update):
            hook.run(state, update)
