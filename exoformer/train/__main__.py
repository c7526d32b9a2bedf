"""`python -m exoformer.train`: one training run (resumes from --out when a checkpoint is there).

Exit codes: 0 done (or already finished), 2 bad input, 75 stopped by SIGTERM/SIGUSR2 (requeue and rerun).
"""

from __future__ import annotations

import argparse
import logging
import sys

from exoformer.errors import UserError
from exoformer.train.config import PRECISIONS, TrainConfig

EXIT_BAD_INPUT = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m exoformer.train", description=__doc__.splitlines()[0])
    parser.add_argument("--variant", required=True, help="a variant name (experiments/variants.yaml)")
    parser.add_argument("--shape", required=True, help="a shape name, e.g. smoke, 450m")
    parser.add_argument("--steps", type=int, help="optimizer steps (default: the smoke preset's for --shape smoke "
                                                  "(experiments/presets.yaml), else the paper's 38,147)")
    parser.add_argument("--batch-tokens", type=int, help="global tokens per optimizer step")
    parser.add_argument("--seq-len", type=int, help="tokens per packed sequence (default: the shape's)")
    parser.add_argument("--micro-batch-seqs", type=int, help="sequences per micro-batch per rank")
    parser.add_argument("--data", required=True, help="'smoke', a dataset name, or a directory of token shards")
    parser.add_argument("--out", required=True, help="run directory (checkpoints/, metrics.jsonl)")
    parser.add_argument("--seed", type=int, help="seed of model init, data order and every RNG (default 42)")
    parser.add_argument("--precision", choices=PRECISIONS, help="default auto: bf16 autocast on GPU, fp32 on CPU")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    return parser.parse_args(argv)


def build_configs(args: argparse.Namespace):
    """(ModelConfig, TrainConfig) from the flags; --shape smoke starts from the registry's smoke preset."""
    from exoformer.harness.smoke_recipe import smoke_train_fields
    from exoformer.model.variants import variant_config

    model_overrides = {"seq_len": args.seq_len} if args.seq_len else {}
    model_config = variant_config(args.variant, args.shape, **model_overrides)
    fields = smoke_train_fields() if args.shape == "smoke" else {}
    fields["seq_len"] = model_config.seq_len
    fields["data"] = args.data
    for flag, field in (("steps", "steps"), ("batch_tokens", "batch_tokens"), ("seed", "seed"),
                        ("precision", "precision"), ("micro_batch_seqs", "micro_batch_seqs")):
        if getattr(args, flag) is not None:
            fields[field] = getattr(args, flag)
    if args.compile:
        fields["compile"] = True
    defaults = TrainConfig()
    batch_tokens = fields.get("batch_tokens", defaults.batch_tokens)
    if args.micro_batch_seqs is None:  # never more sequences per micro-batch than the whole batch holds
        per_step = max(1, batch_tokens // fields["seq_len"])
        fields["micro_batch_seqs"] = min(fields.get("micro_batch_seqs", defaults.micro_batch_seqs), per_step)
    return model_config, TrainConfig(**fields)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        model_config, train_config = build_configs(args)
        from exoformer.train.loop import EXIT_PREEMPTED, train

        result = train(model_config, train_config, args.out)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if result.interrupted:
        return EXIT_PREEMPTED
    loss = "n/a" if result.final_train_loss is None else f"{result.final_train_loss:.4f}"
    print(f"done: {result.step} steps, {result.tokens:,} tokens, final train loss {loss}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
