"""The `validate` and `evaluate` stages of a run (docs/architecture.md "Runs").

`validate_stage`: the final validation perplexity of the run's final checkpoint on `train.final_val_tokens`
tokens -> `eval/validation.json`, which also holds its long-format rows (task "validation"): "ppl" and "loss"
in the paper's convention (the author's estimate_loss: per-batch mean of the training criterion, z-loss as
its flash path counts it; exoformer.train.loss.validation_conventions), "ppl_ce" and "loss_ce" the pure cross-entropy.
`evaluate_stage`: lm-eval on the spec's suite (`eval.suite`, `eval.num_fewshot`, `eval.batch_size`,
`eval.limit`) at the scoring precision `eval.precision` -> `eval/results.json` (lm-eval's dict without
per-sample logs), `eval/long.jsonl` (one row per task and metric, each naming its scoring precision) and
`eval/samples.json` (per-document metrics, exoformer/eval/samples.py). It is the one scoring path of every
source: a checkpoint run (`evaluate PATH --as ROW`) runs this same stage, so the same weights give the same
cells either way. Both read only the verified checkpoint of the final step
(exoformer.train.checkpoint.load_final_checkpoint): a missing or damaged one is a UserError naming the
file, so the stage fails instead of scoring an earlier step. Both write atomically and return a small
summary for `stages/<name>.json`; the evaluate stage's holds the sha256 of the bytes of `eval/samples.json`
(`samples_sha256`), which pins the order of the per-document scores (exoformer/runs/verify.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from exoformer.io import atomic_write_bytes, atomic_write_json, atomic_write_text
from exoformer.stage import StageContext

VALIDATION_TASK = "validation"
VALIDATION_METRICS = {"ppl": "val_ppl", "loss": "val_loss", "ppl_ce": "val_ppl_ce", "loss_ce": "val_loss_ce"}
"""Long-row metric -> key of exoformer.train.loop.final_validation's result."""
SAMPLES_DIGEST_KEY = "samples_sha256"
"""The key of the evaluate stage's record (`stages/evaluate.json` "result") holding the sha256 of the bytes of
`eval/samples.json` it wrote (checked by exoformer/runs/verify.py)."""


def stage_device(ctx: StageContext) -> str:
    """The device the stage runs on: the pipeline's (the job's accelerator), else this process's default."""
    if ctx.device is not None:
        return str(ctx.device)
    from exoformer.train import distributed as dist_util

    return str(dist_util.pick_device(None, dist_util.distributed_env()))


def validation_rows(result: dict[str, Any], *, spec: str, seed: int) -> list[dict[str, Any]]:
    """Long rows of a final validation, both conventions (no stderr: one deterministic pass), n = tokens scored."""
    return [{"spec": spec, "seed": seed, "task": VALIDATION_TASK, "metric": metric, "value": float(result[key]),
             "stderr": None, "n": int(result["tokens"])}
            for metric, key in VALIDATION_METRICS.items()]


def validate_stage(ctx: StageContext) -> dict[str, Any]:
    """Final validation loss / perplexity from the verified final checkpoint -> eval/validation.json."""
    from exoformer.train.loop import final_validation

    spec, run_dir, files = ctx.spec, Path(ctx.run_dir), ctx.files
    ctx.say(f"validate: {spec.train.final_val_tokens:,} validation tokens")
    result = final_validation(spec.model, spec.train, run_dir, device=ctx.device)
    from exoformer.train.distributed import group_rank_and_size

    if group_rank_and_size()[0] != 0:  # a share of a multi-rank validation: rank 0 writes the gathered result
        return {}
    record = {**result, "rows": validation_rows(result, spec=spec.name, seed=spec.seed)}
    atomic_write_json(files.validation, record)
    ctx.say(f"validate: val_loss {result['val_loss']:.4f}, ppl {result['val_ppl']:.3f} (paper convention), "
            f"cross-entropy ppl {result['val_ppl_ce']:.3f} on {result['tokens']:,} tokens")
    return {"val_loss": result["val_loss"], "val_ppl": result["val_ppl"], "val_ppl_ce": result["val_ppl_ce"],
            "tokens": result["tokens"],
            "file": files.display(files.validation)}


def evaluate_stage(ctx: StageContext) -> dict[str, Any]:
    """lm-eval on the spec's suite with the run's own tokenizer -> eval/results.json and eval/long.jsonl."""
    from exoformer.data.tokenizer import for_data
    from exoformer.eval.precision import check_local_scoring_device
    from exoformer.eval.run import dumps, evaluate, long_rows
    from exoformer.eval.samples import samples_file
    from exoformer.eval.scoring import scoring_model
    from exoformer.train.checkpoint import load_model_from_run
    from exoformer.train.loop import resolve_data_dir

    spec, run_dir, files = ctx.spec, Path(ctx.run_dir), ctx.files
    device = stage_device(ctx)
    model, _ = load_model_from_run(run_dir, steps=spec.train.steps, map_location=device)
    ev = spec.eval
    check_local_scoring_device(ev.precision, device, where=f"{spec.name}: eval.precision")
    model = scoring_model(model, ev.precision)
    tokenizer = for_data(resolve_data_dir(spec.train.data))  # compact vocabulary for smoke runs, else GPT-2
    ctx.say(f"evaluate: suite {ev.suite}, {ev.num_fewshot}-shot, batch {ev.batch_size}, scoring {ev.precision}"
            + (f", limit {ev.limit}" if ev.limit else ""))
    results = evaluate(model, tokenizer, ev.suite, num_fewshot=ev.num_fewshot, batch_size=ev.batch_size,
                       limit=ev.limit, device=device, precision=ev.precision, keep_samples=True)
    if results is None:  # a share of a multi-rank evaluation: rank 0 received the metrics and writes them
        return {}
    per_sample = results.pop("per_sample")
    rows = [{**row, "precision": ev.precision} for row in long_rows(results, spec=spec.name, seed=spec.seed)]
    samples = (json.dumps(per_sample, indent=2) + "\n").encode("utf-8")  # what atomic_write_json writes
    atomic_write_bytes(samples_file(run_dir), samples)
    atomic_write_text(files.eval_results, dumps(results))
    files.write_rows(files.eval_rows, rows)
    summary = {f"{r['task']}/{r['metric']}": r["value"] for r in rows}
    ctx.say("evaluate: " + ", ".join(f"{k} {v:.4f}" for k, v in summary.items() if v is not None))
    return {"suite": ev.suite, "rows": len(rows), "metrics": summary, "precision": ev.precision,
            "file": files.display(files.eval_rows), SAMPLES_DIGEST_KEY: hashlib.sha256(samples).hexdigest()}
