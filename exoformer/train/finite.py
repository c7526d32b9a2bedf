"""No non-finite number is a result: a diverged training run stops FAILED, and weights with NaN or inf are refused.

A training loss or gradient norm that is NaN or inf means the weights are (or are about to be) broken, and an
update can itself make them so: the loop stops before it writes the metrics line of that step, and checks the
weights before each checkpoint, so the newest checkpoint on disk is the last good one (from
`train.checkpoint_every`) and the run ends FAILED with "diverged at step N". A checkpoint whose tensors hold
NaN or inf cannot be evaluated into a table row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from exoformer.errors import UserError

FIX = "lower train.adam_lr / train.muon_lr or keep train.grad_clip at 1.0, then re-run with --force"


def check_finite_step(step: int, loss: float, grad_norm: float, *, where: str = "train") -> None:
    """UserError "diverged at step N" when the loss or the gradient norm of update `step` is not finite."""
    for what, value in (("training loss", loss), ("gradient norm", grad_norm)):
        if not math.isfinite(value):
            raise UserError(f"diverged at step {step}: the {what} is {value}; the last good checkpoint is kept",
                            where=where, fix=FIX)


def check_finite_model(step: int, model: torch.nn.Module, *, where: str = "train") -> None:
    """UserError "diverged at step N" when update `step` left NaN or inf in a parameter (checked before saving)."""
    bad = nonfinite_tensors(dict(model.named_parameters()))
    if bad:
        raise UserError(f"diverged at step {step}: the update left NaN or inf in {bad[0]}; the last good checkpoint "
                        "is kept", where=where, fix=FIX)


def nonfinite_tensors(state: Mapping[str, object]) -> list[str]:
    """Names of the floating-point tensors of a state dict that hold NaN or inf."""
    return [name for name, value in state.items()
            if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all())]


def check_finite_weights(state: Mapping[str, object], *, where: str) -> None:
    """UserError naming the first tensors with NaN or inf, when there are any."""
    bad = nonfinite_tensors(state)
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise UserError(f"the checkpoint's weights are not finite (NaN or inf in {len(bad)} tensors: {shown})",
                        where=where, fix="evaluate an earlier checkpoint of the run, or re-train it")
