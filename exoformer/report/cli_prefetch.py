"""`prefetch`: on a machine with internet, fetch task data, tokenizer check and FineWeb-Edu shards.

(The verb lives with the report verbs for file ownership; the work is exoformer.eval.prefetch.)
"""

from __future__ import annotations

import argparse

from exoformer.eval.prefetch import FINEWEB_MAX_TRAIN_SHARDS
from exoformer.harness.registry import REPO_ROOT

HELP = "download and verify lm-eval task data and FineWeb-Edu shards for offline compute nodes (needs internet)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=str(REPO_ROOT / "data"), metavar="DIR",
                        help="where to write tasks/ and finewebedu10B/ (default: data/ in the repository, where "
                             "training looks for FineWeb-Edu when EXOFORMER_DATA_DIR is unset)")
    parser.add_argument("--fineweb-shards", type=int, default=FINEWEB_MAX_TRAIN_SHARDS, metavar="N",
                        help="FineWeb-Edu train shards of 100M tokens to fetch "
                             f"(default all {FINEWEB_MAX_TRAIN_SHARDS})")


def run(args: argparse.Namespace) -> int:
    from exoformer.eval.prefetch import prefetch

    prefetch(args.out, fineweb_shards=args.fineweb_shards)
    return 0
