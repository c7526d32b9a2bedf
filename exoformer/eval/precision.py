"""Scoring precision: how the evaluate stage computes log-probabilities, an explicit, hashed eval setting.

`bf16` (the default for every source, our runs and checkpoint rows alike) scores as the author's run_eval.py
does (docs/official_code.md section 5 and hazard H4): every Linear and Embedding weight cast to bf16
(`to_mixed_precision`), no autocast (matmuls in bf16, bf16 logits), the log-softmax taken on bf16 logits and
a continuation's log-probs summed in bf16, each step written out in exoformer/eval/scoring.py so that CPU and
CUDA compute the same thing. Cells scored so are
comparable with the paper's. `fp32` is the named alternative: fp32 weights, fp32 matmuls and an fp32
log-softmax, for when accuracy matters more than matching the paper (H4: bf16 log-probs can flip close
multiple-choice decisions). A cell scored at another precision than its table's reference recipe is marked
not comparable (report/reading/recipe.py compares `eval.precision` like any other field). Torch-free at import.
"""

from __future__ import annotations

from typing import Any

from exoformer.errors import UserError, did_you_mean

SCORING_PRECISIONS = {"bf16": "the author's run_eval.py: bf16 weights, no autocast, log-softmax on bf16 logits, "
                             "log-probs summed in bf16",
                      "fp32": "fp32 weights, matmuls and log-softmax"}
DEFAULT_SCORING = "bf16"


def check_scoring_precision(precision: Any, *, where: str = "eval.precision") -> str:
    """`precision` if it is a known scoring precision, else a UserError naming the field."""
    if precision not in SCORING_PRECISIONS:
        raise UserError(f"unknown scoring precision {precision!r}", where=where,
                        fix=did_you_mean(str(precision), SCORING_PRECISIONS))
    return precision


def check_scoring_device(precision: str, *, kind: str, name: str, bf16: bool, where: str = "eval.precision") -> None:
    """bf16 scoring needs a device that computes bf16 (CPUs do, slowly; CUDA from compute capability 8.0)."""
    if precision == "bf16" and not bf16:
        raise UserError(f"scoring precision 'bf16' needs bf16, which {name} ({kind}) does not compute "
                        "(compute capability < 8.0)", where=where,
                        fix="--set eval.precision=fp32 (not comparable with the paper), or a bf16 GPU (A100, H100)")


def check_local_scoring_device(precision: str, device: Any, *, where: str = "eval.precision") -> None:
    """check_scoring_device for the torch device a stage is about to score on."""
    import torch

    device = torch.device(str(device) if device is not None else "cpu")
    if device.type != "cuda":
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    check_scoring_device(precision, kind="cuda", name=torch.cuda.get_device_name(index),
                         bf16=torch.cuda.get_device_capability(index) >= (8, 0), where=where)
