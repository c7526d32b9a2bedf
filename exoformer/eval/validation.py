"""Final validation in the paper's convention and in pure cross-entropy, from one pass over the validation data.

The paper's perplexities come from the author's `estimate_loss` (train.py; docs/official_code.md 4.5 and
hazard H3): for each validation batch the training criterion's mean over its tokens, which with flash-attn
counts the z term twice (CE + 2 * z_loss * mean(lse^2), 4.4), then the unweighted mean over batches, and
perplexity = exp of that mean (docs/paper.md "Evaluation code"). So:
- `val_loss` / `val_ppl`: that convention (what `table` shows and `diff` compares with the paper);
- `val_loss_ce` / `val_ppl_ce`: the token-weighted mean of pure cross-entropy and its exp, the usual
  definition, kept as its own metric.
The batches are the validation stream in order, `train.micro_batch_seqs` sequences each (the author's
batch of 16 x 2,048 under the 450m preset), the forward as in training (train.precision, document masking).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def batch_criteria(model, batches, *, device, precision: str, doc_masking: bool, z_loss: float) -> dict[str, Any]:
    """Per-batch (mean CE, mean lse^2, tokens) and both conventions' losses over `batches`."""
    import torch

    from exoformer.train.loop import autocast_for
    from exoformer.train.loss import lm_loss, official_logged_loss

    was_training = model.training
    model.eval()
    per_batch = []
    with torch.no_grad():
        for batch in batches:
            x, y = batch.x.to(device), batch.y.to(device)
            with autocast_for(precision, device):
                logits = model(x, batch.doc_starts.to(device) if doc_masking else None)
            _, ce, z = lm_loss(logits, y, 0.0)
            per_batch.append((float(ce), float(z), int(y.numel())))
    model.train(was_training)
    tokens = sum(n for _, _, n in per_batch)
    if not per_batch or tokens == 0:
        return {"val_loss": math.nan, "val_ppl": math.nan, "val_loss_ce": math.nan, "val_ppl_ce": math.nan,
                "tokens": 0, "batches": 0}
    official = sum(official_logged_loss(ce, z, z_loss) for ce, z, _ in per_batch) / len(per_batch)
    ce_mean = sum(ce * n for ce, _, n in per_batch) / tokens
    return {"val_loss": official, "val_ppl": math.exp(official), "val_loss_ce": ce_mean,
            "val_ppl_ce": math.exp(ce_mean), "tokens": tokens, "batches": len(per_batch)}


def final_validation(model_config, train_config, out_dir: str | Path, *, device=None) -> dict[str, Any]:
    """Both conventions on the first `train.final_val_tokens` validation tokens, from the verified final checkpoint
    (a missing or damaged one is a UserError naming it)."""
    from exoformer.data.loader import validation_batches
    from exoformer.train import distributed as dist_util
    from exoformer.train.checkpoint import check_resumable, checkpoint_dir, checkpoint_name, load_final_checkpoint
    from exoformer.train.loop import (
        _default_builder,
        eot_id_for,
        resolve_data_dir,
        resolve_precision,
        to_official_pure_bf16,
    )

    device = dist_util.pick_device(device, dist_util.distributed_env())
    state = load_final_checkpoint(out_dir, train_config.steps)
    check_resumable(state, model_config.to_dict(), train_config.to_dict(),
                    where=str(checkpoint_dir(out_dir) / checkpoint_name(train_config.steps)))
    model = _default_builder(model_config)
    precision = resolve_precision(train_config.precision, device)
    if precision == "official-pure-bf16":
        to_official_pure_bf16(model)
    model.load_state_dict(state["model"])
    model.to(device)
    data_dir = resolve_data_dir(train_config.data)
    batches = validation_batches(data_dir, seq_len=train_config.seq_len, batch_seqs=train_config.micro_batch_seqs,
                                 max_seqs=max(1, train_config.final_val_tokens // train_config.seq_len),
                                 vocab_size=model_config.vocab_size, eot=eot_id_for(data_dir))
    result = batch_criteria(model, batches, device=device, precision=precision, doc_masking=train_config.doc_masking,
                            z_loss=train_config.z_loss)
    return {**result, "step": state["step"]}
